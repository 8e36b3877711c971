//! A call to a server's tool ([`McpTool::call`]) and its [`Answer`]; the
//! input a server asks for during a call or a request, handed back to the
//! client or answered as the gateway can.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResponse};
use rmcp::{Peer, RoleClient, ServiceError};
use serde_json::Value;
use toolgate::{CallContext, ProgressSink, ToolError};

use crate::errors::{connection_lost, in_words, needs_token, token_refused};
use crate::session::listing::McpTool;
use crate::session::{self, Server};
use crate::spec::Transport;
use crate::{Offer, progress, relay, result};

/// Why a call has no answer from its server (yet).
#[derive(Debug, Clone, thiserror::Error)]
pub enum NoAnswer {
    /// The call failed.
    #[error(transparent)]
    Failed(#[from] ToolError),
    /// Not a failure: the call goes on with the client (the server asked
    /// it questions, or runs the call as a task the client follows, MCP
    /// 2026-07-28); the client's next request continues it.
    #[error("{0}")]
    HandedToClient(String),
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
    /// again). A server that asks the client, or runs the call as a task
    /// the client follows, hands the call over ([`NoAnswer::HandedToClient`]).
    pub async fn call(
        &self,
        args: &Value,
        ctx: &CallContext,
        trace: &http::HeaderMap,
        progress: Option<&ProgressSink>,
        bearer: Option<&str>,
    ) -> Result<Answer, NoAnswer> {
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
                )).into());
            }
        };
        let peer = match caller {
            None => server.peer().map_err(ToolError::Backend)?,
            // Boxed: opening a caller's session is a large future, and
            // every call's would carry its size.
            Some((subject, token)) => match Box::pin(server.user_peer(subject, token)).await {
                Ok(peer) => peer,
                Err((why, true)) => {
                    return Err(ToolError::NotConnected(format!(
                        "MCP server `{}` refused the caller's token: {why}",
                        self.server_name
                    ))
                    .into());
                }
                Err((why, false)) => return Err(ToolError::Backend(why).into()),
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
    ) -> Result<Answer, NoAnswer> {
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
        // The rarer steps (progress reported as it comes, a server asking
        // for input) are boxed: the call's future, which the executor boxes
        // (a copy of all of it on every call), would carry their size.
        let response = loop {
            let response = match progress {
                None => call_once(peer, params.clone(), meta.clone()).await,
                Some(sink) => {
                    Box::pin(call_reporting(
                        server,
                        peer,
                        params.clone(),
                        meta.clone(),
                        sink,
                    ))
                    .await
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
                )).into());
            }
            let relay = relay.clone().unwrap_or_default();
            let asked = match &hand_back {
                Some(hand_back) => {
                    match Box::pin(hand_back_to(name, asked, hand_back, &relay)).await? {
                        Some(asked) => asked,
                        None => {
                            return Err(NoAnswer::HandedToClient(format!(
                                "MCP server `{name}` asked the client for input; the question was handed to it"
                            )));
                        }
                    }
                }
                None => asked,
            };
            let (responses, state) = Box::pin(answer_input_requests(name, asked, &relay)).await?;
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
                    Err(NoAnswer::HandedToClient(format!(
                        "MCP server `{name}` runs the call as a task, which the client follows"
                    )))
                }
                _ => Err(ToolError::Failed(format!(
                    "MCP server `{name}` started a task for the call, which the caller's client cannot follow"
                )).into()),
            },
            Ok(_) => Err(ToolError::Failed(format!(
                "MCP server `{name}` answered the call with a result the gateway does not know"
            )).into()),
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
                Err(ToolError::Failed(text).into())
            }
            // The caller's own session: it is closed (by the caller of
            // this function), the next call opens a new one.
            Err(e) if per_user && needs_token(&e) => Err(ToolError::NotConnected(format!(
                "MCP server `{name}` refused the caller's token: {}",
                in_words(&e, &server.spec)
            )).into()),
            Err(e) if per_user => Err(ToolError::Backend(format!(
                "MCP server `{name}` (the caller's session): {}; the next call opens a new session",
                in_words(&e, &server.spec)
            )).into()),
            Err(ServiceError::TransportClosed) => Err(ToolError::Backend(format!(
                "MCP server `{name}` closed the session during the call; the gateway starts it again (its tools are unavailable until then)"
            )).into()),
            Err(e @ ServiceError::TransportSend(_)) if connection_lost(&e) => {
                // Unreachable, or it lost our session: a new one is started
                // (the tools are unavailable until it is up).
                let reason = in_words(&e, &server.spec);
                server.connection_broken(reason.clone());
                Err(ToolError::Backend(format!(
                    "MCP server `{name}`: {reason}; the gateway is reconnecting to it"
                )).into())
            }
            Err(e) if server.spec.uses_oauth() && needs_token(&e) => {
                // The OAuth token expired and could not be refreshed (or was
                // revoked): a new session authorizes afresh (client
                // credentials: a new token; a login: the token file again).
                let reason = in_words(&e, &server.spec);
                server.connection_broken(reason.clone());
                Err(ToolError::Backend(token_refused(&server.spec, &reason)).into())
            }
            Err(ServiceError::McpError(e)) => Err(ToolError::Backend(format!(
                "MCP server `{name}` answered with an error: {} (code {})",
                e.message, e.code.0
            )).into()),
            Err(e) => Err(ToolError::Backend(format!(
                "MCP server `{name}`: {}",
                in_words(&e, &server.spec)
            )).into()),
        }
    }
}

/// The headers the server's declaration renders for this caller
/// (`request.key`, `request.project`, `request.subject`, `request.claims`), in the call's `_meta` for the HTTP
/// client to send (see `session::connect::CallerHeaders`).
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

pub(crate) fn request_options(
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
pub(crate) async fn handing_back<R>(
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
