//! The executor: runs tool calls from a catalog.
//!
//! For each call: look the tool up, validate the arguments against its
//! schema, answer from the cache when the tool has one, run it under its
//! timeout with panics caught, and cut long output with a visible marker.
//! A batch runs with bounded parallelism; identical calls in one batch run
//! once and the copies are marked `skipped`. Nothing is retried: the model
//! decides what to do with a failure. Every outcome is a [`ToolResult`].
//!
//! Every call that reaches the executor is counted in the metrics and, when
//! an audit log is attached, written to it (off the request path); calls of
//! an API key over its tool-call rate limit fail with `rate_limited`.
//!
//! The stages, one file each: `authorize` (policies, approvals, the key's
//! rate), `execute` (lookup, arguments, cache, the tool's kind under its
//! timeout), `output` (the result cut, then checked by the guards and the
//! classifier: the one check every result goes through), `record`
//! (metrics, audit, recent activity); `callers` runs MCP servers'
//! listings and questions as each caller; `answers` checks, counts and
//! audits what MCP servers answer besides tool results.

mod answers;
mod authorize;
mod callers;
mod error;
mod execute;
mod output;
mod record;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use toolgate::canonical_json;
use tracing::Instrument;

/// The shared HTTP client an [`Executor`] is built with.
pub use crate::tools::tool::http::client as http_client;

use crate::catalog::Catalog;
use crate::governance::approvals::Approvals;
use crate::governance::audit::{AuditLog, Recent};
use crate::governance::limits::RateLimits;
use crate::support::shared::Redis;
use crate::tools::tool::context::CallContext;
use crate::tools::tool::{Progress, ProgressSink};

pub use answers::{Answered, Method};
pub use error::CallError;

/// Progress reports of one call waiting to be passed on; beyond, they are
/// dropped (the next one says more).
const PROGRESS_BACKLOG: usize = 32;

/// A progress report of a running call of a batch.
#[derive(Debug, Clone)]
pub struct CallProgress {
    /// The call's id (the model's).
    pub call_id: String,
    pub tool: String,
    pub progress: Progress,
}

/// One call to run.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The caller's id for the call (e.g. the model's `tool_call_id`).
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// The uniform result of a call: `{success, data, error}` plus facts.
#[derive(Debug, Clone, Serialize)]
pub struct ToolResult {
    pub success: bool,
    pub data: Option<Value>,
    pub error: Option<CallError>,
    /// Wall time of the call, in milliseconds.
    pub duration_ms: f64,
    /// The same call appeared earlier in the batch; this is its result.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
    /// Answered from the tool's cache.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// The output was cut to the configured size.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// An MCP tool's result as its server sent it, for clients that read
    /// it (the MCP face); `None` for other tools, and when it is larger
    /// than `limits.max_response_bytes` (then only `data` remains).
    #[serde(skip)]
    pub mcp_result: Option<Arc<Value>>,
    /// What the guards say about the result, for the model to read first
    /// (`guards.*: mark`).
    #[serde(rename = "guard_notes", skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl ToolResult {
    /// A failed call that started at `started`.
    pub fn failure(error: impl Into<CallError>, started: Instant) -> Self {
        ToolResult {
            success: false,
            data: None,
            error: Some(error.into()),
            duration_ms: elapsed_ms(started),
            skipped: false,
            cached: false,
            truncated: false,
            mcp_result: None,
            notes: Vec::new(),
        }
    }

    /// The result as the text a model reads in a tool message (the guards'
    /// notes first).
    pub fn to_model_text(&self) -> String {
        let text = match (&self.data, &self.error) {
            (_, Some(e)) => format!("Error ({}): {e}", e.code()),
            (Some(Value::String(s)), None) => s.clone(),
            (Some(v), None) => v.to_string(),
            (None, None) => String::new(),
        };
        if self.notes.is_empty() {
            return text;
        }
        format!("[{}]\n{text}", self.notes.join("] ["))
    }
}

fn elapsed_ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

/// Runs calls. Cheap to clone; holds the shared HTTP connection pool, the
/// audit log and the per-key tool-call buckets, if any.
#[derive(Debug, Clone)]
pub struct Executor {
    http: reqwest::Client,
    audit: Option<AuditLog>,
    recent: Option<Arc<Recent>>,
    rates: Option<Arc<RateLimits>>,
    shared: Option<Arc<Redis>>,
    approvals: Arc<Approvals>,
    /// Where tool calls are counted, by tool and caller.
    spend: Option<Arc<crate::governance::spend::Spend>>,
}

/// The call's context with the gateway's model answering the server's
/// sampling requests, for a server whose declaration names a model
/// (`sampling`) and a call whose client cannot answer them; `None` when
/// nothing changes.
fn sampling_by_model(
    catalog: &Catalog,
    mcp: &crate::tools::tool::mcp::McpTool,
    ctx: &CallContext,
    spend: Option<&Arc<crate::governance::spend::Spend>>,
) -> Option<CallContext> {
    use crate::tools::tool::mcp::relay::Relay;
    let sampling = mcp.sampling()?;
    let relay = Relay::of(ctx).cloned().unwrap_or_default();
    if relay.sample.is_some() {
        return None;
    }
    let resolved = catalog.upstreams.resolve(&sampling.model)?;
    let counted = spend.map(|spend| sampling_spend(catalog, &resolved, ctx, Arc::clone(spend)));
    let mut ctx = ctx.clone();
    ctx.client = Some(toolgate::ClientLink::new(Relay {
        sample: Some(crate::model::sampling::answerer(
            resolved,
            sampling.max_tokens,
            catalog.settings.limits.max_response_bytes,
            counted,
        )),
        ..relay
    }));
    Some(ctx)
}

/// What counts the spend of the gateway's model answering a server's
/// sampling requests during a call made with `ctx`: the caller's.
fn sampling_spend(
    catalog: &Catalog,
    resolved: &crate::model::routing::Resolved,
    ctx: &CallContext,
    spend: Arc<crate::governance::spend::Spend>,
) -> crate::model::sampling::Counted {
    let who = crate::governance::spend::Who::of(ctx);
    let price = catalog.spend.price(
        resolved
            .terms
            .price
            .map(crate::governance::spend::prices::Price::from),
        &resolved.model,
    );
    Arc::new(move |model, usage, took| {
        spend.count_soon(
            None,
            who.clone(),
            model.to_owned(),
            usage.clone(),
            price,
            took,
        );
    })
}

impl Executor {
    pub fn new(http: reqwest::Client) -> Self {
        Executor {
            http,
            audit: None,
            recent: None,
            rates: None,
            shared: None,
            approvals: Arc::new(Approvals::new()),
            spend: None,
        }
    }

    /// The calls waiting for (or given) a person's approval.
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    /// Keeps the requests for approval in the file `path` too, across
    /// restarts (without `state.redis`).
    pub fn with_approvals_kept_in(mut self, path: std::path::PathBuf) -> Self {
        self.approvals = Arc::new(Approvals::kept(path));
        self
    }

    /// Shares cached results and requests for approval with other
    /// replicas through `redis`.
    pub fn with_shared(mut self, redis: Option<Arc<Redis>>) -> Self {
        if let Some(r) = &redis {
            self.approvals = Arc::new(Approvals::shared(Arc::clone(r)));
        }
        self.shared = redis;
        self
    }

    /// Counts every call in `spend` (by tool, key, user and project).
    pub fn with_spend(mut self, spend: Arc<crate::governance::spend::Spend>) -> Self {
        self.spend = Some(spend);
        self
    }

    /// Writes every call to `audit`.
    pub fn with_audit(mut self, audit: Option<AuditLog>) -> Self {
        self.audit = audit;
        self
    }

    /// Keeps the last calls in `recent` (for the console), their arguments
    /// as the audit log writes them (redacted when there is no audit log).
    pub fn with_recent(mut self, recent: Option<Arc<Recent>>) -> Self {
        self.recent = recent;
        self
    }

    /// The last calls, when they are kept.
    pub fn recent(&self) -> Option<&Arc<Recent>> {
        self.recent.as_ref()
    }

    /// Applies the tool-call rate limits of API keys, counted in `rates`.
    pub fn with_rate_limits(mut self, rates: Arc<RateLimits>) -> Self {
        self.rates = Some(rates);
        self
    }

    /// The audit log, if one is attached.
    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.as_ref()
    }

    /// `true` when tool-call rate limits are applied.
    pub fn has_rate_limits(&self) -> bool {
        self.rates.is_some()
    }

    /// The shared HTTP client.
    pub fn http_client(&self) -> &reqwest::Client {
        &self.http
    }

    /// Runs one call; `ctx` describes the request it belongs to (native
    /// tools receive it, the model never sees it).
    pub async fn run(&self, catalog: &Catalog, call: &ToolCall, ctx: &CallContext) -> ToolResult {
        self.run_reporting(catalog, call, ctx, None).await
    }

    /// [`run`](Self::run), passing the tool's progress reports (MCP tools
    /// that send them) to `progress`.
    pub async fn run_reporting(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        progress: Option<&ProgressSink>,
    ) -> ToolResult {
        let span = tracing::info_span!(
            "tool",
            tool = %call.name,
            call_id = %call.id,
            request_id = %ctx.request_id,
            "otel.name" = %format_args!("execute_tool {}", call.name),
            "gen_ai.operation.name" = "execute_tool",
            "gen_ai.tool.name" = %call.name,
            "gen_ai.tool.call.id" = %call.id,
            "enduser.id" = tracing::field::Empty,
        );
        if let Some(subject) = &ctx.subject {
            span.record("enduser.id", subject.as_str());
        }
        let result = self
            .execute(catalog, call, ctx, progress)
            .instrument(span)
            .await;
        self.record(catalog, call, ctx, &result).await;
        result
    }

    /// Runs one call, passing its progress reports to `out`.
    async fn run_forwarding(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        out: &tokio::sync::mpsc::Sender<CallProgress>,
    ) -> ToolResult {
        let (sink, mut reports) = tokio::sync::mpsc::channel::<Progress>(PROGRESS_BACKLOG);
        let forward = |progress: Progress| {
            let _ = out.try_send(CallProgress {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                progress,
            });
        };
        let run = self.run_reporting(catalog, call, ctx, Some(&sink));
        tokio::pin!(run);
        loop {
            tokio::select! {
                biased;
                Some(p) = reports.recv() => forward(p),
                result = &mut run => {
                    while let Ok(p) = reports.try_recv() {
                        forward(p);
                    }
                    return result;
                }
            }
        }
    }

    /// Runs a batch: identical calls once, at most `defaults.parallelism` at
    /// a time. Results come back in the order of `calls`.
    pub async fn run_batch(
        &self,
        catalog: &Catalog,
        calls: &[ToolCall],
        ctx: &CallContext,
    ) -> Vec<ToolResult> {
        self.run_batch_reporting(catalog, calls, ctx, None).await
    }

    /// [`run_batch`](Self::run_batch), passing each call's progress reports
    /// to `progress` with the call's index in `calls` (dropped, never
    /// waited for, when the receiver is slow).
    pub async fn run_batch_reporting(
        &self,
        catalog: &Catalog,
        calls: &[ToolCall],
        ctx: &CallContext,
        progress: Option<&tokio::sync::mpsc::Sender<CallProgress>>,
    ) -> Vec<ToolResult> {
        // Index of the first occurrence of each distinct call.
        let mut first: HashMap<(String, String), usize> = HashMap::new();
        let mut origin = Vec::with_capacity(calls.len());
        let mut unique = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let key = (call.name.clone(), canonical_json(&call.arguments));
            let slot = *first.entry(key).or_insert_with(|| {
                unique.push(i);
                unique.len() - 1
            });
            origin.push(slot);
        }
        let parallelism = catalog.settings.defaults.parallelism.max(1);
        let mut results: Vec<Option<ToolResult>> = vec![None; unique.len()];
        // A plain FuturesUnordered kept at `parallelism` in flight (rather
        // than `buffer_unordered` over a closure) keeps the future `Send` in
        // every context, including inside streams.
        let mut pending = unique.iter().copied().enumerate();
        let mut in_flight = futures::stream::FuturesUnordered::new();
        loop {
            while in_flight.len() < parallelism {
                let Some((slot, i)) = pending.next() else {
                    break;
                };
                let call = &calls[i];
                in_flight.push(async move {
                    let result = match progress {
                        None => self.run(catalog, call, ctx).await,
                        Some(out) => self.run_forwarding(catalog, call, ctx, out).await,
                    };
                    (slot, result)
                });
            }
            match in_flight.next().await {
                Some((slot, result)) => results[slot] = Some(result),
                None => break,
            }
        }
        let mut seen = vec![false; unique.len()];
        origin
            .into_iter()
            .map(|slot| {
                let mut r = results[slot].clone().unwrap_or_else(|| {
                    ToolResult::failure(CallError::failed("the call did not run"), Instant::now())
                });
                if std::mem::replace(&mut seen[slot], true) {
                    r.skipped = true;
                    r.duration_ms = 0.0;
                }
                r
            })
            .collect()
    }
}

#[cfg(test)]
mod future_size {
    use super::*;

    fn size_of_future<'a, F>(
        _: impl FnOnce(&'a Executor, &'a Catalog, &'a ToolCall, &'a CallContext) -> F,
    ) -> usize {
        std::mem::size_of::<F>()
    }

    /// A call's future is moved into the batch that runs it (and boxed
    /// once more by callers): the large states of HTTP, MCP and code calls
    /// are boxed where they run, so a builtin's call does not copy them.
    /// (The MCP call alone was 8.8 KB, and every call's future 9.8 KB.)
    #[test]
    fn a_call_s_future_holds_no_kind_s_large_state() {
        let run = size_of_future(|e, c, t, x| e.run(c, t, x));
        assert!(run <= 4096, "Executor::run's future is {run} bytes");
    }
}
