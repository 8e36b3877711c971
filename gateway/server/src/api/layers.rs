//! What runs around every handler: the request id and its tracing span,
//! request metrics, and API-key authentication with per-key request rate
//! limits.
//!
//! Order (outermost first): [`observe`] (request id, span, metrics,
//! `X-Request-Id` on the response), then tower-http's trace layer, then
//! [`authenticate`] (401/429, the [`Caller`] extension), then the handler.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::{ApiError, AppState};
use toolgate_engine::auth::{self, ApiKey};
use toolgate_engine::limits::{Rate, Refused, retry_after_secs};
use toolgate_engine::tool::context::new_request_id;

/// The request id header, read from clients and sent upstream and to HTTP
/// tools.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The request's id, set by the `observe` layer.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Who is calling: the request id and, when keys are configured, the key.
/// Every handler behind the `authenticate` layer can extract it.
#[derive(Debug, Clone)]
pub struct Caller {
    pub request_id: String,
    /// `None` when the API is open (no keys configured) or for `/healthz`.
    pub key: Option<Arc<ApiKey>>,
}

impl Caller {
    /// `true` when the caller may use the tool set `name`.
    pub fn may_use(&self, name: &str) -> bool {
        self.key.as_ref().is_none_or(|k| k.may_use(name))
    }

    /// The tool set a request of this caller uses when it names none: the
    /// key's default, else (without keys) the catalog's.
    pub fn default_set(&self, catalog: &toolgate_engine::catalog::Catalog) -> Option<String> {
        match &self.key {
            Some(key) => key.default_tool_set.clone(),
            None => catalog.default_set().map(|s| s.name.clone()),
        }
    }

    /// The key's name, for contexts and logs.
    pub fn key_name(&self) -> Option<String> {
        self.key.as_ref().map(|k| k.name.clone())
    }
}

/// A client's request id is kept when it is short and plain; anything else
/// is replaced, so it can go into headers and logs as is.
fn valid_request_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// Assigns the request id (the client's `X-Request-Id` when usable),
/// runs the request in a span carrying it, counts it in the metrics, and
/// returns the id in `X-Request-Id`.
pub async fn observe(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| valid_request_id(id))
        .map_or_else(new_request_id, str::to_owned);
    let route = req.extensions().get::<MatchedPath>().cloned();
    let method = match *req.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    req.extensions_mut().insert(RequestId(id.clone()));
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method,
        route,
        "otel.kind" = "server",
        "http.request.method" = method,
        "http.route" = route,
    );
    crate::telemetry::adopt(&span, req.headers());
    let http1 = req.version() < axum::http::Version::HTTP_2;
    let began = Instant::now();
    let mut resp = next.run(req).instrument(span).await;
    if http1 && state.draining.is_cancelled() {
        // Draining: the client (or proxy) opens its next request elsewhere.
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    }
    toolgate_engine::metrics::record(|m| {
        m.http_requests
            .with_label_values(&[route, method, resp.status().as_str()])
            .inc();
        m.http_duration
            .with_label_values(&[route])
            .observe(began.elapsed().as_secs_f64());
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

/// The header Anthropic's clients send their key in.
const X_API_KEY: &str = "x-api-key";

/// When keys are configured, every endpoint but `/healthz`, `/readyz`, the console's page and assets (and the protected-resource metadata) needs
/// `Authorization: Bearer <key>` (or `x-api-key: <key>`): a missing or unknown key is 401, a key
/// over its requests per minute 429 with `Retry-After`. The headers are
/// removed from the request either way, so nothing behind this layer can
/// forward it.
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let request_id = req
        .extensions()
        .get::<RequestId>()
        .map_or_else(new_request_id, |r| r.0.clone());
    let catalog = state.catalog();
    let keys = catalog.keys();
    let open = matches!(req.uri().path(), "/healthz" | "/readyz")
        || crate::console::is_open(req.uri().path())
        || req
            .uri()
            .path()
            .starts_with("/.well-known/oauth-protected-resource");
    let key = if keys.required() && !open {
        // `x-api-key` is how Anthropic's clients send theirs.
        let token = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(auth::bearer)
            .or_else(|| {
                req.headers()
                    .get(X_API_KEY)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
            });
        let Some(token) = token else {
            return unauthorized(
                &req,
                "missing_api_key",
                "this gateway needs an API key: send `Authorization: Bearer <key>` (or `x-api-key: <key>`)",
            );
        };
        let key = match keys.find(token) {
            Some(key) => key,
            None => match keys
                .jwt()
                .filter(|_| toolgate_engine::jwt::JwtVerifier::looks_like_jwt(token))
            {
                // A token of the OAuth authorization server acts as the key
                // its claim names.
                Some(jwt) => match jwt.verify(token).await {
                    Ok(name) => match keys.by_name(&name) {
                        Some(key) => Arc::clone(key),
                        None => {
                            tracing::warn!(key = %name, "refused a token naming an undeclared API key");
                            return unauthorized(
                                &req,
                                "invalid_token",
                                &format!(
                                    "the token names the API key `{name}`, which this gateway does not have"
                                ),
                            );
                        }
                    },
                    Err(e) => {
                        tracing::warn!("refused a token: {e}");
                        return unauthorized(&req, "invalid_token", &e.to_string());
                    }
                },
                None => {
                    tracing::warn!("refused a request with an unknown API key");
                    return unauthorized(&req, "invalid_api_key", "the API key is not valid");
                }
            },
        };
        if let Some(per_minute) = key.requests_per_minute
            && let Err(refused) = state
                .guards
                .rates
                .check(&key.name, Rate::Requests, per_minute)
                .await
        {
            let mut err = match refused {
                Refused::Limited(wait) => {
                    toolgate_engine::metrics::record(|m| m.reject("rate_limited"));
                    tracing::info!(key = %key.name, "request rate limit reached");
                    let mut err = ApiError::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "rate_limited",
                        format!(
                            "API key `{}` may make {per_minute} requests per minute; retry after the time in Retry-After",
                            key.name
                        ),
                    );
                    err.retry_after = Some(retry_after_secs(wait));
                    err
                }
                Refused::Unavailable => {
                    toolgate_engine::metrics::record(|m| m.reject("shared_state_unavailable"));
                    ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "shared_state_unavailable",
                        "the rate limit of this API key cannot be checked: the shared state (Redis) is unavailable and `state.redis.on_unavailable` is `closed`; retry shortly",
                    )
                }
            };
            err.retry_after = err.retry_after.or(Some(1));
            return err.into_response();
        }
        Some(key)
    } else {
        None
    };
    req.headers_mut().remove(AUTHORIZATION);
    req.headers_mut().remove(X_API_KEY);
    req.extensions_mut().insert(Caller { request_id, key });
    next.run(req).await
}

/// 401 with `WWW-Authenticate: Bearer`; on the MCP endpoint it also names
/// the protected-resource metadata (RFC 9728), where MCP clients look.
fn unauthorized(req: &Request, code: &'static str, message: &str) -> Response {
    toolgate_engine::metrics::record(|m| m.reject("unauthorized"));
    let mut resp = ApiError::new(StatusCode::UNAUTHORIZED, code, message).into_response();
    let path = req.uri().path();
    let challenge = if path == "/mcp" || path.starts_with("/mcp/") {
        let url = crate::mcp::metadata_url(req.headers(), path);
        let error = if code == "invalid_api_key" || code == "invalid_token" {
            ", error=\"invalid_token\""
        } else {
            ""
        };
        HeaderValue::from_str(&format!("Bearer resource_metadata=\"{url}\"{error}"))
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    } else {
        HeaderValue::from_static("Bearer")
    };
    resp.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    resp
}

/// Reads a request's body within `limits.body_timeout` (408 after it) and
/// `limits.max_request_bytes` (413 beyond it) before the handler runs: a
/// client sending its body a byte at a time cannot hold a request open.
pub async fn body_deadline(State(state): State<AppState>, req: Request, next: Next) -> Response {
    use futures::StreamExt;
    let limits = &state.catalog().settings.limits;
    let (timeout, max) = (limits.body_timeout, limits.max_request_bytes);
    let (parts, body) = req.into_parts();
    let read = async {
        let mut data = body.into_data_stream();
        // A body that arrives in one chunk (most do) is passed on as is.
        let mut chunks: Vec<axum::body::Bytes> = Vec::new();
        let mut len = 0usize;
        while let Some(chunk) = data.next().await {
            let chunk = chunk
                .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
            len += chunk.len();
            if len > max {
                return Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    "the request body is larger than limits.max_request_bytes",
                ));
            }
            chunks.push(chunk);
        }
        Ok(match chunks.len() {
            1 => chunks.swap_remove(0),
            _ => axum::body::Bytes::from(chunks.concat()),
        })
    };
    match tokio::time::timeout(timeout, read).await {
        Err(_) => {
            toolgate_engine::metrics::record(|m| m.reject("body_timeout"));
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time (limits.body_timeout)",
            )
            .into_response()
        }
        Ok(Err(e)) => e.into_response(),
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_from_clients_are_kept_only_when_plain() {
        assert!(valid_request_id("abc-123_x.y:z"));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id("a b"));
        assert!(!valid_request_id("a\r\nX-Evil: 1"));
        assert!(!valid_request_id(&"a".repeat(129)));
    }
}
