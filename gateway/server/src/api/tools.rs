//! Tool endpoints: health, listings and direct invocation.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::{Json, response::Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, AppState, Caller};
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::ToolCall;
use toolgate_engine::tool::ToolError;
use toolgate_engine::tool::context::CallContext;

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
    match toolgate_engine::metrics::global() {
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

#[derive(Debug, Deserialize)]
pub struct ToolsQuery {
    tool_set: Option<String>,
}

/// `GET /v1/tools[?tool_set=]`: tools in OpenAI's function format. With
/// API keys, only what the caller's key may use.
pub async fn list_tools(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ToolsQuery>,
) -> Result<Json<Value>, ApiError> {
    let catalog = state.catalog();
    let (tools, unavailable): (Vec<Value>, Vec<Value>) = match &q.tool_set {
        Some(name) => {
            let set = catalog.usable_set(name, caller.key.as_deref())?;
            (
                catalog.tools_in(set).map(|t| describe_tool(&t)).collect(),
                catalog
                    .unavailable_in(set)
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
                for t in catalog.tools_in(set) {
                    if seen.insert(t.name.clone()) {
                        tools.push(describe_tool(&t));
                    }
                }
                for u in catalog.unavailable_in(set) {
                    if seen.insert(u.name.clone()) {
                        unavailable.push(json!({"name": u.name, "reason": u.reason}));
                    }
                }
            }
            (tools, unavailable)
        }
        None => (
            catalog.tools().map(|t| describe_tool(&t)).collect(),
            catalog
                .unavailable()
                .map(|u| json!({"name": u.name, "reason": u.reason}))
                .collect(),
        ),
    };
    Ok(Json(json!({
        "object": "list",
        "tool_set": q.tool_set,
        "data": tools,
        "unavailable": unavailable,
    })))
}

fn describe_tool(tool: &toolgate_engine::tool::Tool) -> Value {
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
        if let toolgate_engine::tool::ToolKind::Mcp(mcp) = &tool.kind
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
    let default = caller.default_set(&catalog);
    let data: Vec<Value> = catalog
        .sets()
        .filter(|s| caller.may_use(&s.name))
        .map(|s| {
            json!({
                "name": s.name,
                "description": s.description,
                "tools": catalog.tools_in(s).map(|t| t.name.clone()).collect::<Vec<_>>(),
                "unavailable": catalog.unavailable_in(s).into_iter().map(|u| u.name).collect::<Vec<_>>(),
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

/// The header naming the project (or workspace) a request works for; it
/// reaches native tools through their context, never the model.
pub const PROJECT_HEADER: &str = "x-toolgate-project";

/// The context of a request's tool calls: the request's id, the caller's
/// key and the project from `X-Toolgate-Project` (400 when it is not a safe
/// folder name).
pub fn call_context(headers: &HeaderMap, caller: &Caller) -> Result<CallContext, ApiError> {
    let project = match headers.get(PROJECT_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::bad_request("the X-Toolgate-Project header is not valid text")
                })?
                .to_owned(),
        ),
    };
    // A key with projects is pinned to them.
    let project = match &caller.key {
        Some(key) => key.project(project).map_err(|message| {
            toolgate_engine::metrics::record(|m| m.reject("forbidden"));
            ApiError::new(StatusCode::FORBIDDEN, "project_not_allowed", message)
        })?,
        None => project,
    };
    CallContext::new()
        .with_request_id(caller.request_id.clone())
        .with_key(caller.key_name())
        .with_project(project)
        .map_err(|e| ApiError::bad_request(format!("X-Toolgate-Project: {e}")))
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
    let body = body.map_err(super::body_error)?;
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
    check_tool(&catalog, caller, &name)?;
    let call = ToolCall {
        id: "invoke".into(),
        name,
        arguments,
    };
    Ok(state.executor.run(&catalog, &call, context).await)
}

/// Whether `caller` may call the tool `name` and it can be called: with API
/// keys it must belong to a set the key may use (403); an unknown tool is
/// 404, an unavailable one 503.
pub fn check_tool(catalog: &Catalog, caller: &Caller, name: &str) -> Result<(), ApiError> {
    if let Some(key) = caller.key.as_ref().filter(|k| k.tool_sets.is_some()) {
        let allowed = catalog.sets().filter(|s| key.may_use(&s.name)).any(|s| {
            s.tools.iter().any(|t| t == name)
                || s.unavailable.iter().any(|t| t == name)
                || s.mcp.iter().any(|p| p.matches(name))
        });
        if !allowed {
            toolgate_engine::metrics::record(|m| m.reject("forbidden"));
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "tool_not_allowed",
                format!(
                    "API key `{}` may not use tool `{name}`: it is in none of the key's tool sets",
                    key.name
                ),
            ));
        }
    }
    if catalog.tool(name).is_none() {
        return Err(match catalog.unavailable_tool(name) {
            Some(u) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "tool_unavailable",
                format!("tool `{name}` is unavailable: {}", u.reason),
            ),
            None => ApiError::not_found("unknown_tool", format!("tool `{name}` does not exist")),
        });
    }
    Ok(())
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
fn error_for(e: &ToolError) -> ApiError {
    let status = match e {
        ToolError::UnknownTool(_) => StatusCode::NOT_FOUND,
        ToolError::InvalidArguments(_) | ToolError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        ToolError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        ToolError::Backend(_) | ToolError::Failed(_) | ToolError::Panicked(_) => {
            StatusCode::BAD_GATEWAY
        }
        ToolError::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut err = ApiError::new(status, e.code(), e.to_string());
    match e {
        ToolError::InvalidArguments(details) => err.with_details(json!(details)),
        ToolError::RateLimited(wait) => {
            err.retry_after = Some(toolgate_engine::limits::retry_after_secs(*wait));
            err
        }
        _ => err,
    }
}

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
