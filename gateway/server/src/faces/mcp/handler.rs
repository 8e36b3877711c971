//! The MCP server of a tool set (rmcp's `ServerHandler`): `tools/list` and
//! `tools/call` over the catalog in service, list changes pushed to
//! clients that listen.
//!
//! The handler holds no per-client state: which set a request is for, and
//! whose key it carries, come with each request ([`Target`], put in the
//! HTTP request by the endpoint, or fixed for stdio). A call runs through
//! the executor like every other call (validation, timeout, cache, output
//! cap, audit, metrics, the key's tool-call rate).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, DiscoverResult, ErrorCode,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, RequestStateCodec,
    ServerCapabilities, ServerConfig, ServerNotification, SubscriptionFilter,
    ToolListChangedNotification,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::SessionRestoreMarker;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::wire::{self, CALL_TOOL};
use super::{forward, input, parked};
use crate::http::{AppState, Caller};
#[allow(deprecated)] // logging (SEP-2577), still carried for older clients
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use toolgate::ClientLink;
use toolgate_config::format::Discovery;
use toolgate_config::format::SetMode;
use toolgate_engine::catalog::{CallRefused, CallScope, Catalog, Offers, ToolSet};
use toolgate_engine::executor::{Answered, Method, ToolCall, ToolResult};
use toolgate_engine::tools::discovery::{self as search, FIND_TOOLS};
use toolgate_engine::tools::tool::context::CallContext;
use toolgate_engine::tools::tool::mcp::relay::{HandBack, Handed, LogSink, Relay};
use toolgate_engine::tools::tool::mcp::{Asked, McpRegistry};
use toolgate_engine::tools::tool::{Progress, ToolError};

/// Who a request state or task id is handed to: the API key's name and
/// the caller's subject.
fn whom(target: &Target) -> String {
    format!(
        "{}\0{}",
        target.caller.key_name().unwrap_or_default(),
        target.caller.subject().unwrap_or_default()
    )
}

/// How often a session's watcher asks whether its client is still there.
const GONE_CHECK_EVERY: Duration = Duration::from_secs(30);

/// At most this many resources one client subscribes to (a session's
/// `resources/subscribe`, a `subscriptions/listen` stream's
/// `resourceSubscriptions`): each may hold an upstream subscription.
const MAX_SUBSCRIPTIONS: usize = 256;

/// The upstream servers' `notifications/resources/updated`, by the URIs
/// the gateway offers, across reloads (a replaced catalog's servers close;
/// the new ones are listened to then). No catalog is held while waiting.
struct Updates {
    receivers: Vec<tokio::sync::broadcast::Receiver<String>>,
}

impl Updates {
    fn new(state: &AppState) -> Updates {
        Updates {
            receivers: state.catalog().mcp().updates(),
        }
    }

    /// The next updated resource's URI; never, without servers.
    async fn next(&mut self, state: &AppState) -> String {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            if self.receivers.is_empty() {
                std::future::pending::<()>().await;
            }
            let (got, _, _) =
                futures::future::select_all(self.receivers.iter_mut().map(|r| Box::pin(r.recv())))
                    .await;
            match got {
                Ok(uri) => return uri,
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(
                        missed,
                        "an MCP client missed resource updates (it reads them too slowly)"
                    );
                }
                // A server of a replaced catalog closed.
                Err(RecvError::Closed) => self.receivers = state.catalog().mcp().updates(),
            }
        }
    }
}

/// Progress reports (and upstream log messages) waiting to be sent to a
/// slow client; beyond, they are dropped (the next one says more).
const PROGRESS_BACKLOG: usize = 32;
/// How long a call's answer waits for the log messages before it to be
/// sent on to its client.
const LOG_FLUSH_WAIT: Duration = Duration::from_secs(1);

/// Awaits `call`, sending the progress reports it makes meanwhile (and
/// those left when it ends) to the client as `notifications/progress`
/// under the client's `token`, before the result.
async fn forward_progress<T>(
    call: impl std::future::Future<Output = T>,
    mut reports: tokio::sync::mpsc::Receiver<Progress>,
    token: rmcp::model::ProgressToken,
    peer: &rmcp::Peer<RoleServer>,
) -> T {
    let note = |p: Progress| {
        let mut note = ProgressNotificationParam::new(token.clone(), p.progress);
        note.total = p.total;
        note.message = p.message;
        note
    };
    tokio::pin!(call);
    let result = loop {
        tokio::select! {
            biased;
            Some(p) = reports.recv() => {
                let _ = peer.notify_progress(note(p)).await;
            }
            result = &mut call => break result,
        }
    };
    while let Ok(p) = reports.try_recv() {
        let _ = peer.notify_progress(note(p)).await;
    }
    result
}

/// Which set a request is for, and who sends it.
#[derive(Debug, Clone)]
pub struct Target {
    pub set: String,
    pub caller: Caller,
    /// The context of its calls (request id, key, project), built like
    /// every face's (`faces::common::call_context`).
    pub context: CallContext,
    /// The list the client asked for (`?discovery=` on HTTP,
    /// `--discovery` on stdio); `None`: the set's own `discovery`.
    pub discovery: Option<Discovery>,
}

/// The MCP server of the gateway's tool sets.
#[derive(Debug, Clone)]
pub struct ToolSetServer {
    state: AppState,
    /// The one target of a stdio server; HTTP requests bring theirs.
    fixed: Option<Target>,
    /// This session's list watcher runs (one per session, however many
    /// `notifications/initialized` a client sends).
    watching: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The lowest level of upstream log messages this session's client
    /// asked for (`logging/setLevel`); `info` until it asks.
    log_level: std::sync::Arc<std::sync::atomic::AtomicU8>,
    /// The resources this session's client subscribed to (2025-11-25).
    subscriptions: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Seals and opens the `requestState` handed to 2026-07-28 clients.
    states: std::sync::Arc<RequestStateCodec>,
    /// The calls that wait for a 2026-07-28 client's answer.
    parked: std::sync::Arc<parked::Calls>,
}

impl ToolSetServer {
    /// A server whose requests bring their target (HTTP); `states` seals
    /// the request states it hands out (see `input`), `parked` holds the
    /// calls that wait for an answer (see `parked`).
    pub fn new(
        state: AppState,
        states: std::sync::Arc<RequestStateCodec>,
        parked: std::sync::Arc<parked::Calls>,
    ) -> Self {
        ToolSetServer {
            state,
            fixed: None,
            watching: Default::default(),
            log_level: std::sync::Arc::new(std::sync::atomic::AtomicU8::new(DEFAULT_LOG_LEVEL)),
            subscriptions: Default::default(),
            states,
            parked,
        }
    }

    /// A server of one set, for one local client (stdio).
    pub fn fixed(
        state: AppState,
        target: Target,
        states: std::sync::Arc<RequestStateCodec>,
    ) -> Self {
        ToolSetServer {
            fixed: Some(target),
            ..ToolSetServer::new(state, states, Default::default())
        }
    }

    /// The way back to this session's client for a call's upstream MCP
    /// server: its questions (elicitation, sampling, roots) go to the
    /// client when it declared it can answer them, and its log messages at
    /// or above the level the client set. A session of the 2026-07-28
    /// revision cannot be asked in the middle of a call: its calls get the
    /// gateway's own answers.
    #[allow(deprecated)] // sampling, roots and logging (SEP-2577), still carried
    fn relay(&self, context: &RequestContext<RoleServer>) -> Option<Relay> {
        let version = context.protocol_version()?;
        if version.as_str() >= ProtocolVersion::V_2026_07_28.as_str() {
            return None;
        }
        let caps = context.peer.peer_info()?.capabilities.clone();
        let peer = context.peer.clone();
        let mut relay = Relay::default();
        if caps.elicitation.is_some() {
            let peer = peer.clone();
            relay.elicit = Some(std::sync::Arc::new(move |params| {
                let peer = peer.clone();
                Box::pin(async move { peer.create_elicitation(params).await.map_err(asked) })
            }));
        }
        if caps.sampling.is_some() {
            let peer = peer.clone();
            relay.sample = Some(std::sync::Arc::new(move |params| {
                let peer = peer.clone();
                Box::pin(async move { peer.create_message(params).await.map_err(asked) })
            }));
        }
        if caps.roots.is_some() {
            let peer = peer.clone();
            relay.roots = Some(std::sync::Arc::new(move |()| {
                let peer = peer.clone();
                Box::pin(async move { peer.list_roots().await.map_err(asked) })
            }));
        }
        let level = std::sync::Arc::clone(&self.log_level);
        relay.log_level = Some(level_of(level.load(std::sync::atomic::Ordering::Relaxed)));
        relay.log = Some(log_to(peer, level));
        Some(relay)
    }

    /// A request of a 2026-07-28 client for `method` and `name` (whose
    /// state is bound to them and to its caller), with the answers it may
    /// bring: see `input`.
    fn hand_back(
        &self,
        context: &RequestContext<RoleServer>,
        target: &Target,
        method: &'static str,
        name: &str,
        responses: Option<rmcp::model::InputResponses>,
        state: Option<String>,
    ) -> Result<(input::Request, input::Handing), McpError> {
        let asked = input::Request {
            method,
            name: name.to_owned(),
            key: whom(target),
        };
        let handing = input::hand_back(&self.states, context, &asked, responses, state)?;
        Ok((asked, handing))
    }

    /// What a task id is bound to: the tool set and the caller.
    fn task_scope(&self, target: &Target) -> input::Request {
        input::Request {
            method: "tasks",
            name: target.set.clone(),
            key: whom(target),
        }
    }

    /// `request` about the task the gateway calls `id`, asked of the
    /// server that runs it under the server's id (`with_id` puts it in);
    /// the answer as the server gave it.
    async fn ask_task(
        &self,
        context: &RequestContext<RoleServer>,
        id: &str,
        with_id: impl Fn(String) -> rmcp::model::ClientRequest,
    ) -> Result<rmcp::model::ServerResult, McpError> {
        let target = self.target(&context.extensions)?;
        let (server, task) = input::open_task(&self.states, &self.task_scope(&target), id)?;
        let registry = self.state.catalog().mcp().clone();
        let request = with_id(task);
        self.ask_upstream(&target, Asked::Server(&server), |caller| {
            let (registry, request, server) = (registry.clone(), request.clone(), server.clone());
            async move {
                let caller = caller.as_ref().map(|(s, t)| (s.as_str(), t.as_str()));
                registry.task_request(&server, request, caller).await
            }
        })
        .await
    }

    /// `mcp.list_ttl` in milliseconds.
    fn list_ttl_ms(&self) -> u64 {
        let ttl = self.state.catalog().settings.mcp.list_ttl;
        u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn target(&self, extensions: &rmcp::model::Extensions) -> Result<Target, McpError> {
        if let Some(t) = &self.fixed {
            return Ok(t.clone());
        }
        extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Target>())
            .cloned()
            .ok_or_else(|| McpError::internal_error("the request names no tool set", None))
    }

    /// The set's tools as `tools/list` entries, in the set's order; for
    /// the search surface, `find_tools` and `call_tool`.
    fn list(&self, catalog: &Catalog, target: &Target) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let set = catalog
            .usable_set(&target.set, target.caller.key.as_deref())
            .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        let who = target.caller.subject();
        let who = who.as_deref();
        let unlisted = |e: serde_json::Error| {
            McpError::internal_error(format!("the search surface cannot be listed: {e}"), None)
        };
        // Code mode: the program tool, described with the set's functions
        // (and `find_tools` to find them when the set searches).
        if set.mode == SetMode::Code {
            let searching = matches!(set.discovery, search::Discovery::Search { .. });
            let tools: Vec<_> = catalog.tools_in(set, who).collect();
            let mut run = wire::tool(&set.code_tool).map_err(unlisted)?;
            run.description =
                Some(toolgate_engine::tools::code::description(&tools, searching).into());
            let mut listed = vec![run];
            if searching {
                listed.push(wire::tool(&set.search_tool).map_err(unlisted)?);
            }
            return Ok(listed);
        }
        if searches(set, target) {
            return Ok(vec![
                wire::tool(&set.search_tool).map_err(unlisted)?,
                wire::call_tool(&set.name).map_err(unlisted)?,
            ]);
        }
        catalog
            .tools_in(set, who)
            .map(|t| {
                wire::tool(&t).map_err(|e| {
                    McpError::internal_error(
                        format!("tool `{}` cannot be listed: {e}", t.name),
                        None,
                    )
                })
            })
            .collect()
    }

    /// [`offers_to`](Self::offers_to) the request's target, once the
    /// per-caller servers have listed theirs to the caller (whose subject
    /// comes along).
    async fn offers_listed(
        &self,
        extensions: &rmcp::model::Extensions,
    ) -> Result<(SetOffers, McpRegistry, Option<String>), McpError> {
        let target = self.listed_target(extensions).await?;
        let (set, registry) = self.offers_to(&target)?;
        Ok((set, registry, target.caller.subject()))
    }

    /// The request's target, once the per-caller servers have listed
    /// their tools, prompts and resources to its caller.
    async fn listed_target(
        &self,
        extensions: &rmcp::model::Extensions,
    ) -> Result<Target, McpError> {
        let target = self.target(extensions)?;
        let catalog = self.state.catalog();
        crate::faces::common::list_as(&self.state, &catalog, &target.caller).await;
        Ok(target)
    }

    /// Asks an upstream server about `what` for `target`'s caller: over
    /// their own session, with their token, at a per-caller server that
    /// listed it to them; else over the gateway's (see
    /// `Executor::ask_as_caller`).
    async fn ask_upstream<R, F, Fut>(
        &self,
        target: &Target,
        what: Asked<'_>,
        ask: F,
    ) -> Result<R, McpError>
    where
        F: FnMut(Option<(String, String)>) -> Fut,
        Fut: std::future::Future<Output = Result<R, toolgate_engine::tools::tool::mcp::AskError>>,
    {
        let catalog = self.state.catalog();
        self.state
            .executor
            .ask_as_caller(&catalog, &call_context(target), what, ask)
            .await
    }

    fn subscribed(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Relays the upstream servers' `notifications/resources/updated` for
    /// the resources this session subscribed to, until its client is gone;
    /// then its subscriptions end. No catalog is held while waiting (a
    /// reload's servers are listened to once the old ones close).
    async fn relay_updates(self, peer: rmcp::Peer<RoleServer>) {
        let mut updates = Updates::new(&self.state);
        let mut check = tokio::time::interval(GONE_CHECK_EVERY);
        check.tick().await;
        loop {
            tokio::select! {
                uri = updates.next(&self.state) => {
                    let wanted = self.subscribed().contains(&uri);
                    if wanted && peer
                        .notify_resource_updated(rmcp::model::ResourceUpdatedNotificationParam::new(uri))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                _ = check.tick() => if peer.is_transport_closed() { break; },
            }
        }
        let registry = self.state.catalog().mcp().clone();
        let uris: Vec<String> = self.subscribed().drain().collect();
        for uri in uris {
            registry.unsubscribe_resource(&uri).await;
        }
    }

    /// What the set `target` is for (checked against its key) offers
    /// besides tools, and the MCP servers offering it; no catalog is held.
    fn offers_to(&self, target: &Target) -> Result<(SetOffers, McpRegistry), McpError> {
        let catalog = self.state.catalog();
        let set = catalog
            .usable_set(&target.set, target.caller.key.as_deref())
            .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        let offers = SetOffers {
            name: set.name.clone(),
            prompts: set.prompts.clone(),
            resources: set.resources.clone(),
        };
        Ok((offers, catalog.mcp().clone()))
    }

    /// The MCP servers, when the request's set offers `uri`; otherwise
    /// invalid params with the URI (SEP-2164).
    fn offering_uri(&self, target: &Target, uri: &str) -> Result<McpRegistry, McpError> {
        let (set, registry) = self.offers_to(target)?;
        let who = target.caller.subject();
        if toolgate_engine::catalog::offers_uri(&set.resources, &registry, uri, who.as_deref()) {
            Ok(registry)
        } else {
            Err(McpError::invalid_params(
                format!("no resource `{uri}` in tool set `{}`", set.name),
                Some(serde_json::json!({"uri": uri})),
            ))
        }
    }

    /// An upstream's answer, refused when it is larger than
    /// `limits.max_response_bytes`.
    fn bounded(&self, answer: &impl serde::Serialize) -> Result<(), McpError> {
        let limit = self.state.catalog().settings.limits.max_response_bytes;
        let size = serde_json::to_vec(answer).map_or(usize::MAX, |b| b.len());
        if size > limit {
            return Err(McpError::internal_error(
                format!(
                    "the upstream answer is {size} bytes, more than limits.max_response_bytes ({limit})"
                ),
                None,
            ));
        }
        Ok(())
    }

    /// Spends one of the key's tool calls per minute for `method`, when it
    /// spends one ([`Method::spends_a_tool_call`]).
    async fn spend(&self, target: &Target, method: Method) -> Result<(), McpError> {
        if !method.spends_a_tool_call() {
            return Ok(());
        }
        let catalog = self.state.catalog();
        self.state
            .executor
            .spend_tool_call(&catalog, &call_context(target))
            .await
            .map_err(refused)
    }

    /// An upstream's answer other than a tool's result (a prompt, a
    /// resource, a completion, a task's result): refused when it is larger
    /// than `limits.max_response_bytes`, then checked, counted and audited
    /// by the executor ([`Executor::answered`]); `note` puts the guards'
    /// notes where the reader reads them first.
    ///
    /// [`Executor::answered`]: toolgate_engine::executor::Executor::answered
    async fn checked<R: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        target: &Target,
        asked: Answered<'_>,
        answer: R,
        started: std::time::Instant,
        note: impl FnOnce(&mut Value, &[String]),
    ) -> Result<R, McpError> {
        let unreadable = |e: serde_json::Error| {
            McpError::internal_error(format!("the upstream answer cannot be read: {e}"), None)
        };
        self.bounded(&answer)?;
        let catalog = self.state.catalog();
        let mut value = serde_json::to_value(answer).map_err(unreadable)?;
        let notes = self
            .state
            .executor
            .answered(&catalog, &call_context(target), asked, &mut value, started)
            .await
            .map_err(refused)?;
        note(&mut value, &notes);
        serde_json::from_value(value).map_err(unreadable)
    }

    /// A digest of what a client of the set sees: its tools, prompts and
    /// resources.
    fn fingerprint(&self, target: &Target) -> Option<[u8; 32]> {
        let catalog = self.state.catalog();
        let tools = self.list(&catalog, target).ok()?;
        let set = catalog
            .usable_set(&target.set, target.caller.key.as_deref())
            .ok()?;
        let registry = catalog.mcp();
        let who = target.caller.subject();
        let who = who.as_deref();
        let json = serde_json::to_vec(&(
            tools,
            registry.prompts(&|n| set.prompts.admits(n), who),
            registry.resources(&|u| set.resources.admits(u), who),
            registry.resource_templates(&|t| set.resources.admits(t), who),
        ))
        .ok()?;
        Some(Sha256::digest(&json).into())
    }

    /// Waits until the set's list differs from `seen` (after a reload, or
    /// when an MCP server's tools change), then updates `seen`. `None`
    /// when the gateway is stopping or `gone` says the client left (it is
    /// asked every [`GONE_CHECK_EVERY`]). No catalog is held while waiting.
    async fn next_change(
        &self,
        target: &Target,
        seen: &mut Option<[u8; 32]>,
        gone: &(dyn Fn() -> bool + Send + Sync),
    ) -> Option<()> {
        let mut reloads = self.state.live().subscribe();
        loop {
            let mut servers = self.state.catalog().mcp().subscribe();
            servers.mark_unchanged();
            let mut check = tokio::time::interval(GONE_CHECK_EVERY);
            check.tick().await;
            loop {
                tokio::select! {
                    r = reloads.changed() => { r.ok()?; break; }
                    // A publish, or the registry dropped with its catalog.
                    _ = servers.changed() => break,
                    _ = check.tick() => if gone() { return None; },
                }
            }
            let now = self.fingerprint(target);
            if now != *seen {
                *seen = now;
                return Some(());
            }
        }
    }
}

/// The level of upstream log messages a session gets until it sets one.
#[allow(deprecated)]
const DEFAULT_LOG_LEVEL: u8 = severity(LoggingLevel::Info);

/// A log level's rank, `debug` lowest.
#[allow(deprecated)]
const fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The log level of a rank.
#[allow(deprecated)]
const fn level_of(rank: u8) -> LoggingLevel {
    match rank {
        0 => LoggingLevel::Debug,
        1 => LoggingLevel::Info,
        2 => LoggingLevel::Notice,
        3 => LoggingLevel::Warning,
        4 => LoggingLevel::Error,
        5 => LoggingLevel::Critical,
        6 => LoggingLevel::Alert,
        _ => LoggingLevel::Emergency,
    }
}

/// Log messages for the client of `peer`, those at `level` or above (read
/// at each message). Passed on in order by one task, which ends with the
/// call; a slow client loses messages rather than holding them without
/// bound.
#[allow(deprecated)] // logging (SEP-2577), still carried
fn log_to(peer: rmcp::Peer<RoleServer>, level: Arc<std::sync::atomic::AtomicU8>) -> LogSink {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let (queue, mut messages) =
        tokio::sync::mpsc::channel::<LoggingMessageNotificationParam>(PROGRESS_BACKLOG);
    // How many messages were queued, and how many sent on: a call waits
    // for the second to reach the first before it answers.
    let queued = Arc::new(AtomicU64::new(0));
    let (sent_on, sent) = tokio::sync::watch::channel(0u64);
    tokio::spawn(async move {
        while let Some(message) = messages.recv().await {
            if peer.notify_logging_message(message).await.is_err() {
                break;
            }
            sent_on.send_modify(|n| *n += 1);
        }
    });
    let counted = Arc::clone(&queued);
    LogSink {
        send: Arc::new(move |message: LoggingMessageNotificationParam| {
            if severity(message.level) >= level.load(Relaxed) && queue.try_send(message).is_ok() {
                counted.fetch_add(1, Relaxed);
            }
        }),
        flushed: Arc::new(move || {
            let target = queued.load(Relaxed);
            let mut sent = sent.clone();
            Box::pin(async move {
                // Bounded: a client that reads nothing does not hold the
                // call's answer; a forwarder that ended has nothing left.
                let _ = tokio::time::timeout(LOG_FLUSH_WAIT, sent.wait_for(|n| *n >= target)).await;
            })
        }),
    }
}

/// `call` run by the executor, owning what it needs (a task of its own:
/// see `parked`). A call dropped before it ends (its client cancelled, or
/// never answered) is still written to the audit log, as a failure.
fn run_owned(
    state: AppState,
    catalog: Arc<Catalog>,
    call: ToolCall,
    ctx: CallContext,
) -> impl std::future::Future<Output = ToolResult> + Send + 'static {
    struct Unfinished {
        audit: Option<(AppState, Arc<Catalog>, ToolCall, CallContext)>,
        started: std::time::Instant,
    }
    impl Drop for Unfinished {
        fn drop(&mut self) {
            if let Some((state, catalog, call, ctx)) = self.audit.take() {
                let result = ToolResult::failure(
                    ToolError::Failed(
                        "the call was abandoned: its client cancelled it or never answered its server's question".into(),
                    ),
                    self.started,
                );
                tokio::spawn(async move {
                    state.executor.record(&catalog, &call, &ctx, &result).await;
                });
            }
        }
    }
    async move {
        let mut unfinished = Unfinished {
            audit: Some((
                state.clone(),
                Arc::clone(&catalog),
                call.clone(),
                ctx.clone(),
            )),
            started: std::time::Instant::now(),
        };
        let result = state.executor.run(&catalog, &call, &ctx).await;
        unfinished.audit = None;
        result
    }
}

/// The relay of a 2026-07-28 client's request: its questions handed back,
/// and, when the request asks for log messages (`_meta` `logLevel`), the
/// upstream server's messages at that level or above passed on within
/// the request.
#[allow(deprecated)] // logging (SEP-2577), still carried
fn handing_back(hand_back: HandBack, context: &RequestContext<RoleServer>) -> Relay {
    let level = context.meta.log_level();
    Relay {
        hand_back: Some(hand_back),
        log_level: level,
        log: level.map(|level| {
            log_to(
                context.peer.clone(),
                std::sync::Arc::new(std::sync::atomic::AtomicU8::new(severity(level))),
            )
        }),
        ..Relay::default()
    }
}

/// The client's failure to answer, as the upstream server reads it.
fn asked(e: rmcp::ServiceError) -> McpError {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => McpError::internal_error(format!("the client did not answer: {other}"), None),
    }
}

/// The prompts and resources a set offers, apart from its catalog.
struct SetOffers {
    name: String,
    prompts: Offers,
    resources: Offers,
}

/// How far a list of prompts or resources may be shared: with everyone,
/// unless a per-caller server listed its own to the caller.
fn cache_scope(registry: &McpRegistry, caller: Option<&str>) -> CacheScope {
    if registry.extras_vary(caller) {
        CacheScope::Private
    } else {
        CacheScope::Public
    }
}

/// The guards' notes, each as `[note]`, put first in `answer`'s list
/// `field`, each as `item` makes it: where the reader reads them first.
fn notes_first(answer: &mut Value, field: &str, notes: &[String], item: impl Fn(String) -> Value) {
    if let Some(list) = answer.get_mut(field).and_then(Value::as_array_mut) {
        list.splice(0..0, notes.iter().map(|n| item(format!("[{n}]"))));
    }
}

/// What the gateway refused of a request other than a tool call (a guard
/// blocked the answer, the key's rate is spent, a classifier could not be
/// asked), as a JSON-RPC server error (-32000) whose data names why:
/// `{"code": "refused" | "rate_limited" | …}`.
fn refused(e: toolgate_engine::executor::CallError) -> McpError {
    let mut data = serde_json::json!({"code": e.code()});
    if let toolgate_engine::executor::CallError::RateLimited(wait) = &e {
        data["retry_after_seconds"] = serde_json::json!(wait.as_secs_f64().ceil());
    }
    McpError::new(ErrorCode(-32000), e.to_string(), Some(data))
}

/// The context of a call from `target` (audit line, rate limits, the
/// project): the request's, in the target's set.
fn call_context(target: &Target) -> CallContext {
    target
        .context
        .clone()
        .with_tool_set(Some(target.set.clone()))
}

/// A finished call as the `tools/call` response.
fn encode(result: &ToolResult) -> Result<CallToolResponse, McpError> {
    let result: CallToolResult = wire::result(result).map_err(|e| {
        McpError::internal_error(format!("the result cannot be encoded: {e}"), None)
    })?;
    Ok(CallToolResponse::Complete(result))
}

/// `true` when `target` gets the set's search surface.
fn searches(set: &ToolSet, target: &Target) -> bool {
    match target.discovery {
        Some(d) => d == Discovery::Search,
        None => matches!(set.discovery, search::Discovery::Search { .. }),
    }
}

/// A `call_tool` call's tool name and arguments, or the result that says
/// what is wrong with it.
fn unwrap_call_tool(args: &serde_json::Map<String, Value>) -> Result<(String, Value), ToolResult> {
    match (
        args.get("name").and_then(Value::as_str),
        args.get("arguments"),
    ) {
        (Some(name), None) => Ok((name.to_owned(), Value::Object(Default::default()))),
        (Some(name), Some(a)) if a.is_object() => Ok((name.to_owned(), a.clone())),
        _ => Err(ToolResult::failure(
            toolgate_engine::executor::CallError::invalid_argument(
                "/",
                "call_tool",
                "call_tool takes `name` (a tool find_tools returned) and `arguments` (an object)"
                    .into(),
            ),
            std::time::Instant::now(),
        )),
    }
}

/// `true` when a call of `name` may be made in `set` (the engine's one
/// rule): a tool the set has, usable or not (an unavailable one answers
/// why when it runs).
fn in_set(catalog: &Catalog, set: &ToolSet, name: &str, caller: Option<&str>) -> bool {
    matches!(
        catalog.callable(CallScope::Set(set), name, caller),
        Ok(_) | Err(CallRefused::Unavailable { .. })
    )
}

impl ServerHandler for ToolSetServer {
    #[allow(deprecated)] // logging (SEP-2577), still carried for older clients
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_completions()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")).with_title("toolgate"),
        )
    }

    async fn initialize(
        &self,
        mut request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // A session re-created on this replica from its signed id: the
        // client's version is in its `MCP-Protocol-Version` header.
        if context.extensions.get::<SessionRestoreMarker>().is_some()
            && let Some(version) = context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|p| p.headers.get("mcp-protocol-version"))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| serde_json::from_value::<ProtocolVersion>(Value::from(v)).ok())
        {
            request.protocol_version = version;
        }
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        if let Ok(target) = self.target(&context.extensions)
            && let Some(set) = self.state.catalog().set(&target.set)
            && let Some(description) = &set.description
        {
            result = result.with_instructions(description.clone());
        }
        Ok(result)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        if let Ok(target) = self.target(&context.extensions)
            && let Some(set) = self.state.catalog().set(&target.set)
        {
            info.instructions = set.description.clone();
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let target = self.target(&context.extensions)?;
        let catalog = self.state.catalog();
        crate::faces::common::list_as(&self.state, &catalog, &target.caller).await;
        let tools = self.list(&catalog, &target)?;
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(self.list_ttl_ms())
            // What a key may list is the key's: never shared between keys.
            .with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let target = self.target(&context.extensions)?;
        // Answers to a call parked on another replica are forwarded there
        // as they came (see `forward`).
        let as_sent = request.request_state.is_some().then(|| request.clone());
        // A 2026-07-28 client answers upstream questions in a request of
        // its own: this may be it (see `input`).
        let (asked, handing) = self.hand_back(
            &context,
            &target,
            "tools/call",
            &request.name,
            request.input_responses.take(),
            request.request_state.take(),
        )?;
        let catalog = self.state.catalog();
        let set = catalog
            .usable_set(&target.set, target.caller.key.as_deref())
            .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        crate::faces::common::list_as(&self.state, &catalog, &target.caller).await;
        let who = target.caller.subject();
        let who = who.as_deref();
        let mut name = request.name.to_string();
        let mut arguments = Value::Object(request.arguments.unwrap_or_default());
        // The search surface's `call_tool`: the tool it names, which must
        // be the set's (a result the model reads when it is not).
        if name == CALL_TOOL && searches(set, &target) {
            let unwrapped = match arguments.as_object() {
                Some(args) => unwrap_call_tool(args),
                None => unwrap_call_tool(&Default::default()),
            };
            let (inner, inner_args) = match unwrapped {
                Ok(call) => call,
                Err(refused) => return encode(&refused),
            };
            if inner != FIND_TOOLS && !in_set(&catalog, set, &inner, who) {
                return encode(&ToolResult::failure(
                    ToolError::Failed(format!(
                        "the tool set `{}` has no tool `{inner}`; find_tools finds its tools",
                        target.set
                    )),
                    std::time::Instant::now(),
                ));
            }
            name = inner;
            arguments = inner_args;
        } else if name != FIND_TOOLS && !in_set(&catalog, set, &name, who) {
            return Err(McpError::new(
                ErrorCode::INVALID_PARAMS,
                format!("Unknown tool: {name}"),
                None,
            ));
        }
        let started = std::time::Instant::now();
        // The client asked for progress: the tool's reports go to it.
        let token = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token());
        let call = ToolCall {
            id: format!("mcp-{}", target.caller.request_id),
            name,
            arguments,
        };
        let mut ctx = call_context(&target);
        let executor = &self.state.executor;
        let hand_back = handing.hand_back;
        // The client's answers to a server that asked in the middle of the
        // call: the parked call goes on (see `parked`).
        if let Some(input::Answers {
            id,
            answers,
            replica,
        }) = handing.parked
        {
            let running = match self.parked.resume(&id, answers) {
                Ok(running) => running,
                Err(refused) => {
                    return match (replica, as_sent) {
                        (Some(replica), Some(as_sent))
                            if forward::may_forward(
                                &replica,
                                catalog.mcp_replica_url.as_deref(),
                                &context,
                            ) =>
                        {
                            forward::call(&replica, &as_sent, &context).await
                        }
                        _ => Err(refused),
                    };
                }
            };
            return self.follow(running, &asked, &catalog, &context).await;
        }
        // A 2026-07-28 client that can answer, and a server of an older
        // revision that may ask mid-call: the call runs in a task of its
        // own, to be parked at a question (not when the client follows
        // progress, which only its first request could carry).
        let parking = hand_back
            .as_ref()
            .filter(|h| (h.elicit || h.sample || h.roots) && token.is_none())
            .filter(|_| self.parked.has_room());
        if let Some(parking) = parking {
            let (asks, questions) = tokio::sync::mpsc::channel(1);
            ctx.client = Some(ClientLink::new(parked::questions(
                handing_back(parking.clone(), &context),
                &asks,
            )));
            let run = run_owned(self.state.clone(), Arc::clone(&catalog), call, ctx);
            let running = parked::Running::start(run, questions, Some(parking.clone()));
            return self.follow(running, &asked, &catalog, &context).await;
        }
        ctx.client = match &hand_back {
            Some(hand_back) => Some(ClientLink::new(handing_back(hand_back.clone(), &context))),
            None => self.relay(&context).map(ClientLink::new),
        };
        let run = async {
            match token {
                None => executor.run(&catalog, &call, &ctx).await,
                Some(token) => {
                    let (sink, reports) = tokio::sync::mpsc::channel::<Progress>(PROGRESS_BACKLOG);
                    let run = executor.run_reporting(&catalog, &call, &ctx, Some(&sink));
                    forward_progress(run, reports, token, &context.peer).await
                }
            }
        };
        let result = tokio::select! {
            result = run => result,
            () = context.ct.cancelled() => {
                // Dropping the call cancels it (an MCP server's call gets
                // `notifications/cancelled`); the audit log still hears of it.
                let result = ToolResult::failure(
                    ToolError::Failed("the client cancelled the call".into()),
                    started,
                );
                executor.record(&catalog, &call, &ctx, &result).await;
                return Err(McpError::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
            }
        };
        self.answer(
            result,
            hand_back.as_ref(),
            &asked,
            &target,
            &catalog,
            &call.name,
        )
    }

    // Prompts and resources of upstream MCP servers, as far as the set
    // offers them (its `prompts:` and `resources:`; none by default).
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        let (set, registry, who) = self.offers_listed(&context.extensions).await?;
        let prompts = registry.prompts(&|name| set.prompts.admits(name), who.as_deref());
        Ok(rmcp::model::ListPromptsResult::with_all_items(prompts)
            .with_ttl_ms(self.list_ttl_ms())
            .with_cache_scope(cache_scope(&registry, who.as_deref())))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let (set, registry, who) = self.offers_listed(&context.extensions).await?;
        let resources = registry.resources(&|uri| set.resources.admits(uri), who.as_deref());
        Ok(rmcp::model::ListResourcesResult::with_all_items(resources)
            .with_ttl_ms(self.list_ttl_ms())
            .with_cache_scope(cache_scope(&registry, who.as_deref())))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        let (set, registry, who) = self.offers_listed(&context.extensions).await?;
        let templates = registry.resource_templates(&|t| set.resources.admits(t), who.as_deref());
        Ok(
            rmcp::model::ListResourceTemplatesResult::with_all_items(templates)
                .with_ttl_ms(self.list_ttl_ms())
                .with_cache_scope(cache_scope(&registry, who.as_deref())),
        )
    }

    async fn get_prompt(
        &self,
        mut request: rmcp::model::GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, McpError> {
        let started = std::time::Instant::now();
        let target = self.listed_target(&context.extensions).await?;
        let (asked, hand_back) = self.hand_back(
            &context,
            &target,
            "prompts/get",
            &request.name,
            request.input_responses.take(),
            request.request_state.take(),
        )?;
        let hand_back = hand_back.hand_back;
        let (set, registry) = self.offers_to(&target)?;
        if !set.prompts.admits(&request.name) {
            return Err(McpError::invalid_params(
                format!(
                    "no prompt named `{}` in tool set `{}`",
                    request.name, set.name
                ),
                Some(serde_json::json!({"name": request.name})),
            ));
        }
        self.spend(&target, Method::PromptsGet).await?;
        let name = request.name.as_str();
        let arguments = request.arguments;
        let audited = arguments
            .as_ref()
            .map_or(Value::Null, |a| Value::Object(a.clone()));
        let answer = self
            .ask_upstream(&target, Asked::Prompt(name), |caller| {
                let (registry, arguments) = (registry.clone(), arguments.clone());
                let hand_back = hand_back.clone();
                async move {
                    let caller = caller.as_ref().map(|(s, t)| (s.as_str(), t.as_str()));
                    registry
                        .get_prompt(name, arguments, caller, hand_back.as_ref())
                        .await
                }
            })
            .await;
        if let Some(Handed::Input(questions)) = hand_back.as_ref().and_then(HandBack::take) {
            return Ok(rmcp::model::GetPromptResponse::InputRequired(
                input::input_required(&self.states, &asked, questions)?,
            ));
        }
        let asked = Answered {
            method: Method::PromptsGet,
            about: name,
            arguments: &audited,
        };
        // Notes come as the prompt's first messages.
        let mut result = self
            .checked(&target, asked, answer?, started, |prompt, notes| {
                notes_first(prompt, "messages", notes, |text| {
                    serde_json::json!({"role": "user", "content": {"type": "text", "text": text}})
                });
            })
            .await?;
        // A server of an older revision leaves it out; rmcp clears it again
        // for clients of one.
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(rmcp::model::GetPromptResponse::Complete(result))
    }

    async fn read_resource(
        &self,
        mut request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let started = std::time::Instant::now();
        let target = self.listed_target(&context.extensions).await?;
        let (asked, hand_back) = self.hand_back(
            &context,
            &target,
            "resources/read",
            &request.uri,
            request.input_responses.take(),
            request.request_state.take(),
        )?;
        let hand_back = hand_back.hand_back;
        let registry = self.offering_uri(&target, &request.uri)?;
        self.spend(&target, Method::ResourcesRead).await?;
        let uri = request.uri.as_str();
        let answer = self
            .ask_upstream(&target, Asked::Resource(uri), |caller| {
                let (registry, hand_back) = (registry.clone(), hand_back.clone());
                async move {
                    let caller = caller.as_ref().map(|(s, t)| (s.as_str(), t.as_str()));
                    registry
                        .read_resource(uri, caller, hand_back.as_ref())
                        .await
                }
            })
            .await;
        if let Some(Handed::Input(questions)) = hand_back.as_ref().and_then(HandBack::take) {
            return Ok(rmcp::model::ReadResourceResponse::InputRequired(
                input::input_required(&self.states, &asked, questions)?,
            ));
        }
        let asked = Answered {
            method: Method::ResourcesRead,
            about: uri,
            arguments: &Value::Null,
        };
        // Notes come as the resource's first contents, of its URI.
        let mut result = self
            .checked(&target, asked, answer?, started, |resource, notes| {
                notes_first(
                    resource,
                    "contents",
                    notes,
                    |text| serde_json::json!({"uri": uri, "mimeType": "text/plain", "text": text}),
                );
            })
            .await?;
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(rmcp::model::ReadResourceResponse::Complete(result))
    }

    #[allow(deprecated)] // logging (SEP-2577), still carried for older clients
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level.store(
            severity(request.level),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    // 2025-11-25 sessions: a subscription to an offered resource holds
    // one upstream (shared by the clients that want it); its updates are
    // relayed by `relay_updates`.
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let target = self.target(&context.extensions)?;
        let registry = self.offering_uri(&target, &request.uri)?;
        // Only a session whose updates are relayed (one that sent
        // `notifications/initialized`, which starts the relay and its
        // clean-up) holds an upstream subscription.
        let relayed = self.watching.load(std::sync::atomic::Ordering::SeqCst);
        let added = {
            let mut subscribed = self.subscribed();
            if subscribed.len() >= MAX_SUBSCRIPTIONS && !subscribed.contains(&request.uri) {
                return Err(McpError::invalid_params(
                    format!("a session subscribes to at most {MAX_SUBSCRIPTIONS} resources"),
                    None,
                ));
            }
            relayed && subscribed.insert(request.uri.clone())
        };
        if added {
            registry.subscribe_resource(&request.uri).await;
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let target = self.target(&context.extensions)?;
        let registry = self.offering_uri(&target, &request.uri)?;
        if self.subscribed().remove(&request.uri) {
            registry.unsubscribe_resource(&request.uri).await;
        }
        Ok(())
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        use rmcp::model::Reference;
        let started = std::time::Instant::now();
        let target = self.listed_target(&context.extensions).await?;
        let (set, registry) = self.offers_to(&target)?;
        let offered = match &request.r#ref {
            Reference::Prompt(p) => set.prompts.admits(&p.name),
            Reference::Resource(r) => set.resources.admits(&r.uri),
            _ => false,
        };
        if !offered {
            return Ok(rmcp::model::CompleteResult::default());
        }
        let what = match &request.r#ref {
            Reference::Prompt(p) => p.name.clone(),
            Reference::Resource(r) => r.uri.clone(),
            _ => String::new(),
        };
        let asked = match &request.r#ref {
            Reference::Prompt(_) => Asked::Prompt(&what),
            _ => Asked::Template(&what),
        };
        let answer = self
            .ask_upstream(&target, asked, |caller| {
                let (registry, request) = (registry.clone(), request.clone());
                async move {
                    let caller = caller.as_ref().map(|(s, t)| (s.as_str(), t.as_str()));
                    registry.complete(request, caller).await
                }
            })
            .await?;
        let arguments = serde_json::json!({
            "argument": request.argument,
            "context": request.context,
        });
        let asked = Answered {
            method: Method::Completion,
            about: &what,
            arguments: &arguments,
        };
        // Suggestions are for the person typing: a note has no place in
        // them (the guard logs what it found; redactions and blocks hold).
        // Neither audited nor classified: one comes per keystroke.
        let mut result = self
            .checked(&target, asked, answer, started, |_, _| {})
            .await?;
        result.result_type = Some(rmcp::model::ResultType::COMPLETE);
        Ok(result)
    }

    /// 2025-11-25 sessions (and stdio): tell the client when the set's
    /// list changes, for as long as the session lasts.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if self
            .watching
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        let Ok(target) = self.target(&context.extensions) else {
            return;
        };
        let server = self.clone();
        let peer = context.peer;
        tokio::spawn(self.clone().relay_updates(peer.clone()));
        tokio::spawn(async move {
            let mut seen = server.fingerprint(&target);
            let gone = {
                let peer = peer.clone();
                move || peer.is_transport_closed()
            };
            while server
                .next_change(&target, &mut seen, &gone)
                .await
                .is_some()
            {
                // Which list changed is not told apart: a client relists.
                if peer.notify_tool_list_changed().await.is_err()
                    || peer.notify_prompt_list_changed().await.is_err()
                    || peer.notify_resource_list_changed().await.is_err()
                {
                    break;
                }
                tracing::debug!(tool_set = %target.set, "told an MCP client the tool list changed");
            }
        });
    }

    // Tasks (SEP-2663) of upstream servers, under the gateway's ids; rmcp
    // answers -32021 to a client that did not declare the extension.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        use rmcp::model::{ClientRequest, GetTaskParams, GetTaskRequest, ServerResult};
        let started = std::time::Instant::now();
        let answer = self
            .ask_task(&context, &request.task_id, |task| {
                ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(task)))
            })
            .await?;
        let ServerResult::GetTaskResult(mut result) = answer else {
            return Err(McpError::internal_error(
                "the task's MCP server answered tasks/get with something else",
                None,
            ));
        };
        // A finished task inlines the tool's result: checked like a tool's
        // result, the notes first in its content; a result a guard blocks
        // is given as the tool's error, as `tools/call` gives it. The polls
        // of a running task carry no result and are not checked.
        self.bounded(&result)?;
        if let rmcp::model::TaskPayload::Completed { result: done } = &mut result.task.payload {
            let target = self.target(&context.extensions)?;
            let asked = Answered {
                method: Method::TasksGet,
                about: &request.task_id,
                arguments: &Value::Null,
            };
            let catalog = self.state.catalog();
            let mut value = Value::Object(std::mem::take(done));
            let checked = self
                .state
                .executor
                .answered(&catalog, &call_context(&target), asked, &mut value, started)
                .await;
            match checked {
                Ok(notes) => notes_first(
                    &mut value,
                    "content",
                    &notes,
                    |text| serde_json::json!({"type": "text", "text": text}),
                ),
                Err(e) => {
                    value = serde_json::json!({
                        "content": [{"type": "text", "text": e.to_string()}],
                        "isError": true,
                    });
                }
            }
            if let Value::Object(checked) = value {
                *done = checked;
            }
        }
        result.task.task.task_id = request.task_id;
        Ok(result)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        use rmcp::model::{ClientRequest, UpdateTaskParams, UpdateTaskRequest};
        let responses = request.input_responses;
        self.ask_task(&context, &request.task_id, |task| {
            ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(UpdateTaskParams::new(
                task,
                responses.clone(),
            )))
        })
        .await
        .map(drop)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        use rmcp::model::{CancelTaskParams, CancelTaskRequest, ClientRequest};
        self.ask_task(&context, &request.task_id, |task| {
            ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(task)))
        })
        .await
        .map(drop)
    }

    /// 2026-07-28: `subscriptions/listen` for list changes and for
    /// resources (at most `MAX_SUBSCRIPTIONS`; those the set does not
    /// offer are listened to in vain: the acknowledgement is sent before
    /// the request's set is known).
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        accepted.prompts_list_changed = requested.prompts_list_changed;
        accepted.resources_list_changed = requested.resources_list_changed;
        accepted.resource_subscriptions = requested
            .resource_subscriptions
            .as_ref()
            .map(|uris| uris.iter().take(MAX_SUBSCRIPTIONS).cloned().collect());
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let target = self.target(&context.request_context().extensions)?;
        // The resources the set offers, each holding an upstream
        // subscription while the stream lasts.
        let mut uris = std::collections::HashSet::new();
        for uri in context.accepted().resource_subscriptions.iter().flatten() {
            if let Ok(registry) = self.offering_uri(&target, uri)
                && uris.insert(uri.clone())
            {
                registry.subscribe_resource(uri).await;
            }
        }
        let listened = self.listen_to(&context, &target, &uris).await;
        let registry = self.state.catalog().mcp().clone();
        for uri in &uris {
            registry.unsubscribe_resource(uri).await;
        }
        listened
    }
}

impl ToolSetServer {
    /// A finished call as the client gets it: what a server of the
    /// 2026-07-28 revision handed back instead of a result (questions, a
    /// task, the client's missing capability), else the result.
    fn answer(
        &self,
        result: ToolResult,
        hand_back: Option<&HandBack>,
        asked: &input::Request,
        target: &Target,
        catalog: &Catalog,
        name: &str,
    ) -> Result<CallToolResponse, McpError> {
        let who = target.caller.subject();
        let who = who.as_deref();
        // What the server handed back instead of a result: questions, a
        // task, or the client's missing capability.
        match hand_back.and_then(HandBack::take) {
            Some(Handed::Input(questions)) => {
                return Ok(CallToolResponse::InputRequired(input::input_required(
                    &self.states,
                    asked,
                    questions,
                )?));
            }
            Some(Handed::Task { server, mut task }) => {
                let ours = self.task_scope(target);
                task.task.task_id =
                    input::task_id(&self.states, &ours, &server, &task.task.task_id)?;
                return Ok(CallToolResponse::Task(task));
            }
            Some(Handed::Refused(e)) => return Err(e),
            None => {}
        }
        let mut result = result;
        if name == FIND_TOOLS {
            // An MCP client calls what it found through `call_tool` (or by
            // name): it needs each tool's input schema.
            wire::add_input_schemas(&mut result, |name| {
                catalog
                    .tool_as(name, who)
                    .map(|t| Value::clone(&t.parameters))
            });
        }
        encode(&result)
    }

    /// Follows a call run in a task of its own (see `parked`) to its
    /// answer, or parks it at its server's question: the client's
    /// `input_required` result. A client that cancels its request, or a
    /// parked call that expires, ends the call.
    async fn follow(
        &self,
        running: parked::Running,
        asked: &input::Request,
        catalog: &Catalog,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let target = self.target(&context.extensions)?;
        let hand_back = running.hand_back().cloned();
        let now = tokio::select! {
            now = running.next() => now,
            () = context.ct.cancelled() => {
                return Err(McpError::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
            }
        };
        match now {
            parked::Now::Done(result) => {
                let name = asked.name.clone();
                self.answer(result, hand_back.as_ref(), asked, &target, catalog, &name)
            }
            parked::Now::Asks {
                key,
                request,
                parked,
            } => {
                let Some(id) = self.parked.park(parked) else {
                    return Err(McpError::internal_error(
                        format!(
                            "{} calls already wait for their clients' answers; call again later",
                            parked::MAX_PARKED
                        ),
                        None,
                    ));
                };
                Ok(CallToolResponse::InputRequired(input::parked_required(
                    &self.states,
                    asked,
                    (id, catalog.mcp_replica_url.clone()),
                    key,
                    *request,
                )?))
            }
        }
    }

    /// One `subscriptions/listen` stream until it is cancelled: list
    /// changes as accepted, and the updates of `uris`.
    async fn listen_to(
        &self,
        context: &SubscriptionContext,
        target: &Target,
        uris: &std::collections::HashSet<String>,
    ) -> Result<(), McpError> {
        let mut seen = self.fingerprint(target);
        let mut updates = Updates::new(&self.state);
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                uri = updates.next(&self.state), if !uris.is_empty() => {
                    if uris.contains(&uri) {
                        let note = ServerNotification::ResourceUpdatedNotification(
                            rmcp::model::ResourceUpdatedNotification::new(
                                rmcp::model::ResourceUpdatedNotificationParam::new(uri),
                            ),
                        );
                        if context.sink().send(note).await.is_err() {
                            return Ok(());
                        }
                    }
                }
                changed = self.next_change(target, &mut seen, &|| false) => {
                    if changed.is_none() {
                        return Ok(());
                    }
                    let accepted = context.accepted();
                    let notes = [
                        (accepted.tools_list_changed, ServerNotification::ToolListChangedNotification(
                            ToolListChangedNotification::default(),
                        )),
                        (accepted.prompts_list_changed, ServerNotification::PromptListChangedNotification(
                            rmcp::model::PromptListChangedNotification::default(),
                        )),
                        (accepted.resources_list_changed, ServerNotification::ResourceListChangedNotification(
                            rmcp::model::ResourceListChangedNotification::default(),
                        )),
                    ];
                    for (wanted, note) in notes {
                        if wanted == Some(true) && context.sink().send(note).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}
