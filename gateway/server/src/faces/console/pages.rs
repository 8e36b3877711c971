//! The console's fragments: the catalog, one tool (its form and a try),
//! and the recent calls.

use std::collections::BTreeSet;

use axum::Form;
use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_engine::tools::tool::{Tool, ToolKind};

use super::{console_access, form, fragment, render};
use crate::http::{ApiError, AppState, Caller};

/// A tool as the catalog lists it.
#[derive(Debug, Serialize)]
struct ToolRow {
    name: String,
    kind: &'static str,
    summary: String,
    strict: bool,
}

fn row(tool: &Tool) -> ToolRow {
    ToolRow {
        name: tool.name.clone(),
        kind: tool.kind.label(),
        summary: first_sentence(&tool.description),
        strict: tool.strict.is_ok(),
    }
}

/// The description's first sentence (or line), for lists.
fn first_sentence(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.find(". ") {
        Some(i) => line[..=i].to_owned(),
        None => line.to_owned(),
    }
}

/// `GET /console/ui/catalog`: the sets the caller may use, their tools and
/// unavailable tools, the MCP servers behind them, the last reload.
pub async fn catalog(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let access = console_access(&state, &caller, &headers)?;
    let catalog = state.catalog();
    crate::faces::common::list_as(&state, &catalog, &caller).await;
    let who = caller.subject();
    let who = who.as_deref();
    let default = caller.default_set(&catalog);
    let mut visible = BTreeSet::new();
    let sets: Vec<Value> = catalog
        .sets()
        .filter(|s| caller.may_use(&s.name))
        .map(|s| {
            let tools: Vec<ToolRow> = catalog.tools_in(s, who).map(|t| row(&t)).collect();
            visible.extend(tools.iter().map(|t| t.name.clone()));
            json!({
                "name": s.name,
                "description": s.description,
                "default": Some(&s.name) == default.as_ref(),
                "tools": tools,
                "unavailable": catalog.unavailable_in(s, who).into_iter()
                    .map(|u| json!({"name": u.name, "reason": u.reason}))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let every_set = caller.key.as_ref().is_none_or(|k| k.tool_sets.is_none());
    let servers: Vec<Value> = catalog
        .mcp()
        .reports()
        .into_iter()
        .filter(|r| every_set || r.tools.iter().any(|(name, _, _)| visible.contains(name)))
        .map(|r| {
            // A limited key sees the server's health and its own tools;
            // errors and problems (which name files, other sets, other
            // tools) are for operators.
            let tools = r
                .tools
                .iter()
                .filter(|(name, _, _)| access.operator || visible.contains(name))
                .count();
            json!({
                "name": r.name,
                "transport": r.transport,
                "status": r.status,
                "reason": if access.operator { r.reason } else { None },
                "server_info": r.server_info,
                "tools": tools,
                "problems": if access.operator { r.problems } else { Vec::new() },
            })
        })
        .collect();
    let live = state.live();
    // The configuration's own errors name its files: for those who see
    // every call (operators), not for a key limited to its own.
    let diagnostics: Vec<Value> = if access.operator {
        live.rejected()
            .into_iter()
            .map(|d| {
                json!({
                    "error": d.is_error(),
                    "file": d.file,
                    "line": d.pos.line,
                    "column": d.pos.column,
                    "message": d.message,
                    "hint": d.hint,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    let accounts = accounts(&state, &caller).await;
    let html = render(
        "catalog.html",
        json!({
            "sets": sets,
            "servers": servers,
            "reload": live.report(),
            "diagnostics": diagnostics,
            "accounts": accounts,
        }),
    )?;
    Ok(fragment(html))
}

/// The caller's upstream accounts (`connections`): connected or not, with
/// a link to connect (valid `link_ttl`). Empty without connections or
/// without a caller to own them.
async fn accounts(state: &AppState, caller: &Caller) -> Vec<Value> {
    let (Some(conns), Some(subject)) = (state.catalog().connections.clone(), caller.subject())
    else {
        return Vec::new();
    };
    let store = conns.store(state.shared.as_ref());
    match conns.status(&store, &subject).await {
        Ok(status) => status
            .into_iter()
            .map(|(name, kept)| {
                json!({
                    "link": conns.link(&name, &subject),
                    "name": name,
                    "connected": kept.is_some(),
                })
            })
            .collect(),
        Err(e) => {
            tracing::warn!("the console could not read the caller's connections: {e}");
            Vec::new()
        }
    }
}

/// `POST /console/ui/connections/{name}/disconnect`: the caller
/// disconnects an account; the catalog again.
pub async fn disconnect(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    console_access(&state, &caller, &headers)?;
    let conns = crate::faces::connections::connections(&state)?;
    let subject = crate::faces::connections::subject(&caller)?;
    let store = conns.store(state.shared.as_ref());
    conns
        .disconnect(&store, &name, &subject)
        .await
        .map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::BAD_GATEWAY,
                "store_unavailable",
                e.to_string(),
            )
        })?;
    catalog(State(state), Extension(caller), headers).await
}

/// The tool's page: what it is, its parameters and its form; where it is
/// declared only for operators.
fn tool_context(tool: &Tool, operator: bool) -> Value {
    let mcp = match &tool.kind {
        ToolKind::Mcp(m) => Some(json!({"server": m.server(), "name": m.remote_name()})),
        _ => None,
    };
    let fields = form::fields(&tool.parameters);
    json!({
        "name": tool.name,
        "kind": tool.kind.label(),
        "description": tool.description,
        "category": tool.category,
        "origin": operator.then_some(&tool.origin),
        "cached": tool.cache.is_some(),
        "timeout": tool.timeout.map(|t| humantime_serde::re::humantime::format_duration(t).to_string()),
        "read_only": tool.annotations.read_only_hint,
        "destructive": tool.annotations.destructive_hint,
        "mcp": mcp,
        "strict": match &tool.strict {
            Ok(_) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "path": e.path, "reason": e.reason}),
        },
        "schema": serde_json::to_string_pretty(&tool.parameters).unwrap_or_default(),
        "fields": fields,
        "form_why": if fields.is_none() { Some("the form cannot express this tool's parameters") } else { None },
    })
}

/// `GET /console/ui/tools/{name}`.
pub async fn tool(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let access = console_access(&state, &caller, &headers)?;
    let catalog = state.catalog();
    crate::faces::common::list_as(&state, &catalog, &caller).await;
    crate::faces::tools::check_tool(&catalog, &caller, &name)?;
    let who = caller.subject();
    let tool = catalog.tool_as(&name, who.as_deref()).ok_or_else(|| {
        ApiError::not_found("unknown_tool", format!("tool `{name}` does not exist"))
    })?;
    Ok(fragment(render(
        "tool.html",
        tool_context(&tool, access.operator),
    )?))
}

/// The name of the JSON form's one field.
const RAW_FIELD: &str = "__json";

/// `POST /console/ui/tools/{name}`: the form's values (or the JSON form's
/// text) as arguments, run through the tool API's path; the result.
pub async fn try_tool(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Form(submitted): Form<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    console_access(&state, &caller, &headers)?;
    let context = crate::faces::common::call_context(&headers, &caller)?;
    let arguments = match submitted.iter().find(|(k, _)| k == RAW_FIELD) {
        Some((_, text)) if text.trim().is_empty() => Ok(json!({})),
        Some((_, text)) => serde_json::from_str::<Value>(text)
            .map_err(|e| format!("the arguments are not JSON: {e}")),
        None => form::arguments(&submitted).map_err(|e| e.to_string()),
    };
    let arguments = match arguments {
        Ok(args) => args,
        Err(message) => {
            return Ok(fragment(render(
                "result.html",
                json!({"ok": false, "code": "invalid_arguments", "message": message}),
            )?));
        }
    };
    let shown = serde_json::to_string_pretty(&arguments).unwrap_or_default();
    let result =
        crate::faces::tools::run_tool(&state, &caller, &context, name.clone(), arguments.clone())
            .await?;
    // The tool's MCP App, run under the result with the call's arguments
    // and result.
    let catalog = state.catalog();
    let who = caller.subject();
    let mut app = None;
    if let Some(tool) = catalog.tool_as(&name, who.as_deref()) {
        app = super::apps::shown(&state, &catalog, &caller, &context, &tool).await;
        if let Some(app) = app.as_mut().filter(|a| a.get("html").is_some()) {
            app["tool"] = json!({
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.parameters,
            });
            app["arguments"] = arguments;
            app["result"] = crate::faces::mcp::wire::result(&result)
                .ok()
                .and_then(|r| serde_json::to_value(r).ok())
                .unwrap_or_default();
        }
    }
    let data = match &result.data {
        Some(Value::String(s)) => s.clone(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
        None => String::new(),
    };
    let details = json!(
        result
            .error
            .as_ref()
            .and_then(|e| e.arg_errors())
            .unwrap_or_default()
    );
    let html = render(
        "result.html",
        json!({
            "ok": result.error.is_none(),
            "code": result.error.as_ref().map(|e| e.code()),
            "message": result.error.as_ref().map(ToString::to_string),
            "details": details,
            "data": data,
            "arguments": shown,
            "duration_ms": format!("{:.1}", result.duration_ms),
            "cached": result.cached,
            "truncated": result.truncated,
            "app": app,
        }),
    )?;
    Ok(fragment(html))
}

#[derive(Debug, Deserialize)]
pub struct ActivityQuery {
    #[serde(default)]
    tool: String,
    /// `ok`, `error` (any failure) or an error code.
    #[serde(default)]
    outcome: String,
}

/// Calls the activity page shows at most.
const ACTIVITY_ROWS: usize = 100;

/// `GET /console/ui/activity[?tool=&outcome=]`: the last calls, as the
/// audit log records them; a key with `console: own` sees its own.
pub async fn activity(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ActivityQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let access = console_access(&state, &caller, &headers)?;
    let own = caller.key_name();
    let visible =
        |e: &toolgate_engine::governance::audit::AuditEntry| access.operator || e.key == own;
    let recent = state.executor.recent();
    let kept = recent.is_some();
    let (calls, tools) = match recent {
        Some(recent) => {
            let wanted = |e: &toolgate_engine::governance::audit::AuditEntry| {
                visible(e)
                    && (query.tool.is_empty() || e.tool == query.tool)
                    && match query.outcome.as_str() {
                        "" => true,
                        "error" => e.outcome != "ok",
                        code => e.outcome == code,
                    }
            };
            let calls: Vec<Value> = recent
                .list(ACTIVITY_ROWS, wanted)
                .into_iter()
                .map(|e| {
                    let mut v = json!(e);
                    v["arguments_text"] = match &e.arguments {
                        Some(Value::String(cut)) => json!(cut),
                        Some(args) => json!(args.to_string()),
                        None => Value::Null,
                    };
                    v["duration"] = json!(format!("{:.1}", e.duration_ms));
                    v
                })
                .collect();
            (calls, recent.tools(visible))
        }
        None => (Vec::new(), BTreeSet::new()),
    };
    let html = render(
        "activity.html",
        json!({
            "kept": kept,
            "calls": calls,
            "tools": tools,
            "tool": query.tool,
            "outcome": query.outcome,
            "own_only": !access.operator,
        }),
    )?;
    Ok(fragment(html))
}
