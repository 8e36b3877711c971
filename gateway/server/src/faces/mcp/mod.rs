//! The MCP face: every tool set served as an MCP server.
//!
//! - Streamable HTTP at `/mcp/{tool_set}` (and `/mcp`, the caller's default
//!   set) on the gateway's own listener, behind the same layers as every
//!   endpoint (request id, metrics, API keys, body limits): an unknown set
//!   is 404, a set the key may not use 403, no key 401 with
//!   `WWW-Authenticate` pointing at the protected-resource metadata
//!   ([`resource_metadata`]).
//! - rmcp's server negotiates the protocol per client: 2025-11-25 and older
//!   with sessions (`sessions`: signed ids any replica can serve),
//!   2026-07-28 statelessly (`server/discover`, per-request `_meta`,
//!   `subscriptions/listen`).
//! - stdio: `toolgate mcp --tool-set NAME` ([`serve_stdio`]).
//!
//! `handler` answers the requests; `wire` turns tools and results into
//! MCP's shapes.

mod forward;
mod handler;
mod input;
mod parked;
mod sessions;
pub(crate) mod wire;

use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub use handler::{Target, ToolSetServer};
use sessions::{Closed, SignedSessions, SignedStore, Signer};

use crate::http::{ApiError, AppState, Caller, public_base};
use toolgate_config::format::Discovery;

/// The streamable HTTP service, shared by every request.
#[derive(Clone)]
pub struct Endpoint {
    service: StreamableHttpService<ToolSetServer, SignedSessions>,
    sessions: Arc<SignedSessions>,
    max_sessions: usize,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("max_sessions", &self.max_sessions)
            .finish()
    }
}

impl Endpoint {
    /// The endpoint of `state`'s gateway. Its settings (`mcp.*`, and
    /// whether API keys are configured) are read here, once: changing them
    /// takes a restart. `stop` ends every session and stream.
    pub fn new(state: &AppState, stop: CancellationToken) -> Endpoint {
        let catalog = state.catalog();
        let settings = &catalog.settings;
        let signer = Signer::new(catalog.mcp_session_secret.as_ref());
        let closed = Closed::new(state.shared.clone());
        let sessions = Arc::new(SignedSessions::new(
            signer.clone(),
            closed.clone(),
            settings.mcp.max_sessions,
        ));
        let mut config = StreamableHttpServerConfig::default()
            .with_max_request_body_bytes(settings.limits.max_request_bytes)
            .with_cancellation_token(stop)
            .disable_allowed_origins();
        // `Origin` and `Host` are checked before any handler, for every
        // endpoint, against the catalog in service (`http.*`), so a reload
        // that removes the keys brings the `Host` check back.
        config = config.disable_allowed_hosts();
        let states = Arc::new(signer.request_states());
        let parked = Arc::new(parked::Calls::default());
        config.session_store = Some(Arc::new(SignedStore { signer, closed }));
        let for_sessions = state.clone();
        let service = StreamableHttpService::new(
            move || {
                Ok(ToolSetServer::new(
                    for_sessions.clone(),
                    Arc::clone(&states),
                    Arc::clone(&parked),
                ))
            },
            Arc::clone(&sessions),
            config,
        );
        Endpoint {
            service,
            sessions,
            max_sessions: settings.mcp.max_sessions,
        }
    }
}

/// `/mcp/{tool_set}`.
pub async fn serve_set(
    State(state): State<AppState>,
    Extension(endpoint): Extension<Endpoint>,
    Extension(caller): Extension<Caller>,
    Path(set): Path<String>,
    req: Request,
) -> Response {
    serve(state, endpoint, caller, Some(set), req).await
}

/// `/mcp`: the caller's default set.
pub async fn serve_default(
    State(state): State<AppState>,
    Extension(endpoint): Extension<Endpoint>,
    Extension(caller): Extension<Caller>,
    req: Request,
) -> Response {
    serve(state, endpoint, caller, None, req).await
}

async fn serve(
    state: AppState,
    endpoint: Endpoint,
    caller: Caller,
    set: Option<String>,
    mut req: Request,
) -> Response {
    let catalog = state.catalog();
    let set = match set {
        Some(set) => set,
        None => {
            let default = match &caller.key {
                Some(key) => key.default_tool_set.clone(),
                None => catalog.default_set().map(|s| s.name.clone()),
            };
            match default {
                Some(set) => set,
                None => {
                    return ApiError::not_found(
                        "unknown_tool_set",
                        "there is no default tool set: name one in the path, /mcp/{tool_set} (GET /v1/tool-sets lists them)",
                    )
                    .into_response();
                }
            }
        }
    };
    if let Err(e) = catalog.usable_set(&set, caller.key.as_deref()) {
        return ApiError::from(e).into_response();
    }
    // A session id must be one this gateway issued to this caller's key,
    // and not closed since; anything else is unknown (404), before rmcp
    // reads it.
    let owner = caller.key_name().unwrap_or_default();
    let session_open = match req.headers().get("mcp-session-id").map(|id| id.to_str()) {
        None => true,
        Some(Ok(id)) => endpoint.sessions.is_open(id, &owner).await,
        Some(Err(_)) => false,
    };
    if !session_open {
        return ApiError::not_found(
            "unknown_session",
            "no such MCP session for this key: start a new one (initialize)",
        )
        .into_response();
    }
    if opens_session(req.method(), req.headers())
        && endpoint.sessions.count().await >= endpoint.max_sessions
    {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_sessions",
            "the gateway holds as many MCP sessions as mcp.max_sessions allows; retry later, or use protocol 2026-07-28, which needs none",
        );
        err.retry_after = Some(5);
        return err.into_response();
    }
    // `?discovery=search` asks for the set's search surface, `all` for
    // every tool; without it, the set's own `discovery` decides.
    let asked =
        axum::extract::Query::<std::collections::HashMap<String, String>>::try_from_uri(req.uri())
            .ok()
            .and_then(|q| q.0.get("discovery").cloned());
    let discovery = match asked.as_deref() {
        None => None,
        Some("all") => Some(Discovery::All),
        Some("search") => Some(Discovery::Search),
        Some(other) => {
            return ApiError::bad_request(format!(
                "`discovery={other}` is neither `all` nor `search`"
            ))
            .into_response();
        }
    };
    let context = match crate::faces::common::call_context(req.headers(), &caller) {
        Ok(context) => context,
        Err(refused) => return refused.into_response(),
    };
    let closing = req.method() == Method::DELETE;
    req.extensions_mut().insert(Target {
        set,
        context,
        caller,
        discovery,
    });
    let mut resp = sessions::OWNER
        .scope(owner, endpoint.service.handle(req))
        .await
        .into_response();
    // A closed session is 204, as clients expect (the official Python
    // client warns about rmcp's 202).
    if closing && resp.status() == StatusCode::ACCEPTED {
        *resp.status_mut() = StatusCode::NO_CONTENT;
    }
    as_jsonrpc_error(resp).await
}

/// The transport's refusals in JSON-RPC's terms: rmcp answers a body it
/// cannot read, or a header it refuses, in plain words (and a body that is
/// not a JSON-RPC message with 415, as if its type were wrong). A client
/// gets a JSON-RPC error without an id, as the transport's spec allows: a
/// body that is not JSON is a parse error (-32700) and one that is not a
/// message an invalid request (-32600), both `400`; any other refusal
/// keeps its status.
async fn as_jsonrpc_error(resp: Response) -> Response {
    use http_body_util::BodyExt;
    let json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if json || !(resp.status().is_client_error() || resp.status().is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // rmcp's refusals are a line; more is not read.
    let words = match http_body_util::Limited::new(body, 4096).collect().await {
        Ok(b) => String::from_utf8_lossy(&b.to_bytes()).into_owned(),
        Err(_) => parts
            .status
            .canonical_reason()
            .unwrap_or("refused")
            .to_owned(),
    };
    let unreadable = words.starts_with("fail to deserialize request body");
    let code = if !unreadable || words.contains("unrecognized JSON-RPC message") {
        -32600
    } else {
        -32700
    };
    if unreadable {
        parts.status = StatusCode::BAD_REQUEST;
    }
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": words}});
    parts.headers.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(error.to_string()))
}

/// A request that may start a session: a POST without `Mcp-Session-Id`
/// from a client that does not speak the stateless revision.
fn opens_session(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::POST
        && !headers.contains_key("mcp-session-id")
        && headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| v < "2026-07-28")
}

/// `GET /.well-known/oauth-protected-resource[/mcp/...]`, open: what an
/// OAuth-aware MCP client reads to learn how to get a token: from the
/// authorization server of `auth.jwt` when there is one; otherwise the
/// tokens are the gateway's API keys, issued by its operator, and none is
/// named.
pub async fn resource_metadata(
    State(state): State<AppState>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Response {
    let resource_path = uri
        .path()
        .strip_prefix("/.well-known/oauth-protected-resource")
        .filter(|p| !p.is_empty())
        .unwrap_or("/mcp");
    let mut metadata = json!({
        "resource": format!("{}{resource_path}", public_base(&headers)),
        "resource_name": "toolgate",
        "bearer_methods_supported": ["header"],
    });
    if let (Some(jwt), Some(obj)) = (state.catalog().keys().jwt(), metadata.as_object_mut()) {
        obj.insert("authorization_servers".into(), json!([jwt.issuer()]));
    }
    Json(metadata).into_response()
}

/// The stdio face's failure.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("the MCP session over stdio could not start: {0}")]
    Start(String),
    #[error("the MCP session over stdio ended with an error: {0}")]
    Run(String),
}

/// Serves `set` over stdin/stdout to one local client, until it closes
/// them. Nothing but MCP messages is written to stdout.
pub async fn serve_stdio(
    state: AppState,
    set: String,
    discovery: Option<Discovery>,
) -> Result<(), StdioError> {
    let caller = Caller {
        request_id: "stdio".to_owned(),
        key: None,
        token: None,
    };
    let state_secret = state.catalog().mcp_session_secret.clone();
    let server = ToolSetServer::fixed(
        state,
        Target {
            set,
            context: toolgate_engine::tools::tool::context::CallContext::for_request(
                caller.request_id.clone(),
            ),
            caller,
            discovery,
        },
        Arc::new(Signer::new(state_secret.as_ref()).request_states()),
    );
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Start(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| StdioError::Run(e.to_string()))?;
    Ok(())
}
