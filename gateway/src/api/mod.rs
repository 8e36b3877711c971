//! The HTTP surface (axum): routes, shared state and the error format.

mod error;
mod tools;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use tower_http::trace::TraceLayer;

pub use error::{ApiError, body_error};
pub use tools::{PROJECT_HEADER, call_context};

use crate::catalog::Catalog;
use crate::executor::Executor;

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct AppState {
    catalog: Arc<Catalog>,
    pub executor: Executor,
    /// Formatters learned in `auto` mode; outlives catalog reloads.
    pub learned: Arc<crate::formatter::Learned>,
}

impl AppState {
    pub fn new(catalog: Arc<Catalog>, executor: Executor) -> Self {
        AppState {
            catalog,
            executor,
            learned: Arc::default(),
        }
    }

    /// The catalog a request works with, from start to end.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog)
    }
}

/// The gateway's routes.
pub fn router(state: AppState) -> Router {
    let body_limit = state.catalog.settings.limits.max_request_bytes;
    Router::new()
        .route("/healthz", get(tools::healthz))
        .route("/v1/tools", get(tools::list_tools))
        .route("/v1/tool-sets", get(tools::list_sets))
        .route("/v1/tools/{name}/invoke", post(tools::invoke))
        .route("/v1/models", get(tools::list_models))
        .route("/v1/chat/completions", post(crate::chat::completions))
        .fallback(|| async { ApiError::not_found("not_found", "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not accept that method",
            )
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
