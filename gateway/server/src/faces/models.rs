//! `GET /v1/models`: the models the routes can serve, in OpenAI's list
//! shape (which Anthropic's clients read too).

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::http::AppState;

/// `GET /v1/models`: the models routes can serve.
pub async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let catalog = state.catalog();
    let data: Vec<Value> = catalog
        .upstreams
        .list_models()
        .await
        .into_iter()
        .map(|(id, upstream)| json!({"id": id, "object": "model", "created": 0, "owned_by": upstream}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}
