//! What a finished call leaves behind: its metrics, its audit line and
//! the console's recent activity.

use std::time::Duration;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::governance::audit::AuditEntry;
use crate::governance::audit::AuditLog;
use crate::tools::tool::context::CallContext;
use toolgate_config::format::AuditArguments;

use super::output::json_len;
use super::{Executor, ToolCall, ToolResult};

impl Executor {
    /// Counts a finished call in the metrics and writes it to the audit log.
    /// [`run`](Self::run) does it for the calls it runs; callers that refuse
    /// a call themselves (e.g. a tool outside the request's set) call it
    /// with their error result.
    pub async fn record(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        result: &ToolResult,
    ) {
        let caller = ctx.subject.as_deref();
        let tool = catalog.tool_for(&call.name, ctx.tool_set.as_deref(), caller);
        // Names the catalog does not know are the model's inventions:
        // counted together, so they cannot grow the metrics without bound.
        let label = if tool.is_some() || catalog.unavailable_tool_as(&call.name, caller).is_some() {
            call.name.as_str()
        } else {
            "unknown"
        };
        let outcome = result.error.as_ref().map_or("ok", super::CallError::code);
        let duration = Duration::from_secs_f64(result.duration_ms.max(0.0) / 1000.0);
        crate::support::metrics::record(|m| m.tool_call(label, outcome, duration, result.cached));
        if let Some(spend) = &self.spend {
            let who = crate::governance::spend::Who::of(ctx);
            let success = result.error.is_none();
            if !spend.record_tool_now(&who, label, success) {
                let (spend, tool) = (std::sync::Arc::clone(spend), label.to_owned());
                tokio::spawn(async move { spend.record_tool(&who, &tool, success).await });
            }
        }
        if !self.keeps_calls() {
            return;
        }
        let mut mode = self.arguments_mode();
        let caller = crate::governance::policy::Caller::of(ctx);
        if mode == AuditArguments::Redacted
            && crate::governance::policy::redacts(
                &catalog.policies,
                &call.name,
                &call.arguments,
                caller,
            )
        {
            mode = AuditArguments::Digest;
        }
        let (arguments, arguments_sha256) = crate::governance::audit::render_arguments(
            mode,
            tool.as_ref().map(|t| &*t.parameters),
            &call.arguments,
        );
        let bytes = match (&result.data, &result.error) {
            (_, Some(e)) => e.to_string().len(),
            (Some(Value::String(s)), None) => s.len(),
            (Some(v), None) => json_len(v),
            (None, None) => 0,
        };
        let entry = AuditEntry {
            ts: crate::governance::audit::now_rfc3339(),
            request_id: ctx.request_id.clone(),
            key: ctx.key.clone(),
            subject: ctx.subject.clone(),
            tool_set: ctx.tool_set.clone(),
            tool: call.name.clone(),
            call_id: call.id.clone(),
            arguments,
            arguments_sha256,
            outcome,
            duration_ms: result.duration_ms,
            bytes,
            cached: result.cached,
            truncated: result.truncated,
        };
        self.keep(entry).await;
    }

    /// `true` when finished calls are written somewhere (an audit log, or
    /// the console's recent activity).
    pub(super) fn keeps_calls(&self) -> bool {
        self.audit.is_some() || self.recent.is_some()
    }

    /// How the audit log writes arguments.
    pub(super) fn arguments_mode(&self) -> AuditArguments {
        self.audit
            .as_ref()
            .map_or(AuditArguments::Redacted, AuditLog::arguments_mode)
    }

    /// Writes `entry` to the console's recent activity and the audit log.
    pub(super) async fn keep(&self, entry: AuditEntry) {
        if let Some(recent) = &self.recent {
            recent.push(entry.clone());
        }
        if let Some(audit) = &self.audit {
            audit.record(entry).await;
        }
    }
}
