//! What runs around every handler: the request id and its tracing span,
//! request metrics, and API-key authentication with per-key request rate
//! limits.
//!
//! Order (outermost first): [`observe`] (request id, span, metrics,
//! `X-Request-Id` on the response), [`authenticate`] (the browser rule,
//! 401/429, the [`Caller`] extension), [`body_deadline`] (the whole body
//! within its time and size), then the handler. Each layer is a plain
//! function the router's direct route calls in the same order. What the
//! layers need to know of the routes (which paths are open) the router
//! tells them ([`Paths`]).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::{ApiError, AppState, ErrorShape};
use toolgate_engine::governance::limits::{Rate, Refused, retry_after_secs};
use toolgate_engine::identity::auth::{self, ApiKey};
use toolgate_engine::tools::tool::context::new_request_id;

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
    /// The verified bearer token (JWT) the caller came with, if any: its
    /// subject and claims.
    pub token: Option<Arc<toolgate_engine::identity::jwt::Verified>>,
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

    /// Who calls: the token's `sub`, else the key's name (the one rule for
    /// every face's contexts, the audit log and traces).
    pub fn subject(&self) -> Option<String> {
        self.token
            .as_ref()
            .and_then(|t| t.subject.clone())
            .or_else(|| self.key_name())
    }

    /// The token itself, if the caller came with one.
    pub fn bearer(&self) -> Option<toolgate_engine::tools::tool::context::BearerToken> {
        self.token.as_ref().map(|t| t.token.clone())
    }

    /// The token's claims, if the caller came with one.
    pub fn claims(&self) -> Option<Arc<serde_json::Value>> {
        self.token.as_ref().map(|t| Arc::new(t.claims.clone()))
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

/// The route a request is counted under: the router's matched path, or
/// the path the direct route serves.
#[derive(Debug)]
pub enum Route {
    Matched(MatchedPath),
    Direct(&'static str),
    Unmatched,
}

impl Route {
    fn as_str(&self) -> &str {
        match self {
            Route::Matched(m) => m.as_str(),
            Route::Direct(path) => path,
            Route::Unmatched => "unmatched",
        }
    }
}

/// What [`observe`] starts when a request arrives and finishes on its
/// response: the request id, the request's span, its route and method for
/// the metrics, and when it began.
#[derive(Debug)]
pub struct Observed {
    pub id: String,
    pub span: tracing::Span,
    route: Route,
    method: &'static str,
    http1: bool,
    began: Instant,
}

impl Observed {
    /// The request id (the client's `X-Request-Id` when usable) and the
    /// span carrying it.
    pub fn begin(parts: &axum::http::request::Parts, route: Route) -> Observed {
        let id = parts
            .headers
            .get(REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|id| valid_request_id(id))
            .map_or_else(new_request_id, str::to_owned);
        let method = match parts.method {
            Method::GET => "GET",
            Method::POST => "POST",
            Method::PUT => "PUT",
            Method::DELETE => "DELETE",
            Method::PATCH => "PATCH",
            Method::HEAD => "HEAD",
            Method::OPTIONS => "OPTIONS",
            _ => "other",
        };
        let label = route.as_str();
        let span = tracing::info_span!(
            "request",
            request_id = %id,
            method,
            route = label,
            "otel.kind" = "server",
            "http.request.method" = method,
            "http.route" = label,
        );
        crate::telemetry::adopt(&span, &parts.headers);
        Observed {
            id,
            span,
            route,
            method,
            http1: parts.version < axum::http::Version::HTTP_2,
            began: Instant::now(),
        }
    }

    /// Counts the request in the metrics and returns its id in
    /// `X-Request-Id` (and, while draining, `Connection: close`).
    pub fn finish(self, state: &AppState, mut resp: Response) -> Response {
        if self.http1 && state.draining.is_draining() {
            // Draining: the client (or proxy) opens its next request elsewhere.
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        let route = self.route.as_str();
        toolgate_engine::support::metrics::record(|m| {
            m.http_request(
                route,
                self.method,
                resp.status().as_str(),
                self.began.elapsed(),
            );
        });
        if let Ok(v) = HeaderValue::from_str(&self.id) {
            resp.headers_mut().insert(REQUEST_ID_HEADER, v);
        }
        resp
    }
}

/// Assigns the request id, runs the request in a span carrying it, counts
/// it in the metrics, and returns the id in `X-Request-Id`.
pub async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let route = parts
        .extensions
        .get::<MatchedPath>()
        .cloned()
        .map_or(Route::Unmatched, Route::Matched);
    let observed = Observed::begin(&parts, route);
    parts.extensions.insert(RequestId(observed.id.clone()));
    let resp = next
        .run(Request::from_parts(parts, body))
        .instrument(observed.span.clone())
        .await;
    observed.finish(&state, resp)
}

/// What the router tells the layers about its paths.
#[derive(Debug, Clone, Copy)]
pub struct Paths {
    /// Paths that need no key (health, the console's page, the
    /// protected-resource metadata).
    pub open: fn(&str) -> bool,
    /// Paths whose 401 names the protected-resource metadata (RFC 9728),
    /// where OAuth-aware clients look.
    pub protected_resource: fn(&str) -> bool,
    /// Whose error body a request's refusals have (its face's, by its
    /// path and, where two APIs share a path, its headers).
    pub error_shape: fn(&str, &HeaderMap) -> ErrorShape,
}

/// The URL the client used to reach the gateway, from its `Host` (and a
/// proxy's `X-Forwarded-Proto`).
pub fn public_base(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        })
        .unwrap_or("localhost");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// The protected-resource metadata URL of `path` (RFC 9728).
pub fn metadata_url(headers: &HeaderMap, path: &str) -> String {
    format!(
        "{}/.well-known/oauth-protected-resource{path}",
        public_base(headers)
    )
}

/// The header Anthropic's clients send their key in.
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The header Google's clients send their key in.
const X_GOOG_API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

/// Marks a request whose key came the way Google's clients send it
/// (`x-goog-api-key` or `?key=`).
#[derive(Debug, Clone, Copy)]
pub struct GoogleKey;

/// Takes `key=…` out of `uri`'s query, returning its value (decoded).
fn take_query_key(uri: &mut axum::http::Uri) -> Option<String> {
    let query = uri.query()?;
    if !query.split('&').any(|p| p.starts_with("key=")) {
        return None;
    }
    let mut key = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|p| match p.strip_prefix("key=") {
            Some(v) => {
                key = Some(
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8_lossy()
                        .into_owned(),
                );
                false
            }
            None => true,
        })
        .collect();
    let path = uri.path().to_owned();
    let path_and_query = if rest.is_empty() {
        path
    } else {
        format!("{path}?{}", rest.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    if let Ok(u) = axum::http::Uri::from_parts(parts) {
        *uri = u;
    }
    key.filter(|k| !k.is_empty())
}

/// When keys are configured, every endpoint but `/healthz`, `/readyz`, the console's page and assets (and the protected-resource metadata) needs
/// `Authorization: Bearer <key>` (or `x-api-key: <key>`): a missing or unknown key is 401, a key
/// over its requests per minute 429 with `Retry-After`. The headers are
/// removed from the request either way, so nothing behind this layer can
/// forward it.
pub async fn authenticate(
    State((state, paths)): State<(AppState, Paths)>,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let request_id = parts
        .extensions
        .get::<RequestId>()
        .map_or_else(new_request_id, |r| r.0.clone());
    match identify(&state, &mut parts, request_id, paths).await {
        Ok(caller) => {
            parts.extensions.insert(caller);
            next.run(Request::from_parts(parts, body)).await
        }
        Err(refused) => refused,
    }
}

/// What [`authenticate`] decides for a request: who calls (the key
/// removed from the headers), or the answer that refuses it.
pub async fn identify(
    state: &AppState,
    req: &mut axum::http::request::Parts,
    request_id: String,
    paths: Paths,
) -> Result<Caller, Response> {
    let catalog = state.catalog();
    let keys = catalog.keys();
    let shape = (paths.error_shape)(req.uri.path(), &req.headers);
    refuse_what_pages_send(&catalog, req).map_err(|e| e.into_shaped(shape))?;
    let open = (paths.open)(req.uri.path());
    let mut verified_token = None;
    // A key in the query (`?key=`, as Google's API takes one) is taken out
    // of the URI: nothing behind this layer sees or logs it.
    let query_key = take_query_key(&mut req.uri);
    let key = if keys.required() && !open {
        // `x-api-key` is how Anthropic's clients send theirs,
        // `x-goog-api-key` (or `?key=`) Google's.
        let header = |name: HeaderName| {
            req.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .filter(|k| !k.is_empty())
        };
        let token = req
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(auth::bearer)
            .or_else(|| header(X_API_KEY))
            .or_else(|| header(X_GOOG_API_KEY))
            .or(query_key.as_deref());
        let Some(token) = token else {
            return Err(unauthorized(
                req,
                paths,
                "missing_api_key",
                "this gateway needs an API key: send `Authorization: Bearer <key>` (or `x-api-key: <key>`, or Google's `x-goog-api-key: <key>`)",
            ));
        };
        let key = match keys.find(token) {
            Some(key) => key,
            None => match keys
                .jwt()
                .filter(|_| toolgate_engine::identity::jwt::JwtVerifier::looks_like_jwt(token))
            {
                // A token of the OAuth authorization server acts as the key
                // its claim names.
                // Boxed: a rare step, whose future would size every
                // request's.
                Some(jwt) => match Box::pin(jwt.verify(token)).await {
                    Ok(verified) => match keys.by_name(&verified.key) {
                        Some(key) => {
                            verified_token = Some(Arc::new(verified));
                            Arc::clone(key)
                        }
                        None => {
                            let name = &verified.key;
                            tracing::warn!(key = %name, "refused a token naming an undeclared API key");
                            return Err(unauthorized(
                                req,
                                paths,
                                "invalid_token",
                                &format!(
                                    "the token names the API key `{name}`, which this gateway does not have"
                                ),
                            ));
                        }
                    },
                    Err(e) => {
                        tracing::warn!("refused a token: {e}");
                        return Err(unauthorized(req, paths, "invalid_token", &e.to_string()));
                    }
                },
                None => {
                    tracing::warn!("refused a request with an unknown API key");
                    return Err(unauthorized(
                        req,
                        paths,
                        "invalid_api_key",
                        "the API key is not valid",
                    ));
                }
            },
        };
        if let Err(err) = spend_request(state, &key).await {
            return Err(err.into_shaped(shape));
        }
        if catalog.mcp_replica_url.is_some()
            && (paths.protected_resource)(req.uri.path())
            && let Ok(mut value) = HeaderValue::try_from(format!("Bearer {token}"))
        {
            value.set_sensitive(true);
            req.extensions.insert(ForwardCredential(value));
        }
        Some(key)
    } else {
        None
    };
    if strip_credentials(&mut req.headers) || query_key.is_some() {
        // Its key is gone, but the request is still one of Google's
        // clients' (the paths it shares with OpenAI's API answer them in
        // Google's shape).
        req.extensions.insert(GoogleKey);
    }
    Ok(Caller {
        request_id,
        key,
        token: verified_token,
    })
}

/// The caller's credential, kept (out of the headers) on an MCP request of
/// a replica that forwards a parked call's answers to the replica holding
/// it (`mcp.replica_url_env`): the answers are the caller's, sent on as
/// the caller. Nothing else reads it.
#[derive(Clone)]
pub struct ForwardCredential(pub HeaderValue);

impl std::fmt::Debug for ForwardCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForwardCredential(…)")
    }
}

/// Takes every header that carries a key out of `headers` (nothing
/// behind the gateway's door sees or logs one); `true` when Google's
/// `x-goog-api-key` was among them. One pass over the headers when none is
/// there, as on a gateway without keys.
fn strip_credentials(headers: &mut axum::http::HeaderMap) -> bool {
    let carries_key =
        |name: &HeaderName| name == AUTHORIZATION || name == X_API_KEY || name == X_GOOG_API_KEY;
    if !headers.keys().any(carries_key) {
        return false;
    }
    headers.remove(AUTHORIZATION);
    headers.remove(X_API_KEY);
    headers.remove(X_GOOG_API_KEY).is_some()
}

/// Spends one of `key`'s requests per minute (`limits.requests_per_minute`):
/// every HTTP request does, and every `response.create` of a WebSocket.
pub async fn spend_request(state: &AppState, key: &ApiKey) -> Result<(), ApiError> {
    // The check boxed: it may ask Redis, and its future would size every
    // request's, with a rate or without.
    if let Some(per_minute) = key.requests_per_minute
        && let Err(refused) = Box::pin(state.guards.rates.check(
            &key.name,
            Rate::Requests,
            per_minute,
        ))
        .await
    {
        let mut err = match refused {
            Refused::Limited(wait) => {
                toolgate_engine::support::metrics::record(|m| m.reject("rate_limited"));
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
                toolgate_engine::support::metrics::record(|m| m.reject("shared_state_unavailable"));
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shared_state_unavailable",
                    "the rate limit of this API key cannot be checked: the shared state (Redis) is unavailable and `state.redis.on_unavailable` is `closed`; retry shortly",
                )
            }
        };
        err.retry_after = err.retry_after.or(Some(1));
        return Err(err);
    }
    Ok(())
}

/// Paths that answer to any `Host`: probes and scrapes address the
/// gateway by whatever name reaches it (a pod's IP), and act on nothing
/// (`crate::ops`).
fn is_probe(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// The header a browser says a request's site relation in.
const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");

/// The one rule about what a web page may make the gateway do, before
/// anything else looks at a request (every endpoint, both routes):
/// - a browser's `Origin` must be this machine's, the gateway's own or one
///   of `http.allowed_origins`, and without API keys the `Host` must be a
///   loopback name or one of `http.allowed_hosts` (DNS rebinding), 403;
/// - a body sent with POST, PUT or PATCH must say it is JSON
///   (`Content-Type: application/json`, or `application/*+json`), 415:
///   the types a page may send anywhere without asking first
///   (`text/plain`, forms, none at all) are never taken as a request. The
///   console's fragments, which post forms, need `HX-Request` instead (a
///   header no page of another origin may send), checked by the console.
fn refuse_what_pages_send(
    catalog: &toolgate_engine::catalog::Catalog,
    req: &axum::http::request::Parts,
) -> Result<(), ApiError> {
    use axum::http::header::{CONTENT_TYPE, HOST, ORIGIN};
    use toolgate_engine::catalog::{BrowserRefusal, BrowserRequest};
    // The four headers read, found in one pass (the first of each, as
    // `HeaderMap::get` gives). A header that is not text is kept as one no
    // rule accepts.
    let [origin, host, fetch_site, content_type] = {
        let mut found: [Option<&HeaderValue>; 4] = [None; 4];
        for (name, value) in &req.headers {
            let slot = if name == ORIGIN {
                0
            } else if name == HOST {
                1
            } else if name == SEC_FETCH_SITE {
                2
            } else if name == CONTENT_TYPE {
                3
            } else {
                continue;
            };
            found[slot] = found[slot].or(Some(value));
        }
        found.map(|v| v.map(|v| v.to_str().unwrap_or("\u{fffd}")))
    };
    let path = req.uri.path();
    let safe_method = matches!(req.method, Method::GET | Method::HEAD | Method::OPTIONS);
    let request = BrowserRequest {
        origin,
        host: host.or_else(|| req.uri.authority().map(|a| a.as_str())),
        cross_site: fetch_site == Some("cross-site"),
        safe_method,
        keys: catalog.keys().required(),
        probe: is_probe(path),
    };
    if let Err(refused) = catalog.browsers.check(&request) {
        toolgate_engine::support::metrics::record(|m| m.reject("browser_refused"));
        tracing::warn!(origin = ?request.origin, host = ?request.host, "refused: {refused}");
        let code = match refused {
            BrowserRefusal::Origin(_) => "origin_not_allowed",
            BrowserRefusal::CrossSite => "cross_site_request",
            BrowserRefusal::Host(_) => "host_not_allowed",
        };
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            code,
            refused.to_string(),
        ));
    }
    let has_body = matches!(req.method, Method::POST | Method::PUT | Method::PATCH);
    if has_body && !path.starts_with("/console/ui/") && !is_json(content_type) {
        toolgate_engine::support::metrics::record(|m| m.reject("not_json"));
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "the request body must be JSON sent with `Content-Type: application/json` (it came as {}); other types are what any web page may send to the gateway, so they are refused",
                content_type.map_or_else(|| "no Content-Type".to_owned(), |t| format!("`{t}`"))
            ),
        ));
    }
    Ok(())
}

/// `true` for `application/json` and `application/*+json`, with any
/// parameters (`; charset=utf-8`).
fn is_json(content_type: Option<&str>) -> bool {
    let Some(essence) = content_type.and_then(|t| t.split(';').next()) else {
        return false;
    };
    let essence = essence.trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype
                .len()
                .checked_sub(5)
                .and_then(|i| subtype.get(i..))
                .is_some_and(|tail| tail.eq_ignore_ascii_case("+json")))
}

/// 401 with `WWW-Authenticate: Bearer`; on the paths the router says are
/// protected resources (MCP's) it also names the metadata (RFC 9728).
fn unauthorized(
    req: &axum::http::request::Parts,
    paths: Paths,
    code: &'static str,
    message: &str,
) -> Response {
    toolgate_engine::support::metrics::record(|m| m.reject("unauthorized"));
    let mut resp =
        ApiError::new(StatusCode::UNAUTHORIZED, code, message)
            .into_shaped((paths.error_shape)(req.uri.path(), &req.headers));
    let path = req.uri.path();
    let challenge = if (paths.protected_resource)(path) {
        let url = metadata_url(&req.headers, path);
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
pub async fn body_deadline(
    State((state, paths)): State<(AppState, Paths)>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let shape = (paths.error_shape)(parts.uri.path(), &parts.headers);
    match read_body(&state, body, shape).await {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
                .await
        }
        Err(refused) => refused,
    }
}

/// What [`body_deadline`] reads: the whole body, or the answer (in
/// `shape`) that refuses it.
pub async fn read_body<B>(state: &AppState, body: B, shape: ErrorShape) -> Result<Bytes, Response>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    use http_body_util::BodyExt;
    let limits = &state.catalog().settings.limits;
    let (timeout, max) = (limits.body_timeout, limits.max_request_bytes);
    let read = async {
        let mut body = std::pin::pin!(body);
        // A body that arrives in one chunk (most do) is passed on as is.
        let mut chunks: Vec<Bytes> = Vec::new();
        let mut len = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
            let Ok(chunk) = frame.into_data() else {
                continue; // trailers
            };
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
            _ => Bytes::from(chunks.concat()),
        })
    };
    // A body already here (most are, with their headers) is read without
    // creating a timer.
    let mut read = std::pin::pin!(read);
    if let std::task::Poll::Ready(read) = futures::poll!(&mut read) {
        return read.map_err(|e| e.into_shaped(shape));
    }
    // The timer boxed: only a body still on its way takes one, and inline
    // it would size every request's read (and with it the router's body
    // layer, which holds the read's future for the whole request).
    match Box::pin(tokio::time::timeout(timeout, read)).await {
        Err(_) => {
            toolgate_engine::support::metrics::record(|m| m.reject("body_timeout"));
            Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time (limits.body_timeout)",
            )
            .into_shaped(shape))
        }
        Ok(read) => read.map_err(|e| e.into_shaped(shape)),
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

    #[test]
    fn only_json_bodies_are_json() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.api+json",
            " application/json ;x=y",
        ] {
            assert!(is_json(Some(ok)), "{ok}");
        }
        for refused in [
            "text/plain",
            "text/plain; a=application/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "json",
            "",
        ] {
            assert!(!is_json(Some(refused)), "{refused}");
        }
        assert!(!is_json(None));
    }
}
