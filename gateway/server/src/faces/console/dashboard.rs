//! The dashboard: the last 24 hours by hour — model calls, their latency,
//! tokens, spend, tool calls and failures — drawn by uPlot (vendored from
//! its npm package, served from `/console/static/`), with the tools, the
//! top keys and users and the budgets as tables. Its data is the spend
//! store's (`state.spend`): an operator sees every key's, a `console: own`
//! key its own.

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};
use toolgate_engine::governance::spend::Who;
use toolgate_engine::governance::spend::ledger::Dimension;

use super::{console_access, fragment, render};
use crate::http::{ApiError, AppState, Caller};

/// `GET /console/ui/dashboard`.
pub async fn page(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let access = console_access(&state, &caller, &headers)?;
    let own = (!access.operator).then(|| caller.key_name()).flatten();
    let keep = |g: &toolgate_engine::governance::spend::ledger::Group| {
        own.as_ref().is_none_or(|k| &g.key == k)
    };
    let now = chrono::Utc::now().timestamp();
    let to = now - now.rem_euclid(3600) + 3599;
    let from = to + 1 - 24 * 3600;
    let spend = &state.spend;
    let hours = spend.query(from, to, &[Dimension::Hour], |g| keep(g)).await;
    let tools = spend
        .query(from, to, &[Dimension::Tool], |g| {
            keep(g) && !g.tool.is_empty()
        })
        .await;
    let mut top = spend
        .query(from, to, &[Dimension::Key, Dimension::User], |g| {
            keep(g) && !g.model.is_empty()
        })
        .await;
    top.sort_by(|a, b| {
        let cost = |r: &Value| r["priced_cost_usd"].as_f64().unwrap_or(0.0);
        let calls = |r: &Value| r["model_calls"].as_i64().unwrap_or(0);
        cost(b).total_cmp(&cost(a)).then(calls(b).cmp(&calls(a)))
    });
    top.truncate(10);
    let catalog = state.catalog();
    let who = own.as_ref().map(|k| Who {
        key: Some(k.clone()),
        user: caller.claims().and(caller.subject()),
        project: None,
    });
    let budgets = spend.budgets(&catalog.spend, who.as_ref()).await;
    let series = series(&hours, from);
    let unpriced: i64 = hours
        .iter()
        .filter_map(|r| r["unpriced_calls"].as_i64())
        .sum();
    let (source, date) = toolgate_engine::governance::spend::prices::shipped_source();
    Ok(fragment(render(
        "dashboard.html",
        json!({
            "series": series.to_string(),
            "tools": tools,
            "top": top,
            "budgets": budgets,
            "unpriced": unpriced,
            "own_only": own.is_some(),
            "shared": state.shared.is_some(),
            "prices_source": source,
            "prices_date": date,
        }),
    )?))
}

/// The charts' data: 24 hours from `from`, each series a value per hour
/// (0 for an hour without calls; latency `null` then).
fn series(rows: &[Value], from: i64) -> Value {
    let hour_of = |r: &Value| {
        r["hour"]
            .as_str()
            .and_then(|h| chrono::DateTime::parse_from_rfc3339(h).ok())
            .map(|t| t.timestamp())
    };
    let at = |t: i64| rows.iter().find(|r| hour_of(r) == Some(t));
    let hours: Vec<i64> = (0..24).map(|i| from + i * 3600).collect();
    let column = |field: &str| -> Vec<Value> {
        hours
            .iter()
            .map(|h| at(*h).map_or(json!(0), |r| r[field].clone()))
            .collect()
    };
    let latency = |field: &str| -> Vec<Value> {
        hours
            .iter()
            .map(|h| at(*h).map_or(Value::Null, |r| r[field].clone()))
            .collect()
    };
    json!({
        "hours": hours,
        "model_calls": column("model_calls"),
        "latency_p50_ms": latency("latency_p50_ms"),
        "latency_p95_ms": latency("latency_p95_ms"),
        "input_tokens": column("input_tokens"),
        "output_tokens": column("output_tokens"),
        "cached_input_tokens": column("cached_input_tokens"),
        "priced_cost_usd": column("priced_cost_usd"),
        "tool_calls": column("tool_calls"),
        "tool_failures": column("tool_failures"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hour_has_a_value_and_an_hour_without_calls_no_latency() {
        let rows =
            vec![json!({"hour": "1970-01-01T01:00:00Z", "model_calls": 3, "latency_p50_ms": 100})];
        let s = series(&rows, 0);
        assert_eq!(s["hours"].as_array().unwrap().len(), 24);
        assert_eq!(s["model_calls"][1], 3);
        assert_eq!(s["model_calls"][0], 0);
        assert_eq!(s["latency_p50_ms"][1], 100);
        assert_eq!(s["latency_p50_ms"][0], Value::Null);
    }
}
