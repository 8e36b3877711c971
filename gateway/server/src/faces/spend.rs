//! The spend API: `GET /v1/spend` (what model and tool calls cost, summed
//! over a time range and grouped by `model`, `tool`, `key`, `user`,
//! `project`, `day` or `hour`) and `GET /v1/budgets` (each budget, what is
//! spent and left, and when it resets).
//!
//! Who sees what: a key with `console: all` (an operator) every key's
//! spend and every budget; any other key its own alone. Without API keys,
//! everything.

use axum::Json;
use axum::extract::{Extension, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_engine::governance::spend::Who;
use toolgate_engine::governance::spend::ledger::Dimension;

use crate::http::{ApiError, AppState, Caller};

/// Whether `caller` sees every key's spend.
fn operator(state: &AppState, caller: &Caller) -> bool {
    match &caller.key {
        Some(k) => k.console == toolgate_config::format::ConsoleAccess::All,
        None => !state.catalog().keys().required(),
    }
}

/// `GET /v1/spend`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpendQuery {
    /// From (RFC 3339 or a date); default: 30 days ago.
    from: Option<String>,
    /// To (RFC 3339 or a date, a date meaning its end); default: now.
    to: Option<String>,
    /// Comma-separated dimensions; default `model`.
    group_by: Option<String>,
    /// Only this key's spend (an operator's filter).
    key: Option<String>,
}

/// A time of the query: RFC 3339, or a date (its start, or with `end` its
/// last second).
fn time(text: &str, end: bool, field: &str) -> Result<i64, ApiError> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp());
    }
    let date = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| {
        ApiError::bad_request(format!(
            "`{field}` must be a date (2026-12-05) or a time (2026-12-05T10:00:00Z)"
        ))
        .param(field)
    })?;
    let start = date
        .and_hms_opt(0, 0, 0)
        .map_or(0, |t| t.and_utc().timestamp());
    Ok(if end { start + 86_399 } else { start })
}

/// `GET /v1/spend`.
pub async fn spend(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<SpendQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let now = chrono::Utc::now().timestamp();
    let from = q
        .from
        .as_deref()
        .map_or(Ok(now - 30 * 86_400), |t| time(t, false, "from"))?;
    let to = q.to.as_deref().map_or(Ok(now), |t| time(t, true, "to"))?;
    if to < from {
        return Err(ApiError::bad_request("`to` is before `from`").param("to"));
    }
    let mut by = Vec::new();
    for name in q.group_by.as_deref().unwrap_or("model").split(',') {
        let name = name.trim();
        let d = Dimension::parse(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "cannot group by `{name}`: use model, tool, key, user, project, day or hour"
            ))
            .param("group_by")
        })?;
        if !by.contains(&d) {
            by.push(d);
        }
    }
    // Another's spend only for an operator.
    let own = caller.key_name();
    let only = match (operator(&state, &caller), q.key) {
        (true, key) => key,
        (false, Some(k)) if Some(&k) != own.as_ref() => {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "spend_not_allowed",
                "a key sees its own spend only (an operator key has `console: all`)",
            )
            .param("key"));
        }
        (false, _) => own,
    };
    let rows = state
        .spend
        .query(from, to, &by, |g| only.as_ref().is_none_or(|k| &g.key == k))
        .await;
    let (source, date) = toolgate_engine::governance::spend::prices::shipped_source();
    Ok(Json(json!({
        "object": "spend",
        "from": chrono::DateTime::from_timestamp(from, 0).map(|t| t.to_rfc3339()),
        "to": chrono::DateTime::from_timestamp(to, 0).map(|t| t.to_rfc3339()),
        "group_by": by,
        "data": rows,
        "prices": {"shipped": {"source": source, "date": date}},
    })))
}

/// `GET /v1/budgets`.
pub async fn budgets(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let catalog = state.catalog();
    let data = if operator(&state, &caller) {
        state.spend.budgets(&catalog.spend, None).await
    } else {
        let who = Who {
            key: caller.key_name(),
            user: caller.claims().and(caller.subject()),
            project: None,
        };
        state.spend.budgets(&catalog.spend, Some(&who)).await
    };
    Json(json!({"object": "list", "data": data}))
}
