//! toolgate's MCP client: the tools of declared MCP servers, proxied over
//! one persistent session per server (official `rmcp` client, stdio or
//! streamable HTTP, OAuth).
//!
//! The client knows nothing of the gateway's tool type: the registry is
//! generic over it ([`Offer`]), and the engine makes its tools of the
//! listings. A call ([`McpTool::call`]) answers with the server's result
//! mapped for a model and as the server sent it ([`Answer`]).
//!
//! - [`spec`]: a validated server declaration and the naming rules;
//! - [`oauth`]: the gateway authorized at a server (client credentials, or
//!   a person's login saved to a token file);
//! - [`session`]: a server's supervisor (start, list, relist on
//!   `list_changed`, restart with backoff, stderr to the logs);
//! - [`extras`]: a server's prompts, resources and resource templates;
//! - [`progress`]: a server's progress reports, routed to their call;
//! - [`relay`]: what a server asks during a call, passed to the call's
//!   client when it can answer;
//! - [`result`]: an MCP result as the gateway's uniform result.
//!
//! Tool names are only known once a server has listed its tools, while the
//! gateway's catalog is validated up front and immutable. The catalog
//! therefore holds an [`McpRegistry`]: the declared servers (validated with
//! the rest of the configuration) and a snapshot of their tools, prompts
//! and resources that the supervisors replace as a whole whenever a server
//! starts, stops or changes its lists. Lookups load the snapshot without a
//! lock.

pub mod extras;
pub mod oauth;
pub mod progress;
pub mod relay;
pub mod result;
pub mod session;
pub mod spec;
mod stdio;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use indexmap::IndexMap;
use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;

use session::{Server, Status};
pub use spec::ServerSpec;
use spec::Transport;
use toolgate::{CallContext, ProgressSink, ToolError};
use toolgate_config::Pos;

/// The gateway's tool type, as the registry makes and holds it: one for
/// each tool a server lists that its declaration admits.
pub trait Offer: Sized + Send + Sync + 'static {
    /// The gateway's tool for `listed`, a tool of `spec`'s server, named
    /// `name` in the gateway and called through `handle`; `Err` says why
    /// it cannot be offered (e.g. its schema is unusable).
    fn offer(
        spec: &ServerSpec,
        name: &str,
        listed: &rmcp::model::Tool,
        handle: McpTool<Self>,
    ) -> Result<Self, String>;

    /// Its description, for reports.
    fn description(&self) -> &str;
}

/// A successful call: the result as a model reads it, and as the server
/// sent it (for clients that read MCP results whole).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// `structuredContent`, else the content blocks as text (binary data
    /// summarised): see [`result`].
    pub data: Value,
    /// The `CallToolResult` in its wire form.
    pub wire: Arc<Value>,
}

/// One tool of an MCP server, as the gateway calls it.
pub struct McpTool<T> {
    server: Weak<Server<T>>,
    server_name: String,
    /// The server's name for the tool.
    remote: String,
    /// The server marks it `readOnlyHint`.
    pub read_only: bool,
    /// The tool's `_meta` as the server listed it (an MCP App names its
    /// `ui://` resource there), passed to MCP clients unchanged.
    pub meta: Option<Arc<serde_json::Map<String, Value>>>,
}

impl<T> std::fmt::Debug for McpTool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("server", &self.server_name)
            .field("remote", &self.remote)
            .field("read_only", &self.read_only)
            .finish()
    }
}

impl<T: Offer> McpTool<T> {
    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server_name
    }

    /// The server's name for the tool.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }

    /// Whether the server is told who calls (headers reading `request.*`):
    /// then its answers may differ per caller, and cached results must too.
    pub fn varies_by_caller(&self) -> bool {
        self.server.upgrade().is_some_and(|server| {
            matches!(&server.spec.transport, Transport::Http(http) if http.per_request.is_some() || http.credentials.is_some())
        })
    }

    /// Whose token the server is called with (`credentials`), when it is
    /// called as each caller, over a session of their own:
    /// [`call`](Self::call) then needs the caller's bearer token.
    pub fn credentials(&self) -> Option<toolgate_config::format::CredentialsDecl> {
        self.server.upgrade()?.spec.credentials().cloned()
    }

    fn per_user(&self) -> bool {
        self.credentials().is_some()
    }

    /// The gateway's model answering the server's sampling requests, when
    /// its declaration names one (`sampling`).
    pub fn sampling(&self) -> Option<toolgate_config::format::McpSamplingDecl> {
        self.server.upgrade()?.spec.sampling.clone()
    }

    /// Calls the tool over the server's session. Dropping the future (the
    /// executor's timeout, a cancelled request) sends
    /// `notifications/cancelled` to the server.
    ///
    /// `trace` holds the call's trace context (`traceparent`,
    /// `tracestate`), when traces are exported: it is sent in the call's
    /// `_meta` (MCP's SEP-414), whatever the transport. With `progress`,
    /// the call asks the server for progress reports and passes each on.
    ///
    /// At a `per_user` server the call goes over the caller's own session,
    /// with `bearer` (the caller's token for the server, which the gateway
    /// obtained); a failed call closes that session, and a refused token
    /// is [`ToolError::NotConnected`] (the gateway may renew it and call
    /// again).
    pub async fn call(
        &self,
        args: &Value,
        ctx: &CallContext,
        trace: &http::HeaderMap,
        progress: Option<&ProgressSink>,
        bearer: Option<&str>,
    ) -> Result<Answer, ToolError> {
        let server = self.server.upgrade().ok_or_else(|| {
            ToolError::Backend(format!(
                "MCP server `{}` has been shut down",
                self.server_name
            ))
        })?;
        let caller = match (self.per_user(), ctx.subject.as_deref(), bearer) {
            (false, _, _) => None,
            (true, Some(subject), Some(token)) => Some((subject, token)),
            (true, _, _) => {
                return Err(ToolError::NotConnected(format!(
                    "MCP server `{}` is called as each caller, and this call has no caller's token for it",
                    self.server_name
                )));
            }
        };
        let peer = match caller {
            None => server.peer().map_err(ToolError::Backend)?,
            Some((subject, token)) => match server.user_peer(subject, token).await {
                Ok(peer) => peer,
                Err((why, true)) => {
                    return Err(ToolError::NotConnected(format!(
                        "MCP server `{}` refused the caller's token: {why}",
                        self.server_name
                    )));
                }
                Err((why, false)) => return Err(ToolError::Backend(why)),
            },
        };
        let mut params = CallToolRequestParams::new(self.remote.clone());
        if let Value::Object(map) = args {
            params = params.with_arguments(map.clone());
        }
        trace_context(&mut params, trace);
        caller_headers(&server, ctx, &mut params)?;
        if let Some((_, token)) = caller {
            // The token as it is now (renewed since the session opened,
            // perhaps): the session's HTTP client sends it.
            let meta = params.meta.get_or_insert_with(Default::default);
            let headers = meta
                .0
                .0
                .entry(session::CALLER_HEADERS_META.to_owned())
                .or_insert_with(|| Value::Object(Default::default()));
            if let Value::Object(headers) = headers {
                headers.insert(
                    "authorization".into(),
                    Value::String(format!("Bearer {token}")),
                );
            }
        }
        let outcome = self.call_on(&server, &peer, params, ctx, progress).await;
        if let (Err(_), Some((subject, _))) = (&outcome, caller) {
            server.forget_user(subject);
        }
        outcome
    }

    async fn call_on(
        &self,
        server: &Arc<Server<T>>,
        peer: &Peer<RoleClient>,
        mut params: CallToolRequestParams,
        ctx: &CallContext,
        progress: Option<&ProgressSink>,
    ) -> Result<Answer, ToolError> {
        let per_user = self.per_user();
        let name = &self.server_name;
        let relay = relay::Relay::of(ctx).cloned();
        #[allow(deprecated)] // logging (SEP-2577), still carried
        if let Some(level) = relay.as_ref().and_then(|r| r.log_level) {
            params
                .meta
                .get_or_insert_with(Default::default)
                .set_log_level(level);
        }
        let _running = server.running.enter(relay.clone());
        // A client that answers in a request of its own (2026-07-28): the
        // server hears what it can answer, and gets its answers.
        let hand_back = relay.as_ref().and_then(|r| r.hand_back.clone());
        let meta = hand_back.as_ref().map(|h| {
            let mut meta = rmcp::model::RequestMetaObject::new();
            meta.set_client_capabilities(h.capabilities());
            meta
        });
        if let Some(resume) = hand_back.as_ref().and_then(|h| h.resume_for(name)) {
            params.input_responses = Some(resume.responses.clone());
            params.request_state.clone_from(&resume.state);
        }
        let mut rounds = 0;
        let response = loop {
            let response = match progress {
                None => call_once(peer, params.clone(), meta.clone()).await,
                Some(sink) => {
                    call_reporting(server, peer, params.clone(), meta.clone(), sink).await
                }
            };
            // A 2026-07-28 server asking for input (SEP-2322): handed back
            // to a client that answers itself, or each request answered as
            // a gateway without a person can, the server's state echoed,
            // the call sent again — a bounded number of times.
            let Ok(CallToolResponse::InputRequired(asked)) = response else {
                break response;
            };
            rounds += 1;
            if rounds > MAX_INPUT_ROUNDS {
                return Err(ToolError::Failed(format!(
                    "MCP server `{name}` still asked for input after {MAX_INPUT_ROUNDS} answers; the gateway gave up the call"
                )));
            }
            let relay = relay.clone().unwrap_or_default();
            let asked = match &hand_back {
                Some(hand_back) => match hand_back_to(name, asked, hand_back, &relay).await? {
                    Some(asked) => asked,
                    None => {
                        return Err(ToolError::HandedToClient(format!(
                            "MCP server `{name}` asked the client for input; the question was handed to it"
                        )));
                    }
                },
                None => asked,
            };
            let (responses, state) = answer_input_requests(name, asked, &relay).await?;
            if responses.is_none() {
                // Only state to carry: the server is working; ask again
                // after a pause that grows.
                tokio::time::sleep(Duration::from_millis(50 << rounds.min(6))).await;
            }
            params.input_responses = responses;
            params.request_state = state;
        };
        // The server's log messages sent before its answer reach the
        // client before the call's answer does.
        if let Some(log) = relay.as_ref().and_then(|r| r.log.as_ref()) {
            (log.flushed)().await;
        }
        match response {
            Ok(CallToolResponse::Complete(result)) => {
                let wire = serde_json::to_value(&result).map_err(|e| {
                    ToolError::Failed(format!(
                        "the result of MCP server `{name}` is unreadable: {e}"
                    ))
                })?;
                let data = result::map_result(&wire, name)?;
                Ok(Answer {
                    data,
                    wire: Arc::new(wire),
                })
            }
            Ok(CallToolResponse::Task(task)) => match &hand_back {
                Some(hand_back) if hand_back.tasks => {
                    hand_back.hand(relay::Handed::Task {
                        server: name.clone(),
                        task,
                    });
                    Err(ToolError::HandedToClient(format!(
                        "MCP server `{name}` runs the call as a task, which the client follows"
                    )))
                }
                _ => Err(ToolError::Failed(format!(
                    "MCP server `{name}` started a task for the call, which the caller's client cannot follow"
                ))),
            },
            Ok(_) => Err(ToolError::Failed(format!(
                "MCP server `{name}` answered the call with a result the gateway does not know"
            ))),
            Err(ServiceError::McpError(e))
                if e.code == rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                    && hand_back.is_some() =>
            {
                let text = format!(
                    "MCP server `{name}` needs a capability the client did not declare: {}",
                    e.message
                );
                if let Some(hand_back) = &hand_back {
                    hand_back.hand(relay::Handed::Refused(e));
                }
                Err(ToolError::Failed(text))
            }
            // The caller's own session: it is closed (by the caller of
            // this function), the next call opens a new one.
            Err(e) if per_user && needs_token(&e) => Err(ToolError::NotConnected(format!(
                "MCP server `{name}` refused the caller's token: {}",
                in_words(&e, &server.spec)
            ))),
            Err(e) if per_user => Err(ToolError::Backend(format!(
                "MCP server `{name}` (the caller's session): {}; the next call opens a new session",
                in_words(&e, &server.spec)
            ))),
            Err(ServiceError::TransportClosed) => Err(ToolError::Backend(format!(
                "MCP server `{name}` closed the session during the call; the gateway starts it again (its tools are unavailable until then)"
            ))),
            Err(e @ ServiceError::TransportSend(_)) if connection_lost(&e) => {
                // Unreachable, or it lost our session: a new one is started
                // (the tools are unavailable until it is up).
                let reason = in_words(&e, &server.spec);
                server.connection_broken(reason.clone());
                Err(ToolError::Backend(format!(
                    "MCP server `{name}`: {reason}; the gateway is reconnecting to it"
                )))
            }
            Err(e) if server.spec.uses_oauth() && needs_token(&e) => {
                // The OAuth token expired and could not be refreshed (or was
                // revoked): a new session authorizes afresh (client
                // credentials: a new token; a login: the token file again).
                let reason = in_words(&e, &server.spec);
                server.connection_broken(reason.clone());
                let next = match server.spec.oauth() {
                    Some(spec::OAuthSpec::AuthorizationCode { .. }) => format!(
                        "the saved token cannot be used or refreshed: run `toolgate mcp login {name}` again"
                    ),
                    _ => "the gateway asks its authorization server for a new token with its client credentials".to_owned(),
                };
                Err(ToolError::Backend(format!(
                    "MCP server `{name}`: {reason}; {next}"
                )))
            }
            Err(ServiceError::McpError(e)) => Err(ToolError::Backend(format!(
                "MCP server `{name}` answered with an error: {} (code {})",
                e.message, e.code.0
            ))),
            Err(e) => Err(ToolError::Backend(format!(
                "MCP server `{name}`: {}",
                in_words(&e, &server.spec)
            ))),
        }
    }
}

/// The headers the server's declaration renders for this caller
/// (`request.key`, `request.project`, `request.subject`, `request.claims`), in the call's `_meta` for the HTTP
/// client to send (see `session::CallerHeaders`).
fn caller_headers<T>(
    server: &Server<T>,
    ctx: &CallContext,
    params: &mut CallToolRequestParams,
) -> Result<(), ToolError> {
    let Transport::Http(http) = &server.spec.transport else {
        return Ok(());
    };
    let Some(per_request) = &http.per_request else {
        return Ok(());
    };
    let headers = per_request
        .render(ctx)
        .map_err(|e| ToolError::Refused(format!("MCP server `{}`: {e}", server.spec.name)))?;
    if headers.is_empty() {
        return Ok(());
    }
    let map: serde_json::Map<String, Value> = headers
        .into_iter()
        .map(|(name, value)| (name.to_string(), Value::String(value)))
        .collect();
    params
        .meta
        .get_or_insert_with(Default::default)
        .0
        .0
        .insert(session::CALLER_HEADERS_META.to_owned(), Value::Object(map));
    Ok(())
}

/// The call's trace context in its `_meta` (`traceparent`, `tracestate`:
/// MCP's SEP-414): it reaches the server whatever the transport.
fn trace_context(params: &mut CallToolRequestParams, headers: &http::HeaderMap) {
    let field = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(traceparent) = field("traceparent") else {
        return;
    };
    let meta = params.meta.get_or_insert_with(Default::default);
    meta.set_traceparent(traceparent);
    if let Some(tracestate) = field("tracestate").filter(|s| !s.is_empty()) {
        meta.set_tracestate(tracestate);
    }
}

/// `tools/call` with the server's progress reports passed to `sink`. rmcp
/// gives every request a progress token of its own; the reports carrying
/// it are routed here by the session's dispatcher ([`progress`]), those
/// sent before the subscription is in place included.
async fn call_reporting<T>(
    server: &Server<T>,
    peer: &rmcp::Peer<rmcp::RoleClient>,
    params: CallToolRequestParams,
    meta: Option<rmcp::model::RequestMetaObject>,
    sink: &ProgressSink,
) -> Result<CallToolResponse, ServiceError> {
    use rmcp::model::{CallToolRequest, ClientRequest};
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, request_options(meta))
        .await?;
    let reports = server.progress.subscribe(handle.progress_token.clone());
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let result = progress::forward(handle.await_response(), reports, sink).await;
    guard.id = None;
    call_response(result?)
}

/// `tools/call`, with `meta` in the request's `_meta` (over what the
/// session puts there).
async fn call_once(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    params: CallToolRequestParams,
    meta: Option<rmcp::model::RequestMetaObject>,
) -> Result<CallToolResponse, ServiceError> {
    use rmcp::model::{CallToolRequest, ClientRequest};
    if meta.is_none() {
        return peer.call_tool_once(params).await;
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_request_with_option(request, request_options(meta))
        .await?;
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
    };
    let result = handle.await_response().await;
    guard.id = None;
    call_response(result?)
}

fn request_options(
    meta: Option<rmcp::model::RequestMetaObject>,
) -> rmcp::service::PeerRequestOptions {
    let options = rmcp::service::PeerRequestOptions::no_options();
    match meta {
        Some(meta) => options.with_meta(meta),
        None => options,
    }
}

fn call_response(result: rmcp::model::ServerResult) -> Result<CallToolResponse, ServiceError> {
    use rmcp::model::ServerResult;
    match result {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(result) => Ok(CallToolResponse::InputRequired(result)),
        ServerResult::CreateTaskResult(result) => Ok(CallToolResponse::Task(result)),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// A request (`prompts/get`, `resources/read`) for a client that answers
/// in a request of its own: `request` builds it with the answers and state
/// of the round (the client's own at first, when it brings some), `done`
/// takes its result. The server's questions the client can answer are
/// handed back to it (the answer is then an error the face does not pass
/// on: it returns the questions), the rest answered as the gateway alone
/// can, a bounded number of times.
async fn handing_back<R>(
    peer: &rmcp::Peer<rmcp::RoleClient>,
    server: &str,
    hand_back: &relay::HandBack,
    request: impl Fn(Option<rmcp::model::InputResponses>, Option<String>) -> rmcp::model::ClientRequest,
    done: impl Fn(rmcp::model::ServerResult) -> Option<R>,
) -> Result<R, ServiceError> {
    use rmcp::model::ServerResult;
    let failed =
        |e: ToolError| ServiceError::McpError(rmcp::ErrorData::internal_error(e.to_string(), None));
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_client_capabilities(hand_back.capabilities());
    let (mut responses, mut state) = match hand_back.resume_for(server) {
        Some(resume) => (Some(resume.responses.clone()), resume.state.clone()),
        None => (None, None),
    };
    let alone = relay::Relay::default();
    for round in 0..=MAX_INPUT_ROUNDS {
        if round > 0 && responses.is_none() {
            // Only state to carry: the server is working; ask again after
            // a pause that grows, as a call does.
            tokio::time::sleep(Duration::from_millis(50 << round.min(6))).await;
        }
        let handle = peer
            .send_request_with_option(
                request(responses.take(), state.take()),
                request_options(Some(meta.clone())),
            )
            .await?;
        match handle.await_response().await? {
            ServerResult::InputRequiredResult(asked) => {
                let Some(asked) = hand_back_to(server, asked, hand_back, &alone)
                    .await
                    .map_err(failed)?
                else {
                    return Err(failed(ToolError::Failed(format!(
                        "MCP server `{server}` asked the client for input; the question was handed to it"
                    ))));
                };
                (responses, state) = answer_input_requests(server, asked, &alone)
                    .await
                    .map_err(failed)?;
            }
            other => return done(other).ok_or(ServiceError::UnexpectedResponse),
        }
    }
    Err(failed(ToolError::Failed(format!(
        "MCP server `{server}` still asked for input after {MAX_INPUT_ROUNDS} answers; the gateway gave up"
    ))))
}

/// A server's questions to a client that answers in a request of its own:
/// those it can answer are handed back to it (with the gateway's own
/// answers to the rest), and `None` is returned; when it can answer none,
/// the questions are given back for the gateway to answer.
async fn hand_back_to(
    server: &str,
    asked: rmcp::model::InputRequiredResult,
    hand_back: &relay::HandBack,
    relay: &relay::Relay,
) -> Result<Option<rmcp::model::InputRequiredResult>, ToolError> {
    let requests = asked.input_requests.clone().unwrap_or_default();
    if requests.len() > MAX_INPUT_REQUESTS {
        return Err(too_many(server, requests.len()));
    }
    let (theirs, ours): (rmcp::model::InputRequests, rmcp::model::InputRequests) = requests
        .into_iter()
        .partition(|(_, request)| hand_back.answers(request));
    if theirs.is_empty() {
        return Ok(Some(asked));
    }
    let answered = answer_requests(server, ours, relay).await?;
    hand_back.hand(relay::Handed::Input(relay::Questions {
        server: server.to_owned(),
        requests: theirs,
        state: asked.request_state,
        answered,
    }));
    Ok(None)
}

fn too_many(server: &str, asked: usize) -> ToolError {
    ToolError::Failed(format!(
        "MCP server `{server}` asked for {asked} inputs at once (at most {MAX_INPUT_REQUESTS} are answered)"
    ))
}

/// How many times one call answers a server's input requests (SEP-2322)
/// before it is given up.
const MAX_INPUT_ROUNDS: u32 = 8;

/// The answers to a server's input requests: the call's client answers
/// what it can (see [`relay`]); without one, an elicitation is declined,
/// the roots list is empty, and a sampling request fails the call with a
/// sentence the model can read. Returns the answers (none when the server
/// only sent state) and the state to echo unchanged.
async fn answer_input_requests(
    server: &str,
    asked: rmcp::model::InputRequiredResult,
    relay: &relay::Relay,
) -> Result<(Option<rmcp::model::InputResponses>, Option<String>), ToolError> {
    let requests = asked.input_requests.unwrap_or_default();
    if requests.is_empty() && asked.request_state.is_none() {
        return Err(ToolError::Failed(format!(
            "MCP server `{server}` asked for input without saying what it needs"
        )));
    }
    if requests.len() > MAX_INPUT_REQUESTS {
        return Err(too_many(server, requests.len()));
    }
    let answers = answer_requests(server, requests, relay).await?;
    Ok((
        (!answers.is_empty()).then_some(answers),
        asked.request_state,
    ))
}

/// Each of `requests` answered by `relay` (see [`answer_input_requests`]).
async fn answer_requests(
    server: &str,
    requests: rmcp::model::InputRequests,
    relay: &relay::Relay,
) -> Result<rmcp::model::InputResponses, ToolError> {
    use rmcp::model::InputRequest;
    let failed = |e: rmcp::ErrorData| ToolError::Failed(e.message.to_string());
    let value = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| {
            ToolError::Failed(format!(
                "an answer for MCP server `{server}` is unreadable: {e}"
            ))
        })
    };
    let mut answers = rmcp::model::InputResponses::new();
    for (key, request) in requests {
        let answer = match request {
            InputRequest::Elicitation(req) => value(serde_json::to_value(
                relay.elicit(req.params).await.map_err(failed)?,
            ))?,
            InputRequest::ListRoots(_) => {
                value(serde_json::to_value(relay.roots().await.map_err(failed)?))?
            }
            InputRequest::CreateMessage(req) => value(serde_json::to_value(
                relay.sample(req.params, server).await.map_err(failed)?,
            ))?,
            _ => {
                return Err(ToolError::Failed(format!(
                    "MCP server `{server}` asked for a kind of input the gateway does not know"
                )));
            }
        };
        answers.insert(key, answer);
    }
    Ok(answers)
}

/// The most input requests of one round that are answered.
const MAX_INPUT_REQUESTS: usize = 16;

/// Tells the server a request was given up (`notifications/cancelled`)
/// when dropped before it was answered, as rmcp's own calls do.
struct CancelOnDrop {
    peer: rmcp::Peer<rmcp::RoleClient>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let note = rmcp::model::CancelledNotification::new(
                    rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("the gateway gave up the call".to_owned()),
                    ),
                );
                let _ = peer.send_notification(note.into()).await;
            });
        }
    }
}

/// The transport's own error inside rmcp's wrappers (which name Rust
/// types).
fn innermost<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> &'a (dyn std::error::Error + 'static) {
    if let Some(ServiceError::TransportSend(t)) = e.downcast_ref::<ServiceError>() {
        return innermost(&*t.error);
    }
    if let Some(t) = e.downcast_ref::<rmcp::transport::DynamicTransportError>() {
        return innermost(&*t.error);
    }
    if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
        e.downcast_ref::<rmcp::service::ClientInitializeError>()
    {
        return innermost(&*error.error);
    }
    // The HTTP client's own error, under rmcp's "Client error".
    if let Some(rmcp::transport::streamable_http_client::StreamableHttpError::Client(http)) =
        e.downcast_ref::<rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>>()
    {
        return http;
    }
    e
}

/// A reqwest error's text without its URL (and its source, which says why).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text
            .replace(&format!(" for url ({url})"), "")
            .replace(url.as_str(), "<url>");
    }
    match std::error::Error::source(e) {
        Some(source) => format!("{text}: {source}"),
        None => text,
    }
}

/// `true` when the connection itself is gone (the server is unreachable, or
/// no longer knows the session), not when one request got an error status
/// (a 429 or 500 fails that call only).
fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    let inner = innermost(e);
    if let Some(http) = inner.downcast_ref::<reqwest::Error>() {
        return http.is_connect() || http.is_timeout() || http.is_request();
    }
    matches!(
        inner.to_string().as_str(),
        "Session expired (HTTP 404)" | "Transport channel closed" | "unexpected end of stream"
    )
}

/// `true` when the server refused the gateway's credentials (HTTP 401, or
/// 403 for a missing scope): trying again will not help until the
/// configuration gives it a token.
pub(crate) fn needs_token(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        innermost(e).to_string().as_str(),
        "Auth required" | "Insufficient scope"
    )
}

/// An rmcp error of `server` as a sentence: the transport's own error
/// rather than rmcp's wrapper, which names Rust types; a refusal of the
/// gateway's credentials says which setting supplies them.
pub(crate) fn in_words(e: &(dyn std::error::Error + 'static), server: &spec::ServerSpec) -> String {
    let oauth = server.oauth();
    if let Some(ServiceError::Timeout { timeout }) = e.downcast_ref::<ServiceError>() {
        return format!("no answer within {timeout:?}");
    }
    let context = match e.downcast_ref::<rmcp::service::ClientInitializeError>() {
        Some(rmcp::service::ClientInitializeError::TransportError { context, .. }) => {
            format!(" (while {context})")
        }
        _ => String::new(),
    };
    let inner = innermost(e);
    // reqwest's errors name the URL, which may hold a secret.
    let text = match inner.downcast_ref::<reqwest::Error>() {
        Some(http) => without_url(http),
        None => inner.to_string(),
    };
    let words = match text.as_str() {
        "Auth required" => match oauth {
            None => "the server answered 401 Unauthorized: give it a token in this server's `headers` (e.g. `Authorization: \"Bearer {{ env.TOKEN }}\"`)".to_owned(),
            Some(oauth) => format!("the server answered 401 Unauthorized: {}", oauth::what_to_do(&server.name, oauth)),
        },
        "Insufficient scope" => match oauth {
            None => "the server answered 403 (insufficient scope): the token in this server's `headers` lacks a permission it needs".to_owned(),
            Some(spec::OAuthSpec::ClientCredentials { .. }) => "the server answered 403 (insufficient scope): the gateway's token lacks a scope it needs — add it to `oauth.scopes`".to_owned(),
            Some(spec::OAuthSpec::AuthorizationCode { .. }) => format!("the server answered 403 (insufficient scope): the gateway's token lacks a scope it needs — add it to `oauth.scopes` and run `toolgate mcp login {}` again", server.name),
        },
        "Session expired (HTTP 404)" => "the server no longer knows the gateway's session (it restarted?)".to_owned(),
        other => other.to_owned(),
    };
    let connection = match e.downcast_ref::<ServiceError>() {
        Some(ServiceError::TransportSend(_)) => "the connection failed: ",
        _ => "",
    };
    format!("{connection}{words}{context}")
}

/// A tool the registry cannot offer now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The tool's name, or `mcp:<server>` while the server's tools are
    /// unknown (it never listed them).
    pub name: String,
    pub server: String,
    pub reason: String,
    pub origin: String,
}

/// An exact tool name a tool set expects from MCP servers; checked once
/// they have listed their tools.
#[derive(Debug, Clone)]
pub struct Expected {
    pub name: String,
    pub set: String,
    pub file: String,
    pub pos: Pos,
    /// The servers that could offer it.
    pub servers: Vec<String>,
}

impl Expected {
    /// The missing name in words, with where the set names it.
    fn describe(&self) -> String {
        format!(
            "{}:{}:{}: tool set `{}` names `{}`, which no MCP server offers ({})",
            self.file,
            self.pos.line,
            self.pos.column,
            self.set,
            self.name,
            self.servers.join(", ")
        )
    }
}

/// What the gateway currently offers from its MCP servers.
struct Snapshot<T> {
    tools: IndexMap<String, Arc<T>>,
    gaps: IndexMap<String, Gap>,
    /// Prompts by the gateway's name: the server (its index), the
    /// server's name, and the prompt under the gateway's name.
    prompts: IndexMap<String, (usize, String, rmcp::model::Prompt)>,
    /// Resources by URI: the server serving it (the first to list it).
    resources: IndexMap<String, (usize, rmcp::model::Resource)>,
    /// Resource templates, the first declared server's first.
    templates: Vec<(usize, rmcp::model::ResourceTemplate)>,
    /// In a caller's view: the per-caller servers (their index) whose
    /// lists are the ones they listed to that caller, and whose requests
    /// go over the caller's own session.
    own: Vec<usize>,
}

impl<T> Default for Snapshot<T> {
    fn default() -> Self {
        Snapshot {
            tools: IndexMap::new(),
            gaps: IndexMap::new(),
            prompts: IndexMap::new(),
            resources: IndexMap::new(),
            templates: Vec::new(),
            own: Vec::new(),
        }
    }
}

impl<T> Snapshot<T> {
    /// The server (its index) that answers `what`.
    fn index_for(&self, what: &Asked<'_>) -> Option<usize> {
        match what {
            Asked::Prompt(name) => self.prompts.get(*name).map(|(i, _, _)| *i),
            Asked::Resource(uri) => self.resources.get(*uri).map(|(i, _)| *i).or_else(|| {
                self.templates
                    .iter()
                    .find(|(_, t)| extras::template_matches(&t.uri_template, uri))
                    .map(|(i, _)| *i)
            }),
            Asked::Template(template) => self
                .templates
                .iter()
                .find(|(_, t)| t.uri_template == *template)
                .map(|(i, _)| *i),
            // A name is the registry's to look up (`McpRegistry::index_of`).
            Asked::Server(_) => None,
        }
    }
}

/// What a request other than a tool call asks of the servers.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// A prompt, by the gateway's name.
    Prompt(&'a str),
    /// A resource, by URI (listed, or described by a template).
    Resource(&'a str),
    /// A resource template, by its URI template (completions).
    Template(&'a str),
    /// A server, by name (a task it runs).
    Server(&'a str),
}

/// Why a request other than a tool call failed: the error in MCP's terms,
/// and whether the server refused the caller's token (at a per-caller
/// server; the gateway may renew it and ask again).
#[derive(Debug, Clone)]
pub struct AskError {
    pub error: rmcp::ErrorData,
    pub refused: bool,
}

impl From<rmcp::ErrorData> for AskError {
    fn from(error: rmcp::ErrorData) -> Self {
        AskError {
            error,
            refused: false,
        }
    }
}

impl From<AskError> for rmcp::ErrorData {
    fn from(e: AskError) -> Self {
        e.error
    }
}

/// The declared servers and the snapshot of their tools. Dropping it (the
/// last catalog holding it) stops the servers no newer registry took over.
pub(crate) struct Registry<T> {
    servers: Vec<Arc<Server<T>>>,
    /// Names of the catalog's other tools, which win over MCP tools, with
    /// where they are declared.
    reserved: HashMap<String, String>,
    expected: Vec<Expected>,
    snapshot: ArcSwap<Snapshot<T>>,
    /// Bumped after every rebuild of the snapshot.
    published: tokio::sync::watch::Sender<u64>,
    /// Serialises the rebuilding of the snapshot.
    publishing: Mutex<()>,
    started: std::sync::atomic::AtomicBool,
}

impl<T> Drop for Registry<T> {
    fn drop(&mut self) {
        for server in &self.servers {
            server.release();
        }
    }
}

impl<T> Registry<T> {
    /// Rebuilds the snapshot from every server's state, in declaration
    /// order: the first tool to claim a name keeps it (the catalog's own
    /// tools first), later ones are reported as colliding.
    pub(crate) fn publish(&self) {
        let _guard = self
            .publishing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let snapshot = self.compose(&[]);
        let old = self.snapshot.load();
        for (name, g) in &snapshot.gaps {
            if old.gaps.get(name) != Some(g) && g.reason.contains("collides") {
                tracing::warn!(mcp_server = %g.server, "tool `{name}` is unavailable: {}", g.reason);
            }
        }
        self.snapshot.store(Arc::new(snapshot));
        self.published.send_modify(|n| *n += 1);
    }

    /// What the servers offer, in declaration order (the first tool to
    /// claim a name keeps it, the catalog's own tools first). A server with
    /// a listing in `theirs` (by index: what a per-caller server listed to
    /// one caller) offers that listing; every other, its state's.
    fn compose(&self, theirs: &[Option<session::UserListing<T>>]) -> Snapshot<T> {
        let mut tools: IndexMap<String, Arc<T>> = IndexMap::new();
        let mut owner: HashMap<String, String> = HashMap::new();
        let mut gaps: IndexMap<String, Gap> = IndexMap::new();
        let mut prompts = IndexMap::new();
        let mut resources = IndexMap::new();
        let mut templates = Vec::new();
        let mut own = Vec::new();
        for (index, server) in self.servers.iter().enumerate() {
            let spec = &server.spec;
            let state = server.state();
            let origin = spec.origin();
            let gap = |name: &str, reason: String| Gap {
                name: name.to_owned(),
                server: spec.name.clone(),
                reason,
                origin: origin.clone(),
            };
            let offered = match theirs.get(index) {
                Some(Some(listing)) => {
                    own.push(index);
                    Some((&listing.tools, &listing.extras))
                }
                _ if state.status == Status::Ready => Some((&state.listed, &state.extras)),
                _ => None,
            };
            if let Some((listed, extras)) = offered {
                offer_extras(
                    index,
                    spec,
                    extras,
                    &mut prompts,
                    &mut resources,
                    &mut templates,
                );
                for l in listed.iter() {
                    let taken = self
                        .reserved
                        .get(&l.name)
                        .map(|at| format!("tool `{}` declared at {at}", l.name))
                        .or_else(|| {
                            owner.get(&l.name).map(|s| {
                                format!("tool `{}` of MCP server `{s}`, declared earlier", l.name)
                            })
                        });
                    match (&l.tool, taken) {
                        (Ok(_), Some(other)) | (Err(_), Some(other)) => {
                            gaps.entry(l.name.clone()).or_insert_with(|| {
                                gap(
                                    &l.name,
                                    format!(
                                        "the name collides with the {other} — give MCP server `{}` a distinct `tools.prefix` or exclude the tool",
                                        spec.name
                                    ),
                                )
                            });
                        }
                        (Ok(tool), None) => {
                            owner.insert(l.name.clone(), spec.name.clone());
                            tools.insert(l.name.clone(), Arc::clone(tool));
                        }
                        (Err(reason), None) => {
                            gaps.entry(l.name.clone())
                                .or_insert_with(|| gap(&l.name, reason.clone()));
                        }
                    }
                }
                continue;
            }
            let reason = state.reason(&spec.name);
            let mut names: Vec<String> = state.listed.iter().map(|l| l.name.clone()).collect();
            if names.is_empty() {
                names = spec.tools.known_names().unwrap_or_default();
            }
            if names.is_empty() {
                let name = format!("mcp:{}", spec.name);
                gaps.insert(
                    name.clone(),
                    gap(
                        &name,
                        format!("{reason}; its tools are unknown until it lists them"),
                    ),
                );
            }
            for name in names {
                if !self.reserved.contains_key(&name) && !owner.contains_key(&name) {
                    gaps.entry(name.clone())
                        .or_insert_with(|| gap(&name, reason.clone()));
                }
            }
        }
        Snapshot {
            tools,
            gaps,
            prompts,
            resources,
            templates,
            own,
        }
    }

    fn server(&self, name: &str) -> Option<&Arc<Server<T>>> {
        self.servers.iter().find(|s| s.spec.name == name)
    }
}

/// Adds a ready server's prompts (renamed like its tools; the first to
/// claim a name keeps it), resources (the first to list a URI serves it)
/// and templates to the snapshot being built.
fn offer_extras(
    index: usize,
    spec: &ServerSpec,
    extras: &extras::Extras,
    prompts: &mut IndexMap<String, (usize, String, rmcp::model::Prompt)>,
    resources: &mut IndexMap<String, (usize, rmcp::model::Resource)>,
    templates: &mut Vec<(usize, rmcp::model::ResourceTemplate)>,
) {
    for p in &extras.prompts {
        match spec.tools.local_name(&p.name) {
            Ok(name) if !prompts.contains_key(&name) => {
                let mut offered = p.clone();
                offered.name.clone_from(&name);
                prompts.insert(name, (index, p.name.clone(), offered));
            }
            Ok(name) => {
                tracing::debug!(mcp_server = %spec.name, "prompt `{name}` of MCP server `{}` is served by an earlier server", spec.name)
            }
            Err(reason) => {
                tracing::debug!(mcp_server = %spec.name, "prompt `{}` of MCP server `{}` is not offered: {reason}", p.name, spec.name)
            }
        }
    }
    let (offered, offered_templates) = extras::offered(&spec.name, extras);
    for r in offered {
        resources.entry(r.uri.clone()).or_insert((index, r));
    }
    templates.extend(offered_templates.into_iter().map(|t| (index, t)));
}

/// How long a request other than a tool call (`prompts/get`,
/// `resources/read`...) may take when the server sets no `timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The MCP servers of a catalog. Cheap to clone: clones share the servers.
pub struct McpRegistry<T> {
    inner: Arc<Registry<T>>,
}

impl<T> Clone for McpRegistry<T> {
    fn clone(&self) -> Self {
        McpRegistry {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> std::fmt::Debug for McpRegistry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRegistry")
            .field(
                "servers",
                &self
                    .inner
                    .servers
                    .iter()
                    .map(|s| &s.spec)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<T: Offer> Default for McpRegistry<T> {
    fn default() -> Self {
        McpRegistry::new(Vec::new(), HashMap::new(), Vec::new())
    }
}

impl<T: Offer> McpRegistry<T> {
    /// A registry of validated servers, none started. `reserved` maps the
    /// names of the catalog's other tools to where they are declared.
    pub fn new(
        specs: Vec<ServerSpec>,
        reserved: HashMap<String, String>,
        expected: Vec<Expected>,
    ) -> McpRegistry<T> {
        let inner = Arc::new(Registry {
            servers: specs
                .into_iter()
                .map(|s| Arc::new(Server::new(s)))
                .collect(),
            reserved,
            expected,
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            published: tokio::sync::watch::Sender::new(0),
            publishing: Mutex::new(()),
            started: std::sync::atomic::AtomicBool::new(false),
        });
        inner.publish();
        McpRegistry { inner }
    }

    /// Takes over, from `previous` (the registry of the catalog in service),
    /// every server declared the same way here: its supervisor and session
    /// go on, and this registry offers its tools at once. Must be called
    /// before this registry is cloned or started (the servers learn which
    /// registries hold them when those start). Returns the names of the
    /// servers taken over.
    pub fn adopt(&mut self, previous: &McpRegistry<T>) -> Vec<String> {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            tracing::warn!("MCP sessions cannot be kept: the new catalog is already in use");
            return Vec::new();
        };
        let mut kept = Vec::new();
        let mut taken = Vec::new();
        for slot in &mut inner.servers {
            let Some(old) = previous
                .inner
                .servers
                .iter()
                .find(|o| o.spec.same_declaration(&slot.spec) && !o.stop.is_cancelled())
            else {
                continue;
            };
            *slot = Arc::clone(old);
            kept.push(old.spec.name.clone());
            taken.push(Arc::clone(old));
        }
        let weak = Arc::downgrade(&self.inner);
        for server in taken {
            server.add_owner(weak.clone());
        }
        self.inner.publish();
        kept
    }

    /// Wakes whenever the tools the servers offer may have changed (a
    /// server listed its tools, went down or came back). It holds no
    /// reference to the registry.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.published.subscribe()
    }

    /// Each server's name and whether it is ready, for metrics.
    pub fn health(&self) -> Vec<(String, bool)> {
        self.inner
            .servers
            .iter()
            .map(|s| (s.spec.name.clone(), s.state().status == Status::Ready))
            .collect()
    }

    /// The URL and `oauth` of the HTTP server `name`, for `toolgate mcp
    /// login`; `Err` says why there is none.
    pub fn oauth_of(&self, name: &str) -> Result<(String, spec::OAuthSpec), String> {
        let server = self
            .inner
            .servers
            .iter()
            .find(|s| s.spec.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .inner
                    .servers
                    .iter()
                    .map(|s| s.spec.name.as_str())
                    .collect();
                format!(
                    "no MCP server is named `{name}`; the configuration declares: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                )
            })?;
        if let Some(why) = &server.spec.disabled {
            return Err(format!("MCP server `{name}` is disabled: {why}"));
        }
        match &server.spec.transport {
            spec::Transport::Http(http) => match &http.oauth {
                Some(oauth) => Ok((http.url.clone(), oauth.clone())),
                None => Err(format!(
                    "MCP server `{name}` has no `oauth`: add `oauth: {{grant: authorization_code}}` to authorize the gateway with a login"
                )),
            },
            spec::Transport::Stdio(_) => Err(format!(
                "MCP server `{name}` runs over stdio: OAuth is for servers over HTTP"
            )),
        }
    }

    /// Why each server declared `required` is not ready, if it is not.
    pub fn required_not_ready(&self) -> Vec<String> {
        self.inner
            .servers
            .iter()
            .filter(|s| s.spec.required)
            .filter_map(|s| {
                let state = s.state();
                (state.status != Status::Ready).then(|| state.reason(&s.spec.name))
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.servers.is_empty()
    }

    /// How many servers are declared.
    pub fn len(&self) -> usize {
        self.inner.servers.len()
    }

    /// Starts every server (once; later calls only wait) and waits until
    /// each has finished its first attempt: ready, or failed and scheduled
    /// for a restart. Each wait is bounded by the server's
    /// `startup_timeout`. Must run inside a Tokio runtime.
    pub async fn start(&self) {
        self.start_on(&[]).await;
    }

    /// As [`start`](Self::start), with each server's session (its
    /// supervisor, rmcp's service loop and the transport's I/O) on one of
    /// `runtimes`, taken in turn, or on the current runtime when there are
    /// none. A gateway serving each connection on a thread of its own puts
    /// the sessions on those threads: a call from a connection of the
    /// session's thread then wakes no other thread.
    pub async fn start_on(&self, runtimes: &[tokio::runtime::Handle]) {
        /// Whose turn it is, over every registry of the process: a
        /// reload's new servers do not all go to the first runtime.
        static TURN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let first = !self
            .inner
            .started
            .swap(true, std::sync::atomic::Ordering::SeqCst);
        for server in &self.inner.servers {
            server.add_owner(Arc::downgrade(&self.inner));
            // Servers taken over from a previous catalog already run.
            if server.claim_supervision() {
                let supervise = session::supervise(Arc::clone(server));
                if runtimes.is_empty() {
                    tokio::spawn(supervise);
                } else {
                    let turn = TURN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    runtimes[turn % runtimes.len()].spawn(supervise);
                }
            }
        }
        let waits = self.inner.servers.iter().map(|s| async move {
            let bound = s.spec.startup_timeout + Duration::from_secs(1);
            let _ = tokio::time::timeout(
                bound,
                s.wait_until(|st| {
                    !matches!(st.status, Status::NotStarted | Status::Starting) || st.attempts > 1
                }),
            )
            .await;
        });
        futures::future::join_all(waits).await;
        if first {
            for e in self.missing_expected() {
                tracing::warn!("{}", e.describe());
            }
        }
    }

    /// Stops every server and waits (briefly) until they have closed.
    pub async fn shutdown(&self) {
        for server in &self.inner.servers {
            server.stop.cancel();
        }
        let waits = self.inner.servers.iter().map(|s| {
            tokio::time::timeout(
                Duration::from_secs(10),
                s.wait_until(|st| {
                    matches!(
                        st.status,
                        Status::Stopped | Status::NotStarted | Status::Disabled { .. }
                    )
                }),
            )
        });
        futures::future::join_all(waits).await;
    }

    /// Waits until the server `name` is ready (forever if it never is);
    /// `false` when no such server is declared.
    pub async fn wait_ready(&self, name: &str) -> bool {
        let Some(server) = self.inner.server(name) else {
            return false;
        };
        server.wait_until(|st| st.status == Status::Ready).await;
        true
    }

    /// The usable MCP tool called `name`.
    pub fn tool(&self, name: &str) -> Option<Arc<T>> {
        self.inner.snapshot.load().tools.get(name).cloned()
    }

    /// The usable MCP tools whose name `keep` accepts, in order.
    pub fn tools(&self, keep: &dyn Fn(&str) -> bool) -> Vec<Arc<T>> {
        self.inner
            .snapshot
            .load()
            .tools
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(_, t)| Arc::clone(t))
            .collect()
    }

    /// `true` when a server is called as each caller (`credentials`).
    pub fn has_per_caller(&self) -> bool {
        self.inner.servers.iter().any(|s| s.spec.per_caller())
    }

    /// The servers called as each caller (`credentials`), by name, with
    /// whose token they take.
    pub fn per_caller(&self) -> Vec<(String, toolgate_config::format::CredentialsDecl)> {
        self.inner
            .servers
            .iter()
            .filter(|s| s.spec.disabled.is_none())
            .filter_map(|s| {
                s.spec
                    .credentials()
                    .map(|how| (s.spec.name.clone(), how.clone()))
            })
            .collect()
    }

    /// Has the per-caller server `server` list its tools to the caller
    /// `subject`, in their own session opened with `token`, unless their
    /// listing is fresh. From then on the tools `subject` is offered from
    /// that server are the ones it listed to them ([`tools_as`](Self::tools_as)).
    ///
    /// `Err((why, refused))`: `refused` when the server refused the token.
    pub async fn list_as(
        &self,
        server: &str,
        subject: &str,
        token: &str,
    ) -> Result<(), (String, bool)> {
        let Some(server) = self.inner.server(server).filter(|s| s.spec.per_caller()) else {
            return Err((
                format!("no MCP server `{server}` is called as each caller"),
                false,
            ));
        };
        server.user_listing(subject, token).await.map(|_| ())
    }

    /// What `caller` (a subject) is offered: when a per-caller server has
    /// listed its tools, prompts and resources to them, that server's are
    /// the ones it listed to them, not the gateway's listing; otherwise
    /// the shared snapshot.
    fn seen_by(&self, caller: Option<&str>) -> Arc<Snapshot<T>> {
        let snapshot = self.inner.snapshot.load_full();
        let Some(caller) = caller else {
            return snapshot;
        };
        let theirs: Vec<Option<session::UserListing<T>>> = self
            .inner
            .servers
            .iter()
            .map(|s| {
                if s.spec.per_caller() {
                    s.user_listed(caller)
                } else {
                    None
                }
            })
            .collect();
        if theirs.iter().all(Option::is_none) {
            return snapshot;
        }
        Arc::new(self.inner.compose(&theirs))
    }

    /// The usable MCP tool called `name`, as `caller` sees it (see
    /// [`tools_as`](Self::tools_as)).
    pub fn tool_as(&self, name: &str, caller: Option<&str>) -> Option<Arc<T>> {
        self.seen_by(caller).tools.get(name).cloned()
    }

    /// The usable MCP tools whose name `keep` accepts, as `caller` (a
    /// subject) sees them: a per-caller server that listed its tools to
    /// them offers what it listed to them (made by [`list_as`](Self::list_as));
    /// every other server, what it listed to the gateway.
    pub fn tools_as(&self, keep: &dyn Fn(&str) -> bool, caller: Option<&str>) -> Vec<Arc<T>> {
        self.seen_by(caller)
            .tools
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(_, t)| Arc::clone(t))
            .collect()
    }

    /// [`gaps`](Self::gaps), as `caller` sees them.
    pub fn gaps_as(&self, keep: &dyn Fn(&Gap) -> bool, caller: Option<&str>) -> Vec<Gap> {
        self.seen_by(caller)
            .gaps
            .values()
            .filter(|g| keep(g))
            .cloned()
            .collect()
    }

    /// [`gap`](Self::gap), as `caller` sees it.
    pub fn gap_as(&self, name: &str, caller: Option<&str>) -> Option<Gap> {
        let seen = self.seen_by(caller);
        if seen.tools.contains_key(name) {
            return None;
        }
        seen.gaps.get(name).cloned().or_else(|| self.gap(name))
    }

    /// The per-caller server that answers `caller` for `what` over their
    /// own session (it listed its prompts and resources to them), with
    /// whose token it takes; `None` when the gateway's session answers.
    pub fn asked_of(
        &self,
        what: &Asked<'_>,
        caller: &str,
    ) -> Option<(String, toolgate_config::format::CredentialsDecl)> {
        let seen = self.seen_by(Some(caller));
        let index = match what {
            Asked::Server(name) => self.index_of(name)?,
            _ => seen.index_for(what)?,
        };
        if !seen.own.contains(&index) {
            return None;
        }
        let spec = &self.inner.servers[index].spec;
        spec.credentials()
            .map(|how| (spec.name.clone(), how.clone()))
    }

    /// The servers' prompts whose (gateway) name `keep` accepts, in order,
    /// as `caller` sees them (see [`tools_as`](Self::tools_as)).
    pub fn prompts(
        &self,
        keep: &dyn Fn(&str) -> bool,
        caller: Option<&str>,
    ) -> Vec<rmcp::model::Prompt> {
        self.seen_by(caller)
            .prompts
            .iter()
            .filter(|(name, _)| keep(name))
            .map(|(_, (_, _, p))| p.clone())
            .collect()
    }

    /// The servers' resources whose URI `keep` accepts, in order, as
    /// `caller` sees them.
    pub fn resources(
        &self,
        keep: &dyn Fn(&str) -> bool,
        caller: Option<&str>,
    ) -> Vec<rmcp::model::Resource> {
        self.seen_by(caller)
            .resources
            .iter()
            .filter(|(uri, _)| keep(uri))
            .map(|(_, (_, r))| r.clone())
            .collect()
    }

    /// The servers' resource templates whose URI template `keep` accepts,
    /// as `caller` sees them, each URI template once.
    pub fn resource_templates(
        &self,
        keep: &dyn Fn(&str) -> bool,
        caller: Option<&str>,
    ) -> Vec<rmcp::model::ResourceTemplate> {
        // A template two servers declare is listed once: the first
        // declared server's, which reads what it describes.
        let mut seen = std::collections::HashSet::new();
        self.seen_by(caller)
            .templates
            .iter()
            .filter(|(_, t)| keep(&t.uri_template) && seen.insert(t.uri_template.clone()))
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// `true` when what `caller` is offered besides tools differs from
    /// what others are (a per-caller server listed its own to them).
    pub fn extras_vary(&self, caller: Option<&str>) -> bool {
        !self.seen_by(caller).own.is_empty()
    }

    /// `prompts/get` of the prompt the gateway calls `name`, from the
    /// server that offers it (under its own name); over `caller`'s own
    /// session (their subject and token) when that server is called as
    /// each caller and listed its prompts to them. An unknown name is
    /// invalid params (-32602); the server's own errors pass through.
    /// With `hand_back`, the server's questions that the client answers
    /// itself are handed back to it (see [`relay::HandBack`]).
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<rmcp::model::JsonObject>,
        caller: Option<(&str, &str)>,
        hand_back: Option<&relay::HandBack>,
    ) -> Result<rmcp::model::GetPromptResult, AskError> {
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let found = seen
            .prompts
            .get(name)
            .map(|(i, remote, _)| (*i, remote.clone()));
        let Some((index, remote)) = found else {
            return Err(rmcp::ErrorData::invalid_params(
                format!("no prompt named `{name}` is offered"),
                Some(serde_json::json!({"name": name})),
            )
            .into());
        };
        let mut params = rmcp::model::GetPromptRequestParams::new(remote);
        params.arguments = arguments;
        let server = self.inner.servers[index].spec.name.clone();
        let hand_back = hand_back.cloned();
        self.ask(&seen, index, caller, |peer| async move {
            use rmcp::model::{ClientRequest, GetPromptRequest, ServerResult};
            let Some(hand_back) = hand_back else {
                return peer.get_prompt(params).await;
            };
            let request = |responses, state| {
                let mut params = params.clone();
                params.input_responses = responses;
                params.request_state = state;
                ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
            };
            handing_back(&peer, &server, &hand_back, request, |result| match result {
                ServerResult::GetPromptResult(result) => Some(result),
                _ => None,
            })
            .await
        })
        .await
    }

    /// The index of the server named `name`.
    fn index_of(&self, name: &str) -> Option<usize> {
        self.inner.servers.iter().position(|s| s.spec.name == name)
    }

    /// A request about a task `server` runs (`tasks/get`, `tasks/update`
    /// or `tasks/cancel`, SEP-2663), sent as a client that follows tasks,
    /// over `caller`'s own session at a server called as each caller. An
    /// unknown server is invalid params (-32602), like an unknown task.
    pub async fn task_request(
        &self,
        server: &str,
        request: rmcp::model::ClientRequest,
        caller: Option<(&str, &str)>,
    ) -> Result<rmcp::model::ServerResult, AskError> {
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let Some(index) = self.index_of(server) else {
            return Err(rmcp::ErrorData::invalid_params(
                format!("the task's MCP server `{server}` is no longer configured"),
                None,
            )
            .into());
        };
        let follows = relay::HandBack {
            tasks: true,
            ..Default::default()
        };
        let mut meta = rmcp::model::RequestMetaObject::new();
        meta.set_client_capabilities(follows.capabilities());
        self.ask(&seen, index, caller, |peer| async move {
            peer.send_request_with_option(request, request_options(Some(meta)))
                .await?
                .await_response()
                .await
        })
        .await
    }

    /// `resources/read` of `uri`, from the server that lists it or else the
    /// first whose resource template describes it (over `caller`'s own
    /// session, like [`get_prompt`](Self::get_prompt)). A URI no server
    /// serves is invalid params (-32602) with the URI in its data (SEP-2164).
    /// With `hand_back`, as [`get_prompt`](Self::get_prompt).
    pub async fn read_resource(
        &self,
        uri: &str,
        caller: Option<(&str, &str)>,
        hand_back: Option<&relay::HandBack>,
    ) -> Result<rmcp::model::ReadResourceResult, AskError> {
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let Some(index) = seen.index_for(&Asked::Resource(uri)) else {
            return Err(not_found(uri).into());
        };
        let server = &self.inner.servers[index].spec.name;
        let params = rmcp::model::ReadResourceRequestParams::new(extras::upstream_uri(server, uri));
        let hand_back = hand_back.cloned();
        let mut result = self
            .ask(&seen, index, caller, |peer| async move {
                use rmcp::model::{ClientRequest, ReadResourceRequest, ServerResult};
                let Some(hand_back) = hand_back else {
                    return peer.read_resource(params).await;
                };
                let request = |responses, state| {
                    let mut params = params.clone();
                    params.input_responses = responses;
                    params.request_state = state;
                    ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params))
                };
                handing_back(&peer, server, &hand_back, request, |result| match result {
                    ServerResult::ReadResourceResult(result) => Some(result),
                    _ => None,
                })
                .await
            })
            .await?;
        extras::offered_contents(server, &mut result);
        Ok(result)
    }

    /// Subscribes a client of the gateway to `uri` at the server serving
    /// it, over the gateway's own session: one upstream subscription
    /// however many clients want it, made again on every new session. A
    /// server that does not announce subscriptions is not asked, and one
    /// that refuses is logged (their updates never come). Updates arrive on
    /// [`updates`](Self::updates).
    pub async fn subscribe_resource(&self, uri: &str) {
        let snapshot = self.inner.snapshot.load_full();
        let Some(index) = snapshot.index_for(&Asked::Resource(uri)) else {
            return;
        };
        let server = &self.inner.servers[index];
        let uri = &*extras::upstream_uri(&server.spec.name, uri);
        let Ok(peer) = server.peer() else {
            return;
        };
        let announces = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        });
        if !announces {
            return;
        }
        let first = {
            let mut subscribed = server.subscribed.lock().unwrap_or_else(|p| p.into_inner());
            let count = subscribed.entry(uri.to_owned()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if !first {
            return;
        }
        let params = rmcp::model::SubscribeRequestParams::new(uri);
        #[allow(deprecated)] // resources/subscribe: 2025-11-25 sessions
        let sent = self
            .ask(&snapshot, index, None, |peer| async move {
                peer.subscribe(params).await
            })
            .await;
        // The client's subscription stands either way: an upstream that
        // cannot subscribe (some announce it and answer "method not
        // found") only never sends updates.
        if let Err(e) = sent {
            self.release(server, uri);
            tracing::warn!(mcp_server = %server.spec.name, "subscribing to `{uri}` failed: {}; its updates are not relayed", e.error.message);
        }
    }

    /// A client of the gateway no longer wants `uri`'s updates: the
    /// upstream subscription ends when no client wants them.
    pub async fn unsubscribe_resource(&self, uri: &str) {
        let snapshot = self.inner.snapshot.load_full();
        let Some(index) = snapshot.index_for(&Asked::Resource(uri)) else {
            return;
        };
        let server = &self.inner.servers[index];
        let uri = &*extras::upstream_uri(&server.spec.name, uri);
        if !self.release(server, uri) {
            return;
        }
        let params = rmcp::model::UnsubscribeRequestParams::new(uri);
        #[allow(deprecated)] // resources/unsubscribe: 2025-11-25 sessions
        let sent = self
            .ask(&snapshot, index, None, |peer| async move {
                peer.unsubscribe(params).await
            })
            .await;
        if let Err(e) = sent {
            tracing::debug!(mcp_server = %server.spec.name, "unsubscribing from `{uri}` failed: {}", e.error.message);
        }
    }

    /// One client less wants `uri` at `server`; `true` when none is left
    /// (and the gateway was subscribed).
    fn release(&self, server: &Server<T>, uri: &str) -> bool {
        let mut subscribed = server.subscribed.lock().unwrap_or_else(|p| p.into_inner());
        match subscribed.get_mut(uri) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                subscribed.remove(uri);
                true
            }
            None => false,
        }
    }

    /// The servers' resource updates (`notifications/resources/updated` of
    /// the gateway's own sessions), a receiver per server.
    pub fn updates(&self) -> Vec<tokio::sync::broadcast::Receiver<String>> {
        self.inner
            .servers
            .iter()
            .map(|s| s.updates.subscribe())
            .collect()
    }

    /// `true` when `uri` is one the servers serve, as `caller` sees them.
    pub fn serves(&self, uri: &str, caller: Option<&str>) -> bool {
        self.seen_by(caller)
            .index_for(&Asked::Resource(uri))
            .is_some()
    }

    /// `completion/complete` for an argument of a prompt (by the gateway's
    /// name) or a resource template, asked of the server that offers it
    /// (over `caller`'s own session, like [`get_prompt`](Self::get_prompt)).
    /// Nothing to complete (no such prompt or template, a server without
    /// completions) is an empty completion.
    pub async fn complete(
        &self,
        mut params: rmcp::model::CompleteRequestParams,
        caller: Option<(&str, &str)>,
    ) -> Result<rmcp::model::CompleteResult, AskError> {
        use rmcp::model::Reference;
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let index = match &mut params.r#ref {
            Reference::Prompt(p) => seen.prompts.get(&p.name).map(|(i, remote, _)| {
                p.name.clone_from(remote);
                *i
            }),
            Reference::Resource(r) => seen.index_for(&Asked::Template(&r.uri)),
            _ => None,
        };
        let Some(index) = index else {
            return Ok(rmcp::model::CompleteResult::default());
        };
        // A server's capabilities, from the session the request goes over.
        let answer = self
            .ask(&seen, index, caller, |peer| async move {
                let completes = peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.completions.is_some());
                if completes {
                    peer.complete(params).await
                } else {
                    Ok(rmcp::model::CompleteResult::default())
                }
            })
            .await?;
        Ok(answer)
    }

    /// Sends one request to server `index` of `seen` (over `caller`'s own
    /// session when it is theirs there), bounded by its `timeout`; its
    /// errors in MCP's terms.
    async fn ask<R, F, Fut>(
        &self,
        seen: &Snapshot<T>,
        index: usize,
        caller: Option<(&str, &str)>,
        send: F,
    ) -> Result<R, AskError>
    where
        F: FnOnce(rmcp::Peer<rmcp::RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<R, ServiceError>>,
    {
        let server = &self.inner.servers[index];
        let spec = &server.spec;
        let user = caller.filter(|_| seen.own.contains(&index));
        let peer = match user {
            Some((subject, token)) => {
                server
                    .user_peer(subject, token)
                    .await
                    .map_err(|(reason, refused)| AskError {
                        error: rmcp::ErrorData::internal_error(reason, None),
                        refused,
                    })?
            }
            None => server
                .peer()
                .map_err(|reason| rmcp::ErrorData::internal_error(reason, None))?,
        };
        let bound = spec.timeout.unwrap_or(REQUEST_TIMEOUT);
        let answer = tokio::time::timeout(bound, send(peer)).await;
        let forget = || {
            if let Some((subject, _)) = user {
                server.forget_user(subject);
            }
        };
        match answer {
            Err(_) => Err(rmcp::ErrorData::internal_error(
                format!(
                    "MCP server `{}` did not answer within {}",
                    spec.name,
                    humantime_serde::re::humantime::format_duration(bound)
                ),
                None,
            )
            .into()),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(e.into()),
            Ok(Err(e)) => {
                forget();
                Err(AskError {
                    error: rmcp::ErrorData::internal_error(
                        format!("MCP server `{}`: {}", spec.name, in_words(&e, spec)),
                        None,
                    ),
                    refused: user.is_some() && needs_token(&e),
                })
            }
        }
    }

    /// Tools that cannot be used now. `keep` accepts a gap by tool name and
    /// server name.
    pub fn gaps(&self, keep: &dyn Fn(&Gap) -> bool) -> Vec<Gap> {
        self.inner
            .snapshot
            .load()
            .gaps
            .values()
            .filter(|g| keep(g))
            .cloned()
            .collect()
    }

    /// Why `name` cannot be used, when it is (or could be) a tool of a
    /// server that is not ready.
    pub fn gap(&self, name: &str) -> Option<Gap> {
        let snapshot = self.inner.snapshot.load();
        if let Some(g) = snapshot.gaps.get(name) {
            return Some(g.clone());
        }
        if snapshot.tools.contains_key(name) {
            return None;
        }
        self.inner
            .servers
            .iter()
            .filter(|s| s.state().status != Status::Ready && s.spec.tools.could_provide(name))
            .map(|s| Gap {
                name: name.to_owned(),
                server: s.spec.name.clone(),
                reason: s.state().reason(&s.spec.name),
                origin: s.spec.origin(),
            })
            .next()
    }

    /// The servers that could offer a tool named `entry` (a name or a glob),
    /// before any of them has listed its tools.
    pub fn servers_for(specs: &[ServerSpec], entry: &str) -> Vec<String> {
        let glob = spec::is_glob(entry)
            .then(|| globset::Glob::new(entry).ok().map(|g| g.compile_matcher()))
            .flatten();
        specs
            .iter()
            .filter(|s| match &glob {
                Some(m) => s.tools.could_match(entry, m),
                None => s.tools.could_provide(entry),
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// Exact names tool sets expect from MCP servers that every server
    /// which could offer them has listed, without offering them.
    pub fn missing_expected(&self) -> Vec<&Expected> {
        // A per-caller server may list to a caller what it does not list
        // to the gateway: its listing never proves a name missing.
        let listed = |server: &str| -> Option<HashSet<String>> {
            let s = self.inner.server(server)?;
            let state = s.state();
            (state.status == Status::Ready && !s.spec.per_caller())
                .then(|| state.listed.iter().map(|l| l.name.clone()).collect())
        };
        let by_server: HashMap<&str, Option<HashSet<String>>> = self
            .inner
            .servers
            .iter()
            .map(|s| (s.spec.name.as_str(), listed(&s.spec.name)))
            .collect();
        self.inner
            .expected
            .iter()
            .filter(|e| {
                e.servers.iter().all(|s| {
                    by_server
                        .get(s.as_str())
                        .is_some_and(|l| l.as_ref().is_some_and(|l| !l.contains(&e.name)))
                })
            })
            .collect()
    }

    /// What each server offers now, for `toolgate check --connect`.
    pub fn reports(&self) -> Vec<ServerReport> {
        let snapshot = self.inner.snapshot.load();
        let mut reports = Vec::new();
        for server in &self.inner.servers {
            let spec = &server.spec;
            let state = server.state();
            let mut problems = Vec::new();
            let mut tools = Vec::new();
            for l in state.listed.iter() {
                if let Some(t) = snapshot.tools.get(&l.name) {
                    tools.push((l.name.clone(), l.remote.clone(), t.description().to_owned()));
                } else if let Some(g) = snapshot.gaps.get(&l.name) {
                    problems.push(format!("tool `{}` is unavailable: {}", l.remote, g.reason));
                }
            }
            for e in self.missing_expected() {
                if e.servers.first() == Some(&spec.name) {
                    problems.push(e.describe());
                }
            }
            reports.push(ServerReport {
                name: spec.name.clone(),
                transport: spec.transport.label(),
                file: spec.file.clone(),
                pos: spec.pos,
                status: state.status.label(),
                reason: match (&state.status, &state.last_error) {
                    (Status::Ready, _) => None,
                    (Status::Disabled { reason }, _) | (_, Some(reason)) => Some(reason.clone()),
                    (Status::PerCaller { .. }, None) => Some(state.status.reason(&spec.name)),
                    (other, None) => Some(other.label().to_owned()),
                },
                server_info: state.server_info.clone(),
                tools,
                problems,
                fingerprints: server.listed_fingerprints(),
            });
        }
        reports
    }

    /// The tool definitions changed upstream and held for review, by
    /// server.
    pub fn changes(&self) -> Vec<session::ToolChange> {
        self.inner
            .servers
            .iter()
            .flat_map(|s| s.changes())
            .collect()
    }

    /// Accepts the held change of `server`'s `tool` to the definition
    /// `fingerprint`: the server lists its tools again, and takes that
    /// definition only if it still lists exactly it.
    pub fn accept_change(&self, server: &str, tool: &str, fingerprint: &str) -> Result<(), String> {
        self.inner
            .servers
            .iter()
            .find(|s| s.spec.name == server)
            .ok_or_else(|| format!("no MCP server `{server}`"))?
            .accept_change(tool, fingerprint)
    }
}

/// A URI no server serves, as SEP-2164 asks: invalid params, the URI in
/// the data.
fn not_found(uri: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(
        format!("no resource `{uri}` is offered"),
        Some(serde_json::json!({"uri": uri})),
    )
}

/// One server's state, for reports.
#[derive(Debug, Clone)]
pub struct ServerReport {
    pub name: String,
    pub transport: &'static str,
    pub file: String,
    pub pos: Pos,
    /// `ready`, `down`, `disabled`...
    pub status: &'static str,
    /// Why it is not ready: why its last session failed, or its state.
    pub reason: Option<String>,
    /// `name version` from its `initialize` answer.
    pub server_info: Option<String>,
    /// (gateway name, server's name, description) of each usable tool.
    pub tools: Vec<(String, String, String)>,
    /// Tools it lists that cannot be used, and set entries it does not offer.
    pub problems: Vec<String>,
    /// The fingerprint of each tool's definition as listed, by the
    /// server's name for it.
    pub fingerprints: std::collections::BTreeMap<String, String>,
}

impl ServerReport {
    pub fn is_ok(&self) -> bool {
        (self.reason.is_none() || self.per_caller()) && self.problems.is_empty()
    }

    /// It refused the gateway's own session and lists its tools to each
    /// connected caller alone (`credentials`): not a failure.
    pub fn per_caller(&self) -> bool {
        self.status
            == Status::PerCaller {
                reason: String::new(),
            }
            .label()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(value: Value) -> rmcp::model::InputRequiredResult {
        serde_json::from_value(value).unwrap()
    }

    #[tokio::test]
    async fn input_requests_are_answered_as_a_gateway_without_a_person_can() {
        let none = relay::Relay::default();
        let elicit = json_rpc(
            "elicitation/create",
            serde_json::json!({
                "message": "Confirm?",
                "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}
            }),
        );
        let roots = json_rpc("roots/list", serde_json::json!({}));
        let (answers, state) = answer_input_requests(
            "s",
            asked(serde_json::json!({
                "resultType": "input_required",
                "inputRequests": {"confirm": elicit, "where": roots},
                "requestState": "opaque"
            })),
            &none,
        )
        .await
        .unwrap();
        let answers = answers.unwrap();
        assert_eq!(answers["confirm"], serde_json::json!({"action": "decline"}));
        assert_eq!(answers["where"], serde_json::json!({"roots": []}));
        assert_eq!(state.as_deref(), Some("opaque"));

        // State alone: echoed, nothing answered.
        let (answers, state) = answer_input_requests(
            "s",
            asked(serde_json::json!({"resultType": "input_required", "requestState": "x"})),
            &none,
        )
        .await
        .unwrap();
        assert!(answers.is_none());
        assert_eq!(state.as_deref(), Some("x"));

        // Sampling cannot be answered: the call fails in words.
        let sampling = json_rpc(
            "sampling/createMessage",
            serde_json::json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10
            }),
        );
        let e = answer_input_requests(
            "s",
            asked(serde_json::json!({"resultType": "input_required", "inputRequests": {"m": sampling}})),
            &none,
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("sampling"), "{e}");

        // Nothing asked and no state: refused rather than looped on.
        assert!(
            answer_input_requests(
                "s",
                asked(serde_json::json!({"resultType": "input_required", "inputRequests": {}})),
                &none,
            )
            .await
            .is_err()
        );
    }

    #[tokio::test]
    async fn questions_a_client_answers_itself_are_handed_back_with_the_gateway_s_answers_to_the_rest()
     {
        let elicit = json_rpc(
            "elicitation/create",
            serde_json::json!({
                "message": "Name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
            }),
        );
        let roots = json_rpc("roots/list", serde_json::json!({}));
        let question = || {
            asked(serde_json::json!({
                "resultType": "input_required",
                "inputRequests": {"name": elicit, "where": roots},
                "requestState": "upstream"
            }))
        };
        let hand_back = relay::HandBack {
            elicit: true,
            ..Default::default()
        };
        let left = hand_back_to("s", question(), &hand_back, &relay::Relay::default())
            .await
            .unwrap();
        assert!(left.is_none(), "the elicitation is the client's");
        let Some(relay::Handed::Input(handed)) = hand_back.take() else {
            panic!("questions are handed back")
        };
        assert_eq!(handed.server, "s");
        assert_eq!(handed.requests.keys().collect::<Vec<_>>(), ["name"]);
        assert_eq!(handed.state.as_deref(), Some("upstream"));
        assert_eq!(handed.answered["where"], serde_json::json!({"roots": []}));
        assert!(hand_back.take().is_none(), "taken once");

        // A client that answers none of them: the gateway answers all.
        let none = relay::HandBack::default();
        let left = hand_back_to("s", question(), &none, &relay::Relay::default())
            .await
            .unwrap();
        assert_eq!(left.unwrap().input_requests.unwrap().len(), 2);
        assert!(none.take().is_none());

        // Answers go to the server they were given for only.
        let resumed = relay::HandBack {
            resume: Some(relay::Resume {
                server: Some("s".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(resumed.resume_for("s").is_some());
        assert!(resumed.resume_for("other").is_none());
    }

    #[tokio::test]
    #[allow(deprecated)]
    async fn a_client_that_can_answer_gets_the_questions() {
        let relay = relay::Relay {
            elicit: Some(Arc::new(|_params| {
                Box::pin(async {
                    Ok(serde_json::from_value(
                        serde_json::json!({"action": "accept", "content": {"ok": true}}),
                    )
                    .unwrap())
                })
            })),
            sample: Some(Arc::new(|_params| {
                Box::pin(async {
                    Ok(serde_json::from_value(serde_json::json!({
                        "role": "assistant",
                        "content": {"type": "text", "text": "fine"},
                        "model": "m"
                    }))
                    .unwrap())
                })
            })),
            ..Default::default()
        };
        let elicit = json_rpc(
            "elicitation/create",
            serde_json::json!({"message": "Confirm?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}),
        );
        let sampling = json_rpc(
            "sampling/createMessage",
            serde_json::json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10}),
        );
        let (answers, _) = answer_input_requests(
            "s",
            asked(serde_json::json!({"resultType": "input_required", "inputRequests": {"e": elicit, "m": sampling}})),
            &relay,
        )
        .await
        .unwrap();
        let answers = answers.unwrap();
        assert_eq!(answers["e"]["action"], "accept");
        assert_eq!(answers["e"]["content"]["ok"], true);
        assert_eq!(answers["m"]["content"]["text"], "fine");
    }

    fn json_rpc(method: &str, params: Value) -> Value {
        serde_json::json!({"method": method, "params": params})
    }
}
