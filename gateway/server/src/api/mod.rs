//! The HTTP surface (axum): routes, shared state, the layers around every
//! handler (request id, metrics, API keys), the error format, and the
//! service each connection runs ([`Gateway`]: chat completions directly,
//! the rest through the router).

mod direct;
mod error;
mod layers;
mod tools;

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{any, get, post};

pub use direct::Gateway;
pub use error::{ApiError, body_error};
pub use layers::{Caller, REQUEST_ID_HEADER, RequestId};
pub use tools::{PROJECT_HEADER, call_context, check_tool, run_tool};

use crate::reload::Live;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::Executor;
use toolgate_engine::limits::Guards;

/// What every handler shares. Every layer and handler of every request
/// takes a clone: one reference count.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

/// The contents of an [`AppState`].
#[derive(Debug)]
pub struct Shared {
    live: Arc<Live>,
    pub executor: Executor,
    /// Formatters learned in `auto` mode; outlives catalog reloads.
    pub learned: Arc<toolgate_engine::formatter::Learned>,
    /// Caps on concurrent loops and streams, per-key rate limits.
    pub guards: Arc<Guards>,
    /// Cancelled when the gateway begins to stop: ends MCP sessions and
    /// their streams.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Begun at SIGTERM, before `stopping`: `/readyz` answers 503 and
    /// every answer closes its connection while the gateway still serves
    /// (`shutdown.drain_delay`).
    pub draining: Draining,
    /// The shared state (`state.redis`), when configured.
    pub shared: Option<Arc<toolgate_engine::shared::Redis>>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// State serving `catalog`, which never changes.
    pub fn new(catalog: Arc<Catalog>, executor: Executor) -> Self {
        Self::with_live(Arc::new(Live::new(catalog)), executor)
    }

    /// State serving whatever catalog `live` holds (reloads swap it).
    pub fn with_live(live: Arc<Live>, executor: Executor) -> Self {
        Self::with_shared(live, executor, None)
    }

    /// The same, with rate-limit buckets, result caches and learned
    /// formatters kept in `shared` when given.
    pub fn with_shared(
        live: Arc<Live>,
        executor: Executor,
        shared: Option<Arc<toolgate_engine::shared::Redis>>,
    ) -> Self {
        use toolgate_engine::formatter::Learned;
        let (guards, learned) = match &shared {
            Some(redis) => (
                Guards::shared(Arc::clone(redis)),
                Learned::shared(Arc::clone(redis)),
            ),
            None => (Guards::default(), Learned::default()),
        };
        let guards = Arc::new(guards);
        let executor = if executor.has_rate_limits() {
            executor
        } else {
            executor.with_rate_limits(Arc::clone(&guards.rates))
        };
        let executor = executor.with_shared(shared.clone());
        AppState(Arc::new(Shared {
            live,
            executor,
            learned: Arc::new(learned),
            guards,
            stopping: tokio_util::sync::CancellationToken::new(),
            draining: Draining::default(),
            shared,
        }))
    }
}

/// Whether the gateway is draining: read on every answer, so a flag (one
/// atomic load) next to the token its waiters await (whose own check
/// takes a lock).
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<DrainingState>);

#[derive(Debug, Default)]
struct DrainingState {
    begun: std::sync::atomic::AtomicBool,
    token: tokio_util::sync::CancellationToken,
}

impl Draining {
    /// Starts draining (again: no effect).
    pub fn begin(&self) {
        self.0
            .begun
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.token.cancel();
    }

    pub fn is_draining(&self) -> bool {
        self.0.begun.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves once draining has begun.
    pub async fn begun(&self) {
        self.0.token.cancelled().await;
    }
}

impl Shared {
    /// What the engine's loops run with.
    pub fn services(&self) -> toolgate_engine::chat::Services {
        toolgate_engine::chat::Services {
            executor: self.executor.clone(),
            learned: Arc::clone(&self.learned),
            guards: Arc::clone(&self.guards),
        }
    }

    /// The catalog a request works with, from start to end: take it once.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.live.load()
    }

    /// The catalog in service, its version and the last reload.
    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }
}

/// Every endpoint the gateway serves, as an unknown path's 404 names them.
pub const ENDPOINTS: &[&str] = &[
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "GET /v1/models",
    "GET /v1/tools",
    "GET /v1/tool-sets",
    "POST /v1/tools/{name}/invoke",
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
async fn unknown_endpoint(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(
        "unknown_endpoint",
        format!(
            "toolgate does not serve {method} {}; it serves: {}",
            uri.path(),
            ENDPOINTS.join(", ")
        ),
    )
}

/// The gateway's routes. `limits.max_request_bytes` is read here, once:
/// changing it takes a restart.
pub fn router(state: AppState) -> Router {
    let body_limit = state.catalog().settings.limits.max_request_bytes;
    let mut router = Router::new();
    if state.catalog().settings.mcp.enabled {
        let endpoint = crate::mcp::Endpoint::new(&state, state.stopping.clone());
        router = router
            .route(
                "/mcp",
                any(crate::mcp::serve_default).layer(Extension(endpoint.clone())),
            )
            .route(
                "/mcp/{tool_set}",
                any(crate::mcp::serve_set).layer(Extension(endpoint)),
            )
            .route(
                "/.well-known/oauth-protected-resource",
                get(crate::mcp::resource_metadata),
            )
            .route(
                "/.well-known/oauth-protected-resource/{*resource}",
                get(crate::mcp::resource_metadata),
            );
    }
    router
        .route("/healthz", get(tools::healthz))
        .route("/readyz", get(tools::readyz))
        .route("/metrics", get(tools::metrics))
        .route("/v1/tools", get(tools::list_tools))
        .route("/v1/tool-sets", get(tools::list_sets))
        .route("/v1/tools/{name}/invoke", post(tools::invoke))
        .route("/v1/models", get(tools::list_models))
        .route("/v1/chat/completions", post(crate::chat::completions))
        .route("/v1/responses", post(crate::responses::responses))
        .route("/v1/messages", post(crate::messages::messages))
        .merge(crate::console::routes())
        .fallback(unknown_endpoint)
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not accept that method",
            )
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            layers::body_deadline,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            layers::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            layers::observe,
        ))
        .with_state(state)
}
