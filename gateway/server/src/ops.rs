//! What operators and their machines ask: `/healthz`, `/readyz` and
//! `/metrics`. They act on nothing and answer to any `Host`.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::{Json, response::Response};
use serde_json::{Value, json};

use crate::http::{ApiError, AppState};

/// `GET /healthz`: always open; the catalog version and the outcome of
/// the last reload (errors are counted here, detailed in the logs).
pub async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let catalog = state.catalog();
    let mut health = json!({
        "status": "ok",
        "tools": catalog.tools().count(),
        "tool_sets": catalog.sets().count(),
        "catalog": state.live().report(),
    });
    if let Some(redis) = &state.shared {
        let status = redis.status();
        health["shared_state"] = json!({
            "redis": if status.up { "up" } else { "down" },
            "error": status.error,
        });
    }
    Json(health)
}

/// `GET /readyz`: always open; 200 when this replica should get traffic,
/// 503 with the reasons when not: it is draining (SIGTERM), an MCP server
/// marked `required` is down, or the shared state (Redis) does not answer
/// and `on_unavailable` is `closed`. Under the other policies a Redis
/// outage is a degradation every replica shares (each falls back), not a
/// reason to take them all out of the load balancer: 200, with the reason
/// under `degraded`. A replica that is not ready still serves what it is
/// sent.
pub async fn readyz(State(state): State<AppState>) -> Response {
    let mut reasons = Vec::new();
    let mut degraded = Vec::new();
    if state.draining.is_draining() {
        reasons.push("shutting down".to_owned());
    }
    if let Some(redis) = &state.shared {
        let status = redis.status();
        if !status.up {
            let why = format!(
                "the shared state (Redis) is unavailable: {}",
                status.error.unwrap_or_default()
            );
            match redis.policy() {
                toolgate_config::format::Unavailable::Closed => reasons.push(why),
                _ => degraded.push(why),
            }
        }
    }
    reasons.extend(state.catalog().mcp().required_not_ready());
    let mut body = if reasons.is_empty() {
        json!({"ready": true})
    } else {
        json!({"ready": false, "reasons": reasons})
    };
    if !degraded.is_empty() {
        body["degraded"] = json!(degraded);
    }
    let status = if reasons.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let catalog = state.catalog();
    match toolgate_engine::support::metrics::global() {
        Some(m) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            m.render(&catalog.mcp().health()),
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics_unavailable",
            "metrics are disabled (see the logs)",
        )
        .into_response(),
    }
}
