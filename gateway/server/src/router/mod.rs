//! The routes: which path goes to which face, what the layers are told
//! about the paths (which are open, which are MCP's protected resources),
//! and the service each connection runs ([`Gateway`]: chat completions
//! directly, Messages too, the rest through the router).

mod direct;

use axum::Extension;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{any, get, post};

pub use direct::Gateway;
#[cfg(test)]
pub(crate) use direct::future_size as direct_future_size;

use crate::faces::{
    approvals, chat, connections, console, gemini, mcp, messages, models, responses, spend,
    tool_changes, tools,
};
use crate::http::{self, ApiError, AppState, ErrorShape, Paths};
use crate::ops;

/// What the layers are told about the paths.
pub(crate) const PATHS: Paths = Paths {
    open: is_open,
    protected_resource: is_protected_resource,
    error_shape,
};

/// Anthropic's paths answer errors in Anthropic's shape, Google's in
/// Google's, every other path in OpenAI's.
fn error_shape(path: &str, headers: &axum::http::HeaderMap) -> ErrorShape {
    if path == "/v1/messages" || path.starts_with("/v1/messages/") {
        ErrorShape::Anthropic
    } else if gemini::is_gemini(path, headers) {
        ErrorShape::Google
    } else {
        ErrorShape::OpenAi
    }
}

/// Paths that need no key: health and readiness, the console's page and
/// assets (which hold no data), the protected-resource metadata, and the
/// connect pages a user's browser opens (a sealed ticket or state names
/// the user).
fn is_open(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz")
        || console::is_open(path)
        || path.starts_with("/connect/")
        || path.starts_with("/.well-known/oauth-protected-resource")
}

/// The MCP endpoint's paths, whose 401 points OAuth-aware clients at the
/// protected-resource metadata.
fn is_protected_resource(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}

/// Every endpoint the gateway serves, as an unknown path's 404 names them.
pub const ENDPOINTS: &[&str] = &[
    "POST /v1/chat/completions",
    "POST|GET /v1/responses",
    "POST /v1/responses/compact",
    "GET|DELETE /v1/responses/{id}",
    "GET /v1/responses/{id}/input_items",
    "POST /v1/messages",
    "POST /v1/messages/count_tokens",
    "POST /v1beta/models/{model}:generateContent|streamGenerateContent|countTokens (and /v1/)",
    "GET /v1beta/models[/{model}]",
    "GET /v1/models",
    "GET /v1/tools",
    "GET /v1/tool-sets",
    "POST /v1/tools/{name}/invoke",
    "GET /v1/approvals",
    "GET|POST /v1/approvals/{id}",
    "GET /v1/connections",
    "POST /v1/connections/{name}/link",
    "DELETE /v1/connections/{name}",
    "GET /connect/{name}",
    "GET /connect/callback",
    "POST|GET|DELETE /mcp/{tool_set}",
    "POST|GET|DELETE /mcp",
    "GET /.well-known/oauth-protected-resource",
    "GET /console",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
];

/// 404 for a path the gateway does not serve, naming the ones it does (a
/// client pointed at an API the gateway lacks learns that, rather than
/// "model not found").
async fn unknown_endpoint(
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
) -> Response {
    ApiError::not_found(
        "unknown_endpoint",
        format!(
            "toolgate does not serve {method} {}; it serves: {}",
            uri.path(),
            ENDPOINTS.join(", ")
        ),
    )
    .into_shaped(error_shape(uri.path(), &headers))
}

/// 405, in the path's face's shape.
async fn method_not_allowed(uri: axum::http::Uri, headers: axum::http::HeaderMap) -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not accept that method",
    )
    .into_shaped(error_shape(uri.path(), &headers))
}

/// The gateway's routes. `limits.max_request_bytes` is read here, once:
/// changing it takes a restart.
pub fn router(state: AppState) -> Router {
    let body_limit = state.catalog().settings.limits.max_request_bytes;
    let mut router = Router::new();
    if state.catalog().settings.mcp.enabled {
        let endpoint = mcp::Endpoint::new(&state, state.stopping.clone());
        router = router
            .route(
                "/mcp",
                any(mcp::serve_default).layer(Extension(endpoint.clone())),
            )
            .route(
                "/mcp/{tool_set}",
                any(mcp::serve_set).layer(Extension(endpoint)),
            )
            .route(
                "/.well-known/oauth-protected-resource",
                get(mcp::resource_metadata),
            )
            .route(
                "/.well-known/oauth-protected-resource/{*resource}",
                get(mcp::resource_metadata),
            );
    }
    router
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/v1/tools", get(tools::list_tools))
        .route("/v1/tool-sets", get(tools::list_sets))
        .route("/v1/tools/{name}/invoke", post(tools::invoke))
        .route("/v1/spend", get(spend::spend))
        .route("/v1/budgets", get(spend::budgets))
        .route("/v1/approvals", get(approvals::list))
        .route(
            "/v1/approvals/{id}",
            get(approvals::get).post(approvals::post),
        )
        .route("/v1/tool-changes", get(tool_changes::list))
        .route(
            "/v1/tool-changes/{server}/{tool}",
            post(tool_changes::accept),
        )
        .route("/v1/connections", get(connections::list))
        .route(
            "/v1/connections/{name}",
            axum::routing::delete(connections::disconnect),
        )
        .route("/v1/connections/{name}/link", post(connections::link))
        .route("/connect/callback", get(connections::callback))
        .route("/connect/{name}", get(connections::start))
        .route("/v1/models", get(models::list_models))
        .route(
            "/v1/models/{model}",
            get(models::get_model).post(gemini::generate),
        )
        .route("/v1beta/models", get(gemini::list_models))
        .route(
            "/v1beta/models/{model}",
            get(gemini::get_model).post(gemini::generate),
        )
        .route("/v1/chat/completions", post(chat::completions))
        .route(
            "/v1/responses",
            post(responses::responses).get(responses::websocket),
        )
        .route("/v1/responses/compact", post(responses::compact))
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::input_items_of),
        )
        .route("/v1/messages", post(messages::messages))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .merge(console::routes())
        .fallback(unknown_endpoint)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), PATHS),
            http::body_deadline,
        ))
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), PATHS),
            http::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::observe,
        ))
        .with_state(state)
}
