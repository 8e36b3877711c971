//! `GET /v1/models` and `GET /v1/models/{model}`: the models the routes
//! can serve, in OpenAI's shape (which Anthropic's clients read too), or
//! in Google's for a client of Google's (whose SDKs call `v1` too).

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::gemini;
use crate::http::{ApiError, AppState, GoogleKey};

/// `GET /v1/models`: the models routes can serve.
pub async fn list_models(
    State(state): State<AppState>,
    google: Option<Extension<GoogleKey>>,
    headers: HeaderMap,
) -> Response {
    if google.is_some() || gemini::from_google(&headers) {
        return gemini::list_models(State(state)).await;
    }
    let catalog = state.catalog();
    let data: Vec<Value> = catalog
        .upstreams
        .list_models()
        .await
        .into_iter()
        .map(|(id, upstream)| json!({"id": id, "object": "model", "created": 0, "owned_by": upstream}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/models/{model}`: one model a route serves, else 404.
pub async fn get_model(
    State(state): State<AppState>,
    google: Option<Extension<GoogleKey>>,
    headers: HeaderMap,
    Path(model): Path<String>,
) -> Response {
    if google.is_some() || gemini::from_google(&headers) {
        return gemini::get_model(State(state), Path(model)).await;
    }
    match state.catalog().upstreams.resolve(&model) {
        Some(r) => axum::Json(
            json!({"id": model, "object": "model", "created": 0, "owned_by": r.upstream.name}),
        )
        .into_response(),
        None => ApiError::not_found(
            "model_not_found",
            format!("no route serves the model `{model}`; GET /v1/models lists them"),
        )
        .into_response(),
    }
}
