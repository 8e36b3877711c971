//! The approvals API: `GET /v1/approvals`, `GET /v1/approvals/{id}` and
//! `POST /v1/approvals/{id}` (`{"decision": "approve"|"refuse",
//! "reason": ...}`), for calls held until a person decides
//! ([`toolgate_engine::governance::approvals`]). The console's approvals page decides
//! through [`decide`] too.
//!
//! Who may: a key with `approver: true` sees and decides every request;
//! any other key sees only its own calls' requests and decides none.
//! Without API keys the requests may be seen but no one may decide: the
//! gateway cannot tell a person from a model whose tool reaches its API
//! (a shell, an HTTP tool pointed at it), so held calls are not run.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_engine::governance::approvals::{DecideError, Request};

use crate::http::{ApiError, AppState, Caller};

/// `true` when `caller` may decide requests.
pub fn is_approver(caller: &Caller) -> bool {
    caller.key.as_ref().is_some_and(|k| k.approver)
}

/// The requests `caller` may see, newest first: every one for an
/// approver, and on a gateway without keys.
pub async fn visible(state: &AppState, caller: &Caller) -> Vec<Request> {
    let settings = state.catalog().settings.approvals.clone();
    let all = state.executor.approvals().list(&settings).await;
    if is_approver(caller) || !state.catalog().keys().required() {
        return all;
    }
    let own = caller.key_name();
    all.into_iter()
        .filter(|r| own.is_some() && r.binding.key == own)
        .collect()
}

/// `GET /v1/approvals`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    Json(json!({"object": "list", "data": visible(&state, &caller).await}))
}

/// `GET /v1/approvals/{id}`.
pub async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Request>, ApiError> {
    visible(&state, &caller)
        .await
        .into_iter()
        .find(|r| r.id == id)
        .map(Json)
        .ok_or_else(|| unknown(&id))
}

/// What an approver sends.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    decision: Verdict,
    /// Why (for a refusal, the model reads it).
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    Approve,
    Refuse,
}

/// The longest reason kept, in characters.
const MAX_REASON_CHARS: usize = 1000;

/// `POST /v1/approvals/{id}`.
pub async fn post(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Request>, ApiError> {
    let body = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let decision: Decision = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a decision ({e}); send {{\"decision\": \"approve\"}} or {{\"decision\": \"refuse\", \"reason\": \"...\"}}"
        ))
    })?;
    let approve = matches!(decision.decision, Verdict::Approve);
    decide(&state, &caller, &id, approve, decision.reason)
        .await
        .map(Json)
}

/// Decides request `id` as `caller`, when it may.
pub async fn decide(
    state: &AppState,
    caller: &Caller,
    id: &str,
    approve: bool,
    reason: Option<String>,
) -> Result<Request, ApiError> {
    if !is_approver(caller) {
        toolgate_engine::support::metrics::record(|m| m.reject("forbidden"));
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "not_an_approver",
            match caller.key_name() {
                Some(name) => format!(
                    "API key `{name}` may not decide approvals: give it `approver: true` in toolgate.yaml"
                ),
                None => "deciding approvals needs an API key with `approver: true` (without keys, no one may decide)".to_owned(),
            },
        ));
    }
    let by = caller.key_name().unwrap_or_default();
    let reason = reason
        .map(|r| r.chars().take(MAX_REASON_CHARS).collect::<String>())
        .filter(|r| !r.trim().is_empty());
    state
        .executor
        .approvals()
        .decide(id, approve, &by, reason)
        .await
        .map_err(|e| match e {
            DecideError::Unknown(_) => unknown(id),
            DecideError::Unavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shared_state_unavailable",
                e.to_string(),
            ),
            DecideError::Decided { .. } => {
                ApiError::new(StatusCode::CONFLICT, "already_decided", e.to_string())
            }
        })
}

fn unknown(id: &str) -> ApiError {
    ApiError::not_found(
        "unknown_approval",
        format!("no request for approval `{id}` (unknown, expired, or not yours to see)"),
    )
}
