//! Whether a call may run: the policies' verdict (deny, hold for a
//! person's approval, redact), and the key's tool-call rate.

use serde_json::Value;
use toolgate::canonical_json;
use toolgate_config::format::AuditArguments;

use crate::catalog::Catalog;
use crate::governance::approvals::{Ask, Binding, Outcome};
use crate::governance::audit::AuditLog;
use crate::governance::limits::{Rate, Refused};
use crate::governance::policy::Verdict;
use crate::tools::tool::context::CallContext;
use crate::tools::tool::{Tool, ToolError};

use super::CallError;

use super::Executor;

impl Executor {
    /// What the policies and the approvals say of a call about to run
    /// (`tool`, when the catalog has it, for its annotations): `Ok` to run
    /// it. A call that needs an approval waits here for one, up to
    /// `approvals.wait`.
    pub async fn authorize(
        &self,
        catalog: &Catalog,
        tool: Option<&Tool>,
        name: &str,
        arguments: &Value,
        ctx: &CallContext,
    ) -> Result<(), CallError> {
        let caller = crate::governance::policy::Caller::of(ctx);
        let verdict = crate::governance::policy::check(&catalog.policies, name, arguments, caller)
            .map_err(ToolError::Refused)?;
        let settings = &catalog.settings.approvals;
        let why = match verdict {
            Verdict::Approve { policy, reason } => match reason {
                Some(reason) => format!("policy `{policy}`: {reason}"),
                None => format!("policy `{policy}`"),
            },
            Verdict::Allow
                if settings.destructive
                    && tool.is_some_and(|t| t.annotations.destructive_hint == Some(true)) =>
            {
                "the tool says it is destructive (approvals.destructive)".to_owned()
            }
            Verdict::Allow => return Ok(()),
        };
        let shown =
            if crate::governance::policy::redacts(&catalog.policies, name, arguments, caller) {
                None
            } else {
                let mode = self
                    .audit
                    .as_ref()
                    .map_or(AuditArguments::Redacted, AuditLog::arguments_mode);
                crate::governance::audit::render_arguments(
                    mode,
                    tool.map(|t| &*t.parameters),
                    arguments,
                )
                .0
            };
        let binding = Binding {
            key: ctx.key.clone(),
            subject: ctx.subject.clone(),
            project: ctx.project().map(str::to_owned),
            tool: name.to_owned(),
            arguments_sha256: crate::governance::audit::sha256_hex(&canonical_json(arguments)),
            policy_version: catalog.policy_version.clone(),
        };
        match self.approvals.ask(binding, shown, why, settings).await {
            Err(reason) => Err(ToolError::Refused(reason).into()),
            Ok(Ask::Run { .. }) => Ok(()),
            Ok(Ask::Wait { id, decision }) => {
                match self.approvals.wait(&id, decision, settings.wait).await {
                    Outcome::Run { .. } => Ok(()),
                    Outcome::Refused(reason) => Err(ToolError::Refused(reason).into()),
                    Outcome::NotYet(reason) => Err(CallError::Unapproved(reason)),
                }
            }
        }
    }

    /// Counts one tool call against the per-minute budget of the caller's
    /// key (`tool_calls_per_minute`): every call, whatever runs it (the
    /// executor, or the loop for `spawn`), spends one.
    pub async fn spend_tool_call(
        &self,
        catalog: &Catalog,
        ctx: &CallContext,
    ) -> Result<(), CallError> {
        if let (Some(rates), Some(key)) = (&self.rates, &ctx.key)
            && let Some(per_minute) = catalog
                .keys()
                .by_name(key)
                .and_then(|k| k.tool_calls_per_minute)
            && let Err(refused) = rates.check(key, Rate::ToolCalls, per_minute).await
        {
            return Err(match refused {
                Refused::Limited(wait) => CallError::RateLimited(wait),
                Refused::Unavailable => CallError::failed(
                    "the tool-call rate limit of this API key cannot be checked: the shared state (Redis) is unavailable; retry shortly",
                ),
            });
        }
        Ok(())
    }
}
