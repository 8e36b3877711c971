//! Opening a server's session: the child process or the HTTP client (with
//! each call's caller headers), the handshake, and the transport as the
//! session reads it.

use std::collections::HashMap;
use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::ProtocolVersion;
use rmcp::service::{ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig,
};
use tokio::io::AsyncBufReadExt;

use super::Server;
use super::handler::Handler;
use crate::spec::{PASSED_ENV, ServerSpec, StdioSpec, Transport};

/// Longest stderr line forwarded to the logs.
const MAX_STDERR_LINE: usize = 2000;

pub(super) type Session = RunningService<RoleClient, Handler>;

/// The protocols the gateway speaks to servers, newest first: the stateless
/// 2026-07-28 revision (`server/discover`, per-request `_meta`), and the
/// `initialize` handshake for servers that do not know it (on the same
/// connection when the server answers `server/discover` with an error, or
/// does not answer it within rmcp's 10 s; see [`Inbound`]).
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// A server's transport as the session reads it.
///
/// Each log message of the server is handed to the client of the one call
/// running as it arrives, in the order the server sent it: rmcp would hand
/// notifications to the handler in tasks of their own, which may run after
/// the call's answer, and the client would never see a message the server
/// sent before it. With no such client the message is logged at debug
/// level.
///
/// On stdio (`late_discovery`), a late answer to `server/discover` is
/// dropped: when a server reads its first request only after rmcp gave up
/// waiting and sent `initialize` on the same pipe (a first `npx -y` run
/// fetching its package), the discovery answer arrives first and would be
/// taken for `initialize`'s ("conflict initialized response id"). Once
/// `initialize` is sent, answers to the earlier `server/discover` are not
/// passed on. A late discovery *result* (the server speaks 2026-07-28,
/// and now refuses `initialize` on that connection) is noted in `modern`,
/// so the server is started again asking only `server/discover`.
struct Inbound<T> {
    inner: T,
    server: String,
    running: Arc<crate::relay::Running>,
    late_discovery: Option<LateDiscovery>,
}

struct LateDiscovery {
    discover: Option<rmcp::model::RequestId>,
    initialize_sent: bool,
    modern: Arc<std::sync::atomic::AtomicBool>,
}

impl<T> Inbound<T> {
    fn new<O>(inner: T, server: &Server<O>) -> Self {
        Inbound {
            inner,
            server: server.spec.name.clone(),
            running: Arc::clone(&server.running),
            late_discovery: None,
        }
    }

    fn dropping_late_discovery(mut self, modern: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.late_discovery = Some(LateDiscovery {
            discover: None,
            initialize_sent: false,
            modern,
        });
        self
    }

    /// Hands `message` on when it is a log message; `true` then.
    #[allow(deprecated)] // logging (SEP-2577), still carried
    fn handed_log(&self, message: &rmcp::service::RxJsonRpcMessage<RoleClient>) -> bool {
        let rmcp::model::JsonRpcMessage::Notification(n) = message else {
            return false;
        };
        let rmcp::model::ServerNotification::LoggingMessageNotification(log) = &n.notification
        else {
            return false;
        };
        let params = &log.params;
        match self.running.only().and_then(|relay| relay.log) {
            Some(log) => (log.send)(params.clone()),
            None => {
                tracing::debug!(target: "toolgate::mcp::log", mcp_server = %self.server, level = ?params.level, "{}", params.data)
            }
        }
        true
    }
}

impl LateDiscovery {
    fn sent(&mut self, item: &rmcp::service::TxJsonRpcMessage<RoleClient>) {
        if let rmcp::model::JsonRpcMessage::Request(r) = item {
            match &r.request {
                rmcp::model::ClientRequest::DiscoverRequest(_) => {
                    self.discover = Some(r.id.clone())
                }
                rmcp::model::ClientRequest::InitializeRequest(_) => self.initialize_sent = true,
                _ => {}
            }
        }
    }

    /// `true` for a late answer to `server/discover`, not to pass on.
    fn drops(&self, message: &rmcp::service::RxJsonRpcMessage<RoleClient>) -> bool {
        let answered = match message {
            rmcp::model::JsonRpcMessage::Response(r) => Some(&r.id),
            rmcp::model::JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if !(self.initialize_sent && answered.is_some() && answered == self.discover.as_ref()) {
            return false;
        }
        tracing::debug!("a late answer to `server/discover` was dropped (`initialize` was sent)");
        if matches!(message, rmcp::model::JsonRpcMessage::Response(_)) {
            self.modern
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        true
    }
}

impl<T> rmcp::transport::Transport<RoleClient> for Inbound<T>
where
    T: rmcp::transport::Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(late) = &mut self.late_discovery {
            late.sent(&item);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if self.handed_log(&message)
                || self
                    .late_discovery
                    .as_ref()
                    .is_some_and(|l| l.drops(&message))
            {
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Why a session did not start, and whether trying again can help.
pub(super) struct StartFailure {
    pub(super) reason: String,
    /// The server refused the gateway's credentials.
    pub(super) needs_token: bool,
}

impl From<String> for StartFailure {
    fn from(reason: String) -> Self {
        StartFailure {
            reason,
            needs_token: false,
        }
    }
}

/// An rmcp error at start, in words, and whether the configuration must
/// change before trying again (a refused token in `headers`; a refused
/// OAuth token is tried again, so a new login is picked up).
fn start_failure(e: ClientInitializeError, spec: &ServerSpec) -> StartFailure {
    StartFailure {
        reason: format!("`initialize` failed: {}", crate::errors::in_words(&e, spec)),
        needs_token: crate::errors::needs_token(&e) && !spec.uses_oauth(),
    }
}

/// Spawns or connects to the server and starts the session: 2026-07-28's
/// `server/discover`, else `initialize` (see [`lifecycle`]). A server that
/// answers `server/discover` with something other than a discovery result
/// (some answer every unknown method with `{}`) is started again on a new
/// connection with `initialize` alone.
pub(super) async fn connect<T>(
    server: &Server<T>,
    token: Option<&str>,
) -> Result<Session, StartFailure> {
    let modern = Arc::new(std::sync::atomic::AtomicBool::new(false));
    match open(server, lifecycle(), &modern, token).await? {
        Err(ClientInitializeError::ExpectedInitResult(Some(answer))) => {
            tracing::debug!(mcp_server = %server.spec.name, "MCP server `{}` answered `server/discover` with {answer:?}: starting it with `initialize`", server.spec.name);
            open(server, ClientLifecycleMode::Initialize, &modern, token).await?
        }
        // It answered `server/discover` after `initialize` was sent: it
        // speaks 2026-07-28, and is asked only that on a new connection
        // (waited for within `startup_timeout`).
        Err(_) if modern.load(std::sync::atomic::Ordering::Relaxed) => {
            tracing::debug!(mcp_server = %server.spec.name, "MCP server `{}` answered `server/discover` late: starting it again with `server/discover` alone", server.spec.name);
            let discover = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            open(server, discover, &modern, token).await?
        }
        started => started,
    }
    .map_err(|e| start_failure(e, &server.spec))
}

/// Spawns or connects to the server and runs the handshake of `mode`; the
/// outer `Err` is a failure before any handshake. With `token`, the
/// session is a caller's, opened with their bearer token.
async fn open<T>(
    server: &Server<T>,
    mode: ClientLifecycleMode,
    modern: &Arc<std::sync::atomic::AtomicBool>,
    token: Option<&str>,
) -> Result<Result<Session, ClientInitializeError>, StartFailure> {
    let handler = Handler {
        server: server.spec.name.clone(),
        list_changed: Arc::clone(&server.list_changed),
        updates: token.is_none().then(|| server.updates.clone()),
        progress: server.progress.clone(),
        running: Arc::clone(&server.running),
    };
    Ok(match &server.spec.transport {
        Transport::Stdio(stdio) => {
            let cmd = command(stdio);
            let (transport, stderr) = crate::stdio::spawn(cmd)
                .map_err(|e| format!("cannot run `{}`: {e}", stdio.command))?;
            if let Some(stderr) = stderr {
                tokio::spawn(forward_stderr(server.spec.name.clone(), stderr));
            }
            handler
                .serve_with_lifecycle(
                    Inbound::new(transport, server).dropping_late_discovery(Arc::clone(modern)),
                    mode,
                )
                .await
        }
        Transport::Http(http) => {
            let mut headers: HashMap<_, _> = http.headers.iter().cloned().collect();
            // A caller's session speaks with their token alone: never with
            // the gateway's own `Authorization` of `headers`.
            if token.is_some() {
                headers.remove(&http::header::AUTHORIZATION);
            }
            // No transparent re-initialization: a server that lost our
            // session (it restarted) gets a new session from the
            // supervisor, and with it a fresh `tools/list`.
            let config = StreamableHttpClientTransportConfig::with_uri(http.url.clone())
                .custom_headers(headers)
                .reinit_on_expired_session(false);
            if let Some(token) = token {
                let transport = StreamableHttpClientTransport::with_client(
                    CallerHeaders::default(),
                    config.auth_header(token.to_owned()),
                );
                return Ok(handler
                    .serve_with_lifecycle(Inbound::new(transport, server), mode)
                    .await);
            }
            match &http.oauth {
                None => {
                    let transport = StreamableHttpClientTransport::with_client(
                        CallerHeaders::default(),
                        config,
                    );
                    handler
                        .serve_with_lifecycle(Inbound::new(transport, server), mode)
                        .await
                }
                Some(oauth) => {
                    let manager = crate::oauth::authorize(&server.spec.name, &http.url, oauth)
                        .await
                        .map_err(|reason| StartFailure {
                            reason,
                            needs_token: false,
                        })?;
                    let client =
                        rmcp::transport::AuthClient::new(CallerHeaders::default(), manager);
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    handler
                        .serve_with_lifecycle(Inbound::new(transport, server), mode)
                        .await
                }
            }
        }
    })
}

/// The child process: its own process group (so stopping it also stops
/// what it spawned, e.g. `npx` and node), killed when dropped, with a clean
/// environment.
fn command(stdio: &StdioSpec) -> process_wrap::tokio::CommandWrap {
    let mut cmd = tokio::process::Command::new(&stdio.command);
    cmd.args(&stdio.args).env_clear().kill_on_drop(true);
    for var in PASSED_ENV {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    cmd.envs(stdio.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &stdio.cwd {
        cmd.current_dir(cwd);
    }
    let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
    #[cfg(unix)]
    wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
    wrap
}

/// Copies the server's stderr to the logs, line by line, tagged with its name.
async fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = match line.char_indices().nth(MAX_STDERR_LINE) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line,
        };
        tracing::info!(target: "toolgate::mcp::stderr", mcp_server = %server, "{line}");
    }
}

/// Where a call carries the headers rendered for its caller (`headers`
/// reading `request.key` / `request.project`): an entry of its `_meta`,
/// which the session's HTTP client moves into the request's headers before
/// it is sent (the server sees headers only).
pub const CALLER_HEADERS_META: &str = "io.toolgate/caller-headers";

/// rmcp's HTTP client (reqwest), sending the headers a `tools/call` carries
/// for its caller. rmcp sends from a worker task of its own, so the
/// caller's headers travel with the message rather than with the task.
#[derive(Clone, Debug, Default)]
struct CallerHeaders(reqwest::Client);

/// Takes the caller's headers out of a `tools/call`'s `_meta`.
fn take_caller_headers(
    message: &mut rmcp::model::ClientJsonRpcMessage,
    headers: &mut HashMap<http::HeaderName, http::HeaderValue>,
) {
    use rmcp::model::{ClientRequest, JsonRpcMessage};
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = &mut request.request else {
        return;
    };
    let Some(meta) = call.params.meta.as_mut() else {
        return;
    };
    let Some(serde_json::Value::Object(given)) = meta.0.0.remove(CALLER_HEADERS_META) else {
        return;
    };
    if meta.0.0.is_empty() {
        call.params.meta = None;
    }
    for (name, value) in given {
        if let (Ok(name), Some(Ok(mut value))) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            value.as_str().map(http::HeaderValue::from_str),
        ) {
            // They may carry a secret of `env`: never shown.
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
}

/// A bearer token among a request's headers (a caller's, at a `per_user`
/// server; or the declared `headers`' own): sent as the request's token,
/// in place of the one the session was opened with (a caller's may have
/// been renewed since). Any other `Authorization` is left as it is.
fn caller_bearer(headers: &mut HashMap<http::HeaderName, http::HeaderValue>) -> Option<String> {
    let token = headers
        .get(&http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .to_owned();
    headers.remove(&http::header::AUTHORIZATION);
    Some(token)
}

type SseStream = futures::stream::BoxStream<
    'static,
    Result<sse_stream::Sse, rmcp::transport::streamable_http_client::SseError>,
>;
type HttpError = rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for CallerHeaders {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        mut message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<rmcp::transport::streamable_http_client::StreamableHttpPostResponse, HttpError>
    {
        take_caller_headers(&mut message, &mut custom_headers);
        let auth_header = caller_bearer(&mut custom_headers).or(auth_header);
        self.0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        mut message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<rmcp::transport::streamable_http_client::StreamableHttpPostResponse, HttpError>
    {
        take_caller_headers(&mut message, &mut custom_headers);
        let auth_header = caller_bearer(&mut custom_headers).or(auth_header);
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<(), HttpError> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<SseStream, HttpError> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_authorization_becomes_the_requests_token() {
        let mut headers = HashMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Basic dXNlcjpwYXNz"),
        );
        assert_eq!(caller_bearer(&mut headers), None);
        assert_eq!(
            headers.get(&http::header::AUTHORIZATION).unwrap(),
            "Basic dXNlcjpwYXNz",
            "another scheme is sent as declared"
        );
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(caller_bearer(&mut headers).as_deref(), Some("abc"));
        assert!(headers.is_empty());
    }
}
