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

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolgate::canonical_json;

use futures::{FutureExt, StreamExt};
use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

/// The shared HTTP client an [`Executor`] is built with.
pub use crate::tool::http::client as http_client;

use crate::approvals::{Approvals, Ask, Binding, Outcome};
use crate::audit::{AuditEntry, AuditLog, Recent};
use crate::catalog::Catalog;
use crate::limits::{Rate, RateLimits, Refused};
use crate::policy::Verdict;
use crate::shared::{self, Redis};
use crate::tool::context::{CallContext, ToolContext};
use crate::tool::{Output, Progress, ProgressSink, ResultCache, Tool, ToolError, ToolKind};
use toolgate_config::format::AuditArguments;

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
    pub error: Option<ToolError>,
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
    pub fn failure(error: ToolError, started: Instant) -> Self {
        ToolResult {
            success: false,
            data: None,
            error: Some(error),
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
}

/// The call's context with the gateway's model answering the server's
/// sampling requests, for a server whose declaration names a model
/// (`sampling`) and a call whose client cannot answer them; `None` when
/// nothing changes.
fn sampling_by_model(
    catalog: &Catalog,
    mcp: &crate::tool::mcp::McpTool,
    ctx: &CallContext,
) -> Option<CallContext> {
    use crate::tool::mcp::relay::Relay;
    let sampling = mcp.sampling()?;
    let relay = Relay::of(ctx).cloned().unwrap_or_default();
    if relay.sample.is_some() {
        return None;
    }
    let resolved = catalog.upstreams.resolve(&sampling.model)?;
    let mut ctx = ctx.clone();
    ctx.client = Some(toolgate::ClientLink::new(Relay {
        sample: Some(crate::sampling::answerer(
            resolved,
            sampling.max_tokens,
            catalog.settings.limits.max_response_bytes,
        )),
        ..relay
    }));
    Some(ctx)
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
        }
    }

    /// The calls waiting for (or given) a person's approval.
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

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
    ) -> Result<(), ToolError> {
        let caller = crate::policy::Caller::of(ctx);
        let verdict = crate::policy::check(&catalog.policies, name, arguments, caller)
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
        let shown = if crate::policy::redacts(&catalog.policies, name, arguments, caller) {
            None
        } else {
            let mode = self
                .audit
                .as_ref()
                .map_or(AuditArguments::Redacted, AuditLog::arguments_mode);
            crate::audit::render_arguments(mode, tool.map(|t| &t.parameters), arguments).0
        };
        let binding = Binding {
            key: ctx.key.clone(),
            subject: ctx.subject.clone(),
            project: ctx.project().map(str::to_owned),
            tool: name.to_owned(),
            arguments_sha256: crate::audit::sha256_hex(&canonical_json(arguments)),
            policy_version: catalog.policy_version.clone(),
        };
        match self.approvals.ask(binding, shown, why, settings) {
            Err(reason) => Err(ToolError::Refused(reason)),
            Ok(Ask::Run { .. }) => Ok(()),
            Ok(Ask::Wait { id, decision }) => {
                match self.approvals.wait(&id, decision, settings.wait).await {
                    Outcome::Run { .. } => Ok(()),
                    Outcome::Refused(reason) => Err(ToolError::Refused(reason)),
                    Outcome::NotYet(reason) => Err(ToolError::Unapproved(reason)),
                }
            }
        }
    }

    /// Shares cached results with other replicas through `redis`.
    pub fn with_shared(mut self, redis: Option<Arc<Redis>>) -> Self {
        self.shared = redis;
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

    /// Counts one tool call against the per-minute budget of the caller's
    /// key (`tool_calls_per_minute`): every call, whatever runs it (the
    /// executor, or the loop for `spawn`), spends one.
    pub async fn spend_tool_call(
        &self,
        catalog: &Catalog,
        ctx: &CallContext,
    ) -> Result<(), ToolError> {
        if let (Some(rates), Some(key)) = (&self.rates, &ctx.key)
            && let Some(per_minute) = catalog
                .keys()
                .by_name(key)
                .and_then(|k| k.tool_calls_per_minute)
            && let Err(refused) = rates.check(key, Rate::ToolCalls, per_minute).await
        {
            return Err(match refused {
                Refused::Limited(wait) => ToolError::RateLimited(wait),
                Refused::Unavailable => ToolError::Failed(
                    "the tool-call rate limit of this API key cannot be checked: the shared state (Redis) is unavailable; retry shortly".into(),
                ),
            });
        }
        Ok(())
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

    /// Has each MCP server called as each caller (`credentials`) list its
    /// tools to the caller of `ctx`, in their own session and with their
    /// token (renewed once when refused, like a call's), unless their
    /// listing is fresh: from then on what they are offered, and may call,
    /// from that server is what it lists to them. A caller who has not
    /// connected, or a listing that fails, keeps the gateway's view of the
    /// server (a call then says how to connect, or what failed). Every face
    /// calls it before it lists a set's tools or plans a request.
    pub async fn list_as_caller(&self, catalog: &Catalog, ctx: &CallContext) {
        let (Some(subject), Some(connections)) =
            (ctx.subject.as_deref(), catalog.connections.as_deref())
        else {
            return;
        };
        let servers = catalog.mcp().per_caller();
        if servers.is_empty() {
            return;
        }
        let store = connections.store(self.shared.as_ref());
        let store = &store;
        let lists = servers.iter().map(|(server, how)| async move {
            let mcp = catalog.mcp();
            let listed = connections
                .with_token(store, how, ctx, |token| async move {
                    match mcp.list_as(server, subject, &token).await {
                        Ok(()) => (Ok(()), false),
                        Err((why, refused)) => (Err(ToolError::Backend(why)), refused),
                    }
                })
                .await;
            if let Err(e) = listed {
                tracing::debug!(mcp_server = %server, subject, "the caller's own listing was not made: {e}");
            }
        });
        futures::future::join_all(lists).await;
    }

    /// Runs `ask` — a request other than a tool call (`prompts/get`,
    /// `resources/read`, `completion/complete`) about `what` — for the
    /// caller of `ctx`. At a per-caller server that listed its prompts and
    /// resources to them, `ask` gets their subject and token and goes over
    /// their own session (the token renewed once when refused, like a
    /// call's); otherwise it gets `None` and goes over the gateway's.
    pub async fn ask_as_caller<R, F, Fut>(
        &self,
        catalog: &Catalog,
        ctx: &CallContext,
        what: crate::tool::mcp::Asked<'_>,
        mut ask: F,
    ) -> Result<R, rmcp::ErrorData>
    where
        F: FnMut(Option<(String, String)>) -> Fut,
        Fut: std::future::Future<Output = Result<R, crate::tool::mcp::AskError>>,
    {
        let own = match (ctx.subject.as_deref(), catalog.connections.as_deref()) {
            (Some(subject), Some(connections)) => catalog
                .mcp()
                .asked_of(&what, subject)
                .map(|(_, how)| (subject, connections, how)),
            _ => None,
        };
        let Some((subject, connections, how)) = own else {
            return ask(None).await.map_err(rmcp::ErrorData::from);
        };
        let store = connections.store(self.shared.as_ref());
        let asked = connections
            .with_token(&store, &how, ctx, |token| {
                let answer = ask(Some((subject.to_owned(), token)));
                async move {
                    match answer.await {
                        Ok(r) => (Ok(Ok(r)), false),
                        Err(e) => {
                            let refused = e.refused;
                            (Ok(Err(e.error)), refused)
                        }
                    }
                }
            })
            .await;
        match asked {
            Ok(answer) => answer,
            Err(e) => Err(rmcp::ErrorData::invalid_request(e.to_string(), None)),
        }
    }

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
        let outcome = result.error.as_ref().map_or("ok", ToolError::code);
        let duration = Duration::from_secs_f64(result.duration_ms.max(0.0) / 1000.0);
        crate::metrics::record(|m| m.tool_call(label, outcome, duration, result.cached));
        if self.audit.is_none() && self.recent.is_none() {
            return;
        }
        let mut mode = self
            .audit
            .as_ref()
            .map_or(AuditArguments::Redacted, AuditLog::arguments_mode);
        let caller = crate::policy::Caller::of(ctx);
        if mode == AuditArguments::Redacted
            && crate::policy::redacts(&catalog.policies, &call.name, &call.arguments, caller)
        {
            mode = AuditArguments::Digest;
        }
        let (arguments, arguments_sha256) = crate::audit::render_arguments(
            mode,
            tool.as_ref().map(|t| &t.parameters),
            &call.arguments,
        );
        let bytes = match (&result.data, &result.error) {
            (_, Some(e)) => e.to_string().len(),
            (Some(Value::String(s)), None) => s.len(),
            (Some(v), None) => json_len(v),
            (None, None) => 0,
        };
        let entry = AuditEntry {
            ts: crate::audit::now_rfc3339(),
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
        if let Some(recent) = &self.recent {
            recent.push(entry.clone());
        }
        if let Some(audit) = &self.audit {
            audit.record(entry).await;
        }
    }

    async fn execute(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        progress: Option<&ProgressSink>,
    ) -> ToolResult {
        let started = Instant::now();
        let caller = ctx.subject.as_deref();
        let mut tool = catalog.tool_for(&call.name, ctx.tool_set.as_deref(), caller);
        // A tool only the caller is offered, whose listing is gone (their
        // session closed): listed to them again.
        if tool.is_none() && caller.is_some() && catalog.mcp().has_per_caller() {
            self.list_as_caller(catalog, ctx).await;
            tool = catalog.tool_for(&call.name, ctx.tool_set.as_deref(), caller);
        }
        let Some(tool) = tool else {
            let error = match catalog.unavailable_tool_as(&call.name, caller) {
                Some(u) => {
                    ToolError::Failed(format!("tool `{}` is unavailable: {}", call.name, u.reason))
                }
                None => ToolError::UnknownTool(call.name.clone()),
            };
            return ToolResult::failure(error, started);
        };
        let max_bytes = catalog.settings.limits.max_tool_argument_bytes;
        let size = json_len(&call.arguments);
        if size > max_bytes {
            return ToolResult::failure(
                ToolError::InvalidArguments(vec![crate::tool::ArgError {
                    path: "/".into(),
                    rule: "maxBytes".into(),
                    message: format!(
                        "the arguments are {size} bytes of JSON, over the limit of {max_bytes} (limits.max_tool_argument_bytes)"
                    ),
                }]),
                started,
            );
        }
        let mut arguments = tool.normalize_arguments(&call.arguments);
        if let Err(errors) = tool.validate(&arguments) {
            return ToolResult::failure(ToolError::InvalidArguments(errors), started);
        }
        if let Err(e) = self
            .authorize(catalog, Some(&tool), &call.name, &arguments, ctx)
            .await
        {
            return ToolResult::failure(e, started);
        }
        if let Err(e) =
            crate::guards::check_arguments(&catalog.settings.guards, &call.name, &mut arguments)
        {
            return ToolResult::failure(e, started);
        }
        if let Err(error) = self.spend_tool_call(catalog, ctx).await {
            return ToolResult::failure(error, started);
        }
        let per_caller = || {
            format!(
                "{}\u{0}{}\u{0}{}\u{0}{}",
                ctx.key.as_deref().unwrap_or_default(),
                ctx.subject.as_deref().unwrap_or_default(),
                ctx.project().unwrap_or_default(),
                canonical_json(&arguments)
            )
        };
        let cache_key = tool.cache.as_ref().map(|_| match &tool.kind {
            // A tool reading the context may answer differently per project.
            ToolKind::Native(n) if n.takes_context => format!(
                "{}\u{0}{}",
                ctx.project().unwrap_or_default(),
                canonical_json(&arguments)
            ),
            // A server told who calls may answer each caller differently.
            ToolKind::Mcp(m) if m.varies_by_caller() => per_caller(),
            ToolKind::Http(h) if h.reads_caller || h.credentials.is_some() => per_caller(),
            _ => canonical_json(&arguments),
        });
        // A tool acting as the caller upstream runs (and answers from the
        // cache) only while the caller has credentials there.
        let credentials = match &tool.kind {
            ToolKind::Http(http) => http.credentials.clone(),
            ToolKind::Mcp(mcp) => mcp.credentials(),
            _ => None,
        };
        if let Some(how) = &credentials
            && let Some(connections) = catalog.connections.as_deref()
            && let Err(e) = connections
                .ready(&connections.store(self.shared.as_ref()), how, ctx)
                .await
        {
            return ToolResult::failure(e, started);
        }
        if let (Some(cache), Some(key)) = (&tool.cache, &cache_key)
            && let Some(output) = self.cached(&tool, cache, key).await
        {
            let mut result = self.finish_output(&call.name, Ok(output), catalog, started);
            result.cached = true;
            return self.classified(catalog, &call.name, result, started).await;
        }

        let timeout = tool
            .timeout
            .unwrap_or(catalog.settings.defaults.tool_timeout);
        let run = AssertUnwindSafe(self.invoke(&tool, arguments, call, ctx, catalog, progress))
            .catch_unwind();
        let mut outcome = match tokio::time::timeout(timeout, run).await {
            Err(_) => Err(ToolError::Timeout(timeout)),
            Ok(Err(panic)) => Err(ToolError::Panicked(panic_message(&panic))),
            Ok(Ok(outcome)) => outcome,
        };
        if let Ok(output) = &mut outcome
            && output
                .mcp_result
                .as_ref()
                .is_some_and(|c| json_len(c) > catalog.settings.limits.max_response_bytes)
        {
            output.mcp_result = None;
        }
        if let (Ok(output), Some(cache), Some(key)) = (&outcome, &tool.cache, cache_key) {
            // The model-readable data only: raw MCP results (base64 and all)
            // would make the entry count no bound on the cache's bytes.
            if let Some(redis) = &self.shared {
                let shared_key = cache.shared_key(&tool, &key);
                if redis
                    .cache_put(&shared_key, &output.data, cache.ttl())
                    .await
                    .is_err()
                {
                    shared::fell_back("cache", "local");
                }
            }
            cache.insert(
                key,
                Output {
                    data: output.data.clone(),
                    mcp_result: None,
                },
            );
        }
        let result = self.finish_output(&call.name, outcome, catalog, started);
        self.classified(catalog, &call.name, result, started).await
    }

    /// `result`, when it succeeded, checked by `guards.classifier` (if
    /// set): marked, or replaced by the failure that blocks it.
    async fn classified(
        &self,
        catalog: &Catalog,
        tool: &str,
        mut result: ToolResult,
        started: Instant,
    ) -> ToolResult {
        let Some(classifier) = &catalog.settings.guards.classifier else {
            return result;
        };
        if !result.success {
            return result;
        }
        let text = match &result.data {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => return result,
        };
        match crate::guards::check_with_classifier(&self.http, classifier, tool, &text).await {
            Ok(None) => result,
            Ok(Some(note)) => {
                result.notes.push(note);
                result
            }
            Err(e) => ToolResult::failure(e, started),
        }
    }

    /// A cached result: this replica's, else the shared state's (not copied
    /// here: a copy would live a whole TTL more than the shared entry).
    async fn cached(&self, tool: &Tool, cache: &ResultCache, key: &str) -> Option<Output> {
        if let Some(output) = cache.get(key) {
            return Some(output);
        }
        let redis = self.shared.as_ref()?;
        match redis.cache_get(&cache.shared_key(tool, key)).await {
            Ok(Some(data)) => Some(Output {
                data,
                mcp_result: None,
            }),
            Ok(None) => None,
            Err(_) => {
                shared::fell_back("cache", "local");
                None
            }
        }
    }

    async fn invoke(
        &self,
        tool: &Arc<Tool>,
        args: Value,
        call: &ToolCall,
        ctx: &CallContext,
        catalog: &Catalog,
        progress: Option<&ProgressSink>,
    ) -> Result<Output, ToolError> {
        match &tool.kind {
            ToolKind::Http(http) => {
                let connections = catalog.connections.as_deref();
                let store = connections.map(|c| c.store(self.shared.as_ref()));
                // Boxed, like the MCP and code calls below: the call's
                // future holds a large state only while that kind runs, and
                // every call's future (moved into the batch) stays small.
                Box::pin(http.call_traced(&self.http, &args, ctx, connections.zip(store.as_ref())))
                    .await
                    .map(Output::from)
            }
            ToolKind::Native(native) => {
                let ctx = ToolContext::new(ctx, &call.id, &tool.name, catalog.extensions().clone());
                native.call(args, ctx).await.map(Output::from)
            }
            // Dropped on timeout, which tells the server to cancel the call.
            ToolKind::Mcp(mcp) => {
                let answered = sampling_by_model(catalog, mcp, ctx);
                let ctx = answered.as_ref().unwrap_or(ctx);
                Box::pin(self.invoke_mcp(mcp, &args, ctx, catalog, progress)).await
            }
            ToolKind::Search => catalog
                .run_find_tools(ctx.tool_set.as_deref(), &args, ctx.subject.as_deref())
                .map(Output::from),
            ToolKind::Code => Box::pin(self.run_program(catalog, call, ctx, &args))
                .await
                .map(Output::from),
        }
    }

    /// An MCP tool's call: over the gateway's session, or as the caller
    /// with their token for a server called as each caller.
    async fn invoke_mcp(
        &self,
        mcp: &crate::tool::mcp::McpTool,
        args: &Value,
        ctx: &CallContext,
        catalog: &Catalog,
        progress: Option<&ProgressSink>,
    ) -> Result<Output, ToolError> {
        match mcp.credentials() {
            None => crate::tool::mcp::call(mcp, args, ctx, progress, None).await,
            Some(how) => {
                let connections = catalog.connections.as_deref().ok_or_else(|| {
                    ToolError::Failed(
                        "this MCP server is called as each caller, and the gateway has no `connections`".into(),
                    )
                })?;
                let store = connections.store(self.shared.as_ref());
                connections
                    .with_token(&store, &how, ctx, |token| async move {
                        let result =
                            crate::tool::mcp::call(mcp, args, ctx, progress, Some(&token)).await;
                        // The server refused the token.
                        let refused = matches!(result, Err(ToolError::NotConnected(_)));
                        (result, refused)
                    })
                    .await
            }
        }
    }

    /// [`run`](Self::run) as a boxed future: a program's calls run inside
    /// a call, and a future cannot hold itself.
    fn run_boxed<'a>(
        &'a self,
        catalog: &'a Catalog,
        call: &'a ToolCall,
        ctx: &'a CallContext,
    ) -> futures::future::BoxFuture<'a, ToolResult> {
        Box::pin(self.run(catalog, call, ctx))
    }

    /// Runs a code-mode program (`run_code`): the set's tools are its
    /// functions, and each call it makes is a call of this executor, made
    /// in the set (`Catalog::callable`) with the request's context, so it
    /// passes every check a direct call passes and is audited as itself.
    async fn run_program(
        &self,
        catalog: &Catalog,
        call: &ToolCall,
        ctx: &CallContext,
        args: &Value,
    ) -> Result<Value, ToolError> {
        use crate::catalog::CallScope;
        let Some(set) = ctx.tool_set.as_deref().and_then(|s| catalog.set(s)) else {
            return Err(ToolError::Failed(
                "run_code runs over a tool set, and this call names none".into(),
            ));
        };
        let code = args["code"].as_str().unwrap_or_default();
        // Function name -> tool name, for the tools a program may call.
        let functions: std::collections::HashMap<String, String> = catalog
            .tools_in(set, ctx.subject.as_deref())
            .filter_map(|t| crate::code::function_name(&t.name).map(|f| (f, t.name.clone())))
            .collect();
        let names: Vec<String> = functions.keys().cloned().collect();
        let worker = toolgate_code::Worker::current()
            .map_err(ToolError::Failed)?
            .as_user(catalog.code_user());
        let mut made = 0u32;
        let outcome = worker
            .run(code, &names, &crate::code::limits(), |asked| {
                made += 1;
                let inner_id = format!("{}.{made}", call.id);
                let functions = &functions;
                async move {
                    let Some(name) = functions.get(&asked.name) else {
                        return Err(format!("`{}` is not a tool of this set", asked.name));
                    };
                    let tool = catalog
                        .callable(CallScope::Set(set), name, ctx.subject.as_deref())
                        .map_err(|e| e.to_string())?;
                    let arguments = crate::code::arguments(&tool, asked.args, asked.kwargs)?;
                    let inner = ToolCall {
                        id: inner_id,
                        name: name.clone(),
                        arguments,
                    };
                    let result = self.run_boxed(catalog, &inner, ctx).await;
                    match (result.data, result.error) {
                        (_, Some(e)) => Err(format!("{name}: {e}")),
                        (Some(data), None) => Ok(data),
                        (None, None) => Ok(Value::Null),
                    }
                }
            })
            .await;
        crate::code::answer(outcome)
    }

    /// The result of an outcome: output capped, duration measured. Public
    /// for tools run outside the executor (sub-agents).
    pub fn finish(
        &self,
        tool: &str,
        outcome: Result<Value, ToolError>,
        catalog: &Catalog,
        started: Instant,
    ) -> ToolResult {
        self.finish_output(tool, outcome.map(Output::from), catalog, started)
    }

    /// The result of `tool`'s outcome: output capped, guards applied,
    /// duration measured.
    fn finish_output(
        &self,
        tool: &str,
        outcome: Result<Output, ToolError>,
        catalog: &Catalog,
        started: Instant,
    ) -> ToolResult {
        match outcome {
            Ok(Output {
                data,
                mut mcp_result,
            }) => {
                let (mut data, truncated) =
                    cap_output(data, catalog.settings.defaults.max_output_chars);
                let notes = match crate::guards::check_result(
                    &catalog.settings.guards,
                    tool,
                    &mut data,
                    &mut mcp_result,
                ) {
                    Ok(notes) => notes,
                    Err(e) => return ToolResult::failure(e, started),
                };
                ToolResult {
                    success: true,
                    data: Some(data),
                    error: None,
                    duration_ms: elapsed_ms(started),
                    skipped: false,
                    cached: false,
                    truncated,
                    mcp_result,
                    notes,
                }
            }
            Err(e) => ToolResult::failure(e, started),
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
                    ToolResult::failure(
                        ToolError::Failed("the call did not run".into()),
                        Instant::now(),
                    )
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

/// The length of a value's JSON text, without building it.
fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

/// Cuts output longer than `max` characters. Strings are cut in place;
/// other values become their JSON text, cut.
fn cap_output(data: Value, max: usize) -> (Value, bool) {
    match data {
        Value::String(s) if s.chars().count() > max => (Value::String(cut(&s, max)), true),
        Value::String(s) => (Value::String(s), false),
        other => {
            let text = other.to_string();
            if text.chars().count() > max {
                (Value::String(cut(&text, max)), true)
            } else {
                (other, false)
            }
        }
    }
}

fn cut(s: &str, max: usize) -> String {
    let end = s.char_indices().nth(max).map_or(s.len(), |(i, _)| i);
    let rest = s[end..].chars().count();
    format!("{}\n[output truncated: {rest} more characters]", &s[..end])
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_is_cut_with_a_marker() {
        let (v, t) = cap_output(json!("héllo world"), 5);
        assert!(t);
        assert_eq!(v, json!("héllo\n[output truncated: 6 more characters]"));
        let (v, t) = cap_output(json!({"a": 1}), 100);
        assert!(!t);
        assert_eq!(v, json!({"a": 1}));
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
