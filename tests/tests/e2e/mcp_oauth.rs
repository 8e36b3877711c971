//! OAuth 2.1 of the gateway at an upstream MCP server, against an MCP
//! server (rmcp's) that checks bearer tokens and an authorization server
//! that issues them, both in this test: the grant at start, and a token
//! the server stops accepting mid-session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use toolgate_tests::{ConfigDir, load_catalog};

use crate::mcp_support::{call, eventually, start, text};

const CLIENT_ID: &str = "toolgate";
const CLIENT_SECRET: &str = "cc-secret-4711";

/// The tokens the authorization server issued, and those the MCP server
/// still accepts.
#[derive(Default)]
struct Tokens {
    issued: Vec<String>,
    valid: HashSet<String>,
}

#[derive(Clone)]
struct Auth {
    base: String,
    tokens: Arc<Mutex<Tokens>>,
}

/// An MCP server with one tool.
#[derive(Clone)]
struct Guarded;

impl ServerHandler for Guarded {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            crate::mcp_support::tool_without_arguments(
                "secret_report",
                "A report only an authorized client may read.",
            ),
        ]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text("quarterly numbers"),
        ])))
    }
}

/// 401 with the protected resource's metadata unless the bearer token is
/// one the server accepts.
async fn require_token(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let accepted = token.is_some_and(|t| auth.tokens.lock().unwrap().valid.contains(&t));
    if accepted {
        return next.run(request).await;
    }
    let challenge = format!(
        "Bearer resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
        auth.base
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
    )
        .into_response()
}

async fn resource_metadata(State(auth): State<Auth>) -> Json<Value> {
    Json(json!({
        "resource": format!("{}/mcp", auth.base),
        "authorization_servers": [auth.base],
    }))
}

async fn server_metadata(State(auth): State<Auth>) -> Json<Value> {
    let base = &auth.base;
    Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
    }))
}

/// The client credentials grant, for the one registered client (its
/// secret in a Basic header or in the form).
async fn token(
    State(auth): State<Auth>,
    headers: HeaderMap,
    Form(form): Form<std::collections::HashMap<String, String>>,
) -> Response {
    use base64::Engine as _;
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok());
    let expected = format!("{CLIENT_ID}:{CLIENT_SECRET}");
    let authenticated = basic.as_deref() == Some(expected.as_str())
        || (form.get("client_id").map(String::as_str) == Some(CLIENT_ID)
            && form.get("client_secret").map(String::as_str) == Some(CLIENT_SECRET));
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") || !authenticated {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let mut tokens = auth.tokens.lock().unwrap();
    let token = format!("token-{}", tokens.issued.len() + 1);
    tokens.issued.push(token.clone());
    tokens.valid.insert(token.clone());
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600})),
    )
        .into_response()
}

/// The MCP server and its authorization server on one address.
async fn serve_guarded() -> Auth {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let auth = Auth {
        base: format!("http://{}", listener.local_addr().unwrap()),
        tokens: Arc::default(),
    };
    let mcp = StreamableHttpService::new(
        || Ok(Guarded),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(auth.clone(), require_token))
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(server_metadata),
        )
        .route("/token", post(token))
        .with_state(auth.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    auth
}

#[tokio::test]
async fn client_credentials_authorize_the_gateway_and_a_refused_token_is_replaced() {
    let auth = serve_guarded().await;
    let dir = ConfigDir::new(&[(
        "tools.d/guarded.yaml",
        &format!(
            "env:\n  REPORTS_SECRET: required\nmcp_servers:\n  - name: reports\n    transport: http\n    url: {}/mcp\n    oauth:\n      grant: client_credentials\n      client_id: {CLIENT_ID}\n      client_secret_env: REPORTS_SECRET\n",
            auth.base
        ),
    )]);
    let catalog = load_catalog(dir.path(), &[("REPORTS_SECRET", CLIENT_SECRET)]);
    start(&catalog).await;
    let first = call(&catalog, "secret_report", json!({})).await;
    assert_eq!(text(&first), "quarterly numbers", "{first:?}");
    assert_eq!(auth.tokens.lock().unwrap().issued, ["token-1"]);

    // The server stops accepting the token (revoked, or expired early).
    auth.tokens.lock().unwrap().valid.clear();
    let refused = call(&catalog, "secret_report", json!({})).await;
    assert!(!refused.success, "{refused:?}");
    let error = refused
        .error
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(
        error.contains("asks its authorization server for a new token"),
        "{error}"
    );
    assert!(!error.contains("token-1"), "no token in errors: {error}");

    // A new session gets a new token, and calls go through again.
    eventually("the server is ready again", || {
        catalog.tool("secret_report").is_some() && auth.tokens.lock().unwrap().issued.len() == 2
    })
    .await;
    let mut again = call(&catalog, "secret_report", json!({})).await;
    for _ in 0..50 {
        if again.success {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        again = call(&catalog, "secret_report", json!({})).await;
    }
    assert_eq!(text(&again), "quarterly numbers", "{again:?}");
    assert_eq!(auth.tokens.lock().unwrap().issued, ["token-1", "token-2"]);
}
