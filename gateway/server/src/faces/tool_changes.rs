//! The held changes of MCP tool definitions as an API, for automation
//! (a chat tool, a ticketing system) as well as the console's review page:
//! `GET /v1/tool-changes` lists the tools whose server changed their
//! definition after the gateway pinned it (`on_change: keep_old` or
//! `disable` holds the change), with both definitions and the new one's
//! fingerprint; `POST /v1/tool-changes/{server}/{tool}` (`{"fingerprint":
//! "…"}`) accepts that definition, and only it: a definition that changed
//! again since it was read is refused (409); with `"decision": "refuse"`
//! (and a `reason`), the change is refused — what is served stays as it
//! is, and the change is listed as refused. Deciding needs a key with
//! `approver: true`, as deciding a held call does; without API keys no one
//! may accept (the gateway could not tell a person from a model's tool
//! reaching its API).

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_engine::tools::tool::mcp::session::{AcceptError, Refusal};

use super::approvals::is_approver;
use crate::http::{ApiError, AppState, Caller};

/// `GET /v1/tool-changes`: every held change, for an approver (and on a
/// gateway without keys).
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    if state.catalog().keys().required() && !is_approver(&caller) {
        return Err(not_an_approver(&caller, "see held tool changes"));
    }
    let changes = state.catalog().mcp().changes();
    Ok(Json(json!({"object": "list", "data": changes})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    /// The fingerprint of the definition decided on, as the list gave it.
    fingerprint: String,
    #[serde(default)]
    decision: Decision,
    /// Why (kept with a refusal).
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Decision {
    #[default]
    Accept,
    Refuse,
}

/// `POST /v1/tool-changes/{server}/{tool}`: accepts (or, with
/// `"decision": "refuse"`, refuses) the held definition with the
/// fingerprint sent.
pub async fn accept(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((server, tool)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    if !is_approver(&caller) {
        return Err(not_an_approver(&caller, "decide on a changed tool"));
    }
    let body = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let decide: Decide = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not a decision ({e}); send {{\"fingerprint\": \"…\"}} with the fingerprint GET /v1/tool-changes gives, and `\"decision\": \"refuse\"` (with a `reason`) to refuse it"
        ))
    })?;
    let by = caller.key_name().unwrap_or_default();
    let catalog = state.catalog();
    let mcp = catalog.mcp();
    if decide.decision == Decision::Refuse {
        let refusal = Refusal {
            by: by.clone(),
            reason: decide.reason.filter(|r| !r.trim().is_empty()),
        };
        mcp.refuse_change(&server, &tool, &decide.fingerprint, refusal.clone())
            .map_err(not_accepted)?;
        tracing::info!(mcp_server = %server, tool, by, "a changed tool definition is refused through the API");
        return Ok(Json(json!({
            "server": server,
            "tool": tool,
            "fingerprint": decide.fingerprint,
            "status": "refused",
            "refused": refusal,
        })));
    }
    mcp.accept_change(&server, &tool, &decide.fingerprint)
        .map_err(not_accepted)?;
    tracing::info!(mcp_server = %server, tool, by, "a changed tool definition is accepted through the API");
    Ok(Json(json!({
        "server": server,
        "tool": tool,
        "fingerprint": decide.fingerprint,
        "status": "accepted",
        "accepted_by": by,
    })))
}

/// A change not accepted: 404 for a server or held change that is not
/// there, 409 for a fingerprint that is not the held definition's.
pub(super) fn not_accepted(e: AcceptError) -> ApiError {
    let status = match e {
        AcceptError::NoServer(_) | AcceptError::NoChange { .. } => StatusCode::NOT_FOUND,
        AcceptError::ChangedAgain(_) => StatusCode::CONFLICT,
    };
    ApiError::new(status, "not_accepted", e.to_string())
}

fn not_an_approver(caller: &Caller, what: &str) -> ApiError {
    toolgate_engine::support::metrics::record(|m| m.reject("forbidden"));
    ApiError::new(
        StatusCode::FORBIDDEN,
        "not_an_approver",
        match caller.key_name() {
            Some(name) => format!(
                "API key `{name}` may not {what}: give it `approver: true` in toolgate.yaml"
            ),
            None => format!(
                "to {what} takes an API key with `approver: true` (without keys, no one may)"
            ),
        },
    )
}
