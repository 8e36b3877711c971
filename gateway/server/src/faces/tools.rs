//! The tool API: `GET /v1/tools`, `GET /v1/tool-sets` and
//! `POST /v1/tools/{name}/invoke` (whose `run_tool` the console uses too).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::{Json, response::Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

use super::common::call_context;
use crate::http::{ApiError, AppState, Caller};
use toolgate_engine::catalog::{CallRefused, CallScope, Catalog};
use toolgate_engine::executor::CallError;
use toolgate_engine::executor::ToolCall;
use toolgate_engine::tools::tool::context::CallContext;
use toolgate_engine::tools::tool::{Tool, ToolError};

#[derive(Debug, Deserialize)]
pub struct ToolsQuery {
    tool_set: Option<String>,
}

/// `GET /v1/tools[?tool_set=]`: tools in OpenAI's function format. With
/// API keys, only what the caller's key may use. Each tool is described
/// and written out in turn (a listing of a large catalog never holds every
/// tool's description as a JSON value at once).
pub async fn list_tools(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ToolsQuery>,
) -> Result<Response, ApiError> {
    let catalog = state.catalog();
    crate::faces::common::list_as(&state, &catalog, &caller).await;
    let who = caller.subject();
    let who = who.as_deref();
    let (tools, unavailable): (Vec<Arc<Tool>>, Vec<Value>) = match &q.tool_set {
        Some(name) => {
            let set = catalog.usable_set(name, caller.key.as_deref())?;
            (
                catalog.tools_in(set, who).collect(),
                catalog
                    .unavailable_in(set, who)
                    .into_iter()
                    .map(|u| json!({"name": u.name, "reason": u.reason}))
                    .collect(),
            )
        }
        None if caller.key.as_ref().is_some_and(|k| k.tool_sets.is_some()) => {
            // The union of the sets the key may use, each tool once.
            let mut seen = std::collections::HashSet::new();
            let mut tools = Vec::new();
            let mut unavailable = Vec::new();
            for set in catalog.sets().filter(|s| caller.may_use(&s.name)) {
                for t in catalog.tools_in(set, who) {
                    if seen.insert(t.name.clone()) {
                        tools.push(t);
                    }
                }
                for u in catalog.unavailable_in(set, who) {
                    if seen.insert(u.name.clone()) {
                        unavailable.push(json!({"name": u.name, "reason": u.reason}));
                    }
                }
            }
            (tools, unavailable)
        }
        None => (
            catalog.tools().collect(),
            catalog
                .unavailable()
                .map(|u| json!({"name": u.name, "reason": u.reason}))
                .collect(),
        ),
    };
    let listing = Listing {
        object: "list",
        tool_set: q.tool_set.as_deref(),
        data: Described(&tools),
        unavailable: &unavailable,
    };
    let body = serde_json::to_vec(&listing).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("the tool listing cannot be written: {e}"),
        )
    })?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// The body of `GET /v1/tools`.
#[derive(serde::Serialize)]
struct Listing<'a> {
    object: &'static str,
    tool_set: Option<&'a str>,
    data: Described<'a>,
    unavailable: &'a [Value],
}

/// Tools, each described ([`describe_tool`]) as it is written.
struct Described<'a>(&'a [Arc<Tool>]);

impl serde::Serialize for Described<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for tool in self.0 {
            seq.serialize_element(&describe_tool(tool))?;
        }
        seq.end()
    }
}

fn describe_tool(tool: &Tool) -> Value {
    let mut v = tool.to_openai();
    if let Some(obj) = v.as_object_mut() {
        obj.insert(
            "toolgate".into(),
            json!({
                "kind": tool.kind.label(),
                "category": tool.category,
                "cached": tool.cache.is_some(),
            }),
        );
        if let toolgate_engine::tools::tool::ToolKind::Mcp(mcp) = &tool.kind
            && let Some(ext) = obj.get_mut("toolgate").and_then(Value::as_object_mut)
        {
            ext.insert(
                "mcp".into(),
                json!({
                    "server": mcp.server(),
                    "name": mcp.remote_name(),
                    "annotations": tool.annotations,
                }),
            );
        }
    }
    v
}

/// `GET /v1/tool-sets`. With API keys, only the sets the caller's key may
/// use, `default` marking the key's default.
pub async fn list_sets(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let catalog = state.catalog();
    crate::faces::common::list_as(&state, &catalog, &caller).await;
    let who = caller.subject();
    let who = who.as_deref();
    let default = caller.default_set(&catalog);
    let data: Vec<Value> = catalog
        .sets()
        .filter(|s| caller.may_use(&s.name))
        .map(|s| {
            json!({
                "name": s.name,
                "description": s.description,
                "tools": catalog.tools_in(s, who).map(|t| t.name.clone()).collect::<Vec<_>>(),
                "unavailable": catalog.unavailable_in(s, who).into_iter().map(|u| u.name).collect::<Vec<_>>(),
                "default": Some(&s.name) == default.as_ref(),
            })
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InvokeBody {
    #[serde(default)]
    arguments: Option<Value>,
}

/// `POST /v1/tools/{name}/invoke` with `{"arguments": {...}}`. With API
/// keys, the tool must belong to a set the caller's key may use (else 403).
pub async fn invoke(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(crate::http::body_error)?;
    let context = call_context(&headers, &caller)?;
    let arguments = parse_arguments(&body)?;
    let result = run_tool(&state, &caller, &context, name, arguments).await?;
    match &result.error {
        None => Ok(Json(result).into_response()),
        Some(e) => Err(error_for(e)),
    }
}

/// Runs the tool `name` for `caller`, as the tool API does (and the
/// console through it): with API keys the tool must belong to a set the
/// key may use (403); an unknown tool is 404, an unavailable one 503. A
/// call that ran is `Ok`, whether the tool succeeded or not.
pub async fn run_tool(
    state: &AppState,
    caller: &Caller,
    context: &CallContext,
    name: String,
    arguments: Value,
) -> Result<toolgate_engine::executor::ToolResult, ApiError> {
    let catalog = state.catalog();
    crate::faces::common::list_as(state, &catalog, caller).await;
    check_tool(&catalog, caller, &name)?;
    let call = ToolCall {
        id: "invoke".into(),
        name,
        arguments,
    };
    Ok(state.executor.run(&catalog, &call, context).await)
}

/// Whether `caller` may call the tool `name` and it can be called (the
/// engine's one rule, `Catalog::callable`, over the key's sets): with API
/// keys it must belong to a set the key may use (403); an unknown tool is
/// 404, an unavailable one 503.
pub fn check_tool(catalog: &Catalog, caller: &Caller, name: &str) -> Result<(), ApiError> {
    let who = caller.subject();
    match catalog.callable(CallScope::Key(caller.key.as_deref()), name, who.as_deref()) {
        Ok(_) => Ok(()),
        Err(refused) => {
            let (status, code) = match &refused {
                CallRefused::Forbidden { .. } | CallRefused::NotInSet { .. } => {
                    toolgate_engine::support::metrics::record(|m| m.reject("forbidden"));
                    (StatusCode::FORBIDDEN, "tool_not_allowed")
                }
                CallRefused::Unavailable { .. } => {
                    (StatusCode::SERVICE_UNAVAILABLE, "tool_unavailable")
                }
                CallRefused::Unknown(_) => (StatusCode::NOT_FOUND, "unknown_tool"),
            };
            Err(ApiError::new(status, code, refused.to_string()))
        }
    }
}

/// The request body: empty, or `{"arguments": <object or JSON text>}`.
fn parse_arguments(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let parsed: InvokeBody = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not valid JSON of the form {{\"arguments\": {{...}}}}: {e}"
        ))
    })?;
    match parsed.arguments {
        None | Some(Value::Null) => Ok(json!({})),
        Some(Value::String(text)) => serde_json::from_str(&text).map_err(|e| {
            ApiError::bad_request(format!("`arguments` is a string but not JSON: {e}"))
        }),
        Some(v) => Ok(v),
    }
}

/// The truthful status for a failed call.
fn error_for(e: &CallError) -> ApiError {
    let status = match e {
        CallError::UnknownTool(_) => StatusCode::NOT_FOUND,
        CallError::Tool(ToolError::InvalidArguments(_) | ToolError::Refused(_)) => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        CallError::Timeout(_) | CallError::Tool(ToolError::Timeout(_)) => {
            StatusCode::GATEWAY_TIMEOUT
        }
        CallError::Tool(ToolError::Backend(_) | ToolError::Failed(_)) | CallError::Panicked(_) => {
            StatusCode::BAD_GATEWAY
        }
        CallError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
        CallError::Unapproved(_) | CallError::Tool(ToolError::NotConnected(_)) => {
            StatusCode::FORBIDDEN
        }
        // Only an MCP client of a set hands a call back (never the tool API).
        CallError::HandedToClient(_) => StatusCode::CONFLICT,
    };
    let mut err = ApiError::new(status, e.code(), e.to_string());
    match e {
        CallError::Tool(ToolError::InvalidArguments(details)) => err.with_details(json!(details)),
        CallError::RateLimited(wait) => {
            err.retry_after = Some(toolgate_engine::governance::limits::retry_after_secs(*wait));
            err
        }
        _ => err,
    }
}
