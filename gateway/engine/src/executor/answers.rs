//! What MCP servers answer besides a tool's result — a prompt, a resource,
//! a completion, a task's result — on its way to the client: checked like
//! a tool's result (`output::checked`), counted in the metrics and written
//! to the audit log. The caller's key spends its tool-call rate on each such
//! request in `callers::ask_as_caller`, which every one of them goes
//! through; nothing of them is cached (a server's prompt or resource may
//! change at any time, and has no declaration that says how long it holds).

use std::time::Instant;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::governance::audit::AuditEntry;
use crate::tools::tool::context::CallContext;

use super::output::json_len;
use super::{CallError, Executor};

/// What was asked of an MCP server, for the checks and the audit log.
#[derive(Debug, Clone, Copy)]
pub struct Answered<'a> {
    /// The request: `prompts/get`, `resources/read`,
    /// `completion/complete`, `tasks/get`.
    pub method: &'static str,
    /// What it was about: the prompt's name, the resource's URI, the
    /// task's server.
    pub about: &'a str,
    /// Its arguments (a prompt's), written to the audit log as a call's.
    pub arguments: &'a Value,
}

impl Executor {
    /// `answer`, the answer to `asked` for the caller of `ctx` asked at
    /// `started`, checked by the guards and the classifier (redacted in
    /// place), counted and audited (as the tool `<method> <about>`).
    /// Returns the notes the reader reads first, or the error that blocks
    /// the answer.
    pub async fn answered(
        &self,
        catalog: &Catalog,
        ctx: &CallContext,
        asked: Answered<'_>,
        answer: &mut Value,
        started: Instant,
    ) -> Result<Vec<String>, CallError> {
        let what = format!("{} {}", asked.method, asked.about);
        let checked = self
            .checked(catalog, &what, answer, &mut None)
            .await
            .map_err(CallError::from);
        let outcome = checked.as_ref().err().map_or("ok", CallError::code);
        let duration = started.elapsed();
        // By method, not by what it was about: a label per prompt or URI
        // would grow the metrics without bound.
        crate::support::metrics::record(|m| m.tool_call(asked.method, outcome, duration, false));
        if self.keeps_calls() {
            let (arguments, arguments_sha256) = crate::governance::audit::render_arguments(
                self.arguments_mode(),
                None,
                asked.arguments,
            );
            let bytes = match &checked {
                Ok(_) => json_len(answer),
                Err(e) => e.to_string().len(),
            };
            // What it was about is the client's own text: a URI may hold
            // a secret as an argument may (read percent-decoded, as the
            // server reads it).
            let about = percent_encoding::percent_decode_str(asked.about).decode_utf8_lossy();
            let what =
                crate::governance::guards::without_secrets(&format!("{} {about}", asked.method));
            self.keep(AuditEntry {
                ts: crate::governance::audit::now_rfc3339(),
                request_id: ctx.request_id.clone(),
                key: ctx.key.clone(),
                subject: ctx.subject.clone(),
                tool_set: ctx.tool_set.clone(),
                tool: what,
                call_id: String::new(),
                arguments,
                arguments_sha256,
                outcome,
                duration_ms: duration.as_secs_f64() * 1000.0,
                bytes,
                cached: false,
                truncated: false,
            })
            .await;
        }
        checked
    }
}
