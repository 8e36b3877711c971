//! `POST /v1/chat/completions`: picks the tool set and the route, then
//! either proxies the request untouched or runs the tool loop.

mod request;
mod tool_loop;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

pub use request::ChatRequest;
pub use tool_loop::Loop;

use crate::api::{ApiError, AppState, body_error};

/// The header that picks a tool set when the body does not.
pub const TOOL_SET_HEADER: &str = "x-tool-set";
/// The tool-set name that turns gateway tools off for one request.
pub const NO_TOOL_SET: &str = "none";

pub async fn completions(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match handle(state, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle(
    state: AppState,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let mut request = ChatRequest::parse(&body)?;
    let catalog = state.catalog();

    let header_set = match headers.get(TOOL_SET_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("the X-Tool-Set header is not valid text"))?
                .to_owned(),
        ),
    };
    let set = match request.tool_set.take().or(header_set).as_deref() {
        Some(NO_TOOL_SET) => None,
        Some(name) => Some(catalog.set(name).ok_or_else(|| {
            let names: Vec<&str> = catalog.sets().map(|s| s.name.as_str()).collect();
            ApiError::bad_request(format!(
                "tool set `{name}` does not exist; available: {} (or `{NO_TOOL_SET}` for no gateway tools)",
                names.join(", ")
            ))
            .param("tool_set")
        })?),
        None => catalog.default_set(),
    };

    if catalog.upstreams.is_empty() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_upstream",
            "no model upstream is configured: declare `upstreams` in toolgate.yaml or set OPENAI_BASE_URL",
        ));
    }
    let resolved = catalog.upstreams.resolve(&request.model).ok_or_else(|| {
        ApiError::not_found(
            "model_not_found",
            format!(
                "no route serves model `{}`; GET /v1/models lists the routable models",
                request.model
            ),
        )
        .param("model")
    })?;

    if set.is_none() && request.client_tools.is_empty() {
        let body = request.proxy_body(body, &resolved.model);
        return proxy(&resolved.upstream, body).await;
    }

    // Tool mode: the set's tools, then the client's, with no name twice.
    let gateway: Vec<Arc<crate::tool::Tool>> = set
        .map(|s| catalog.tools_in(s).collect())
        .unwrap_or_default();
    let gateway_tools: HashSet<String> = gateway.iter().map(|t| t.name.clone()).collect();
    for t in &request.client_tools {
        let name = t
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if gateway_tools.contains(name) {
            return Err(ApiError::bad_request(format!(
                "the client tool `{name}` has the name of a tool of the set `{}`; rename it or pick another tool set",
                set.map(|s| s.name.as_str()).unwrap_or_default()
            ))
            .param("tools"));
        }
    }
    if request
        .get("n")
        .and_then(|n| n.as_u64())
        .is_some_and(|n| n > 1)
    {
        return Err(ApiError::bad_request(
            "`n` greater than 1 is not supported with gateway tools",
        )
        .param("n"));
    }
    let mut tools: Vec<Value> = gateway.iter().map(|t| t.to_openai()).collect();
    tools.extend(request.client_tools.iter().cloned());
    let limits = &catalog.settings;
    let max_iterations = request
        .max_tool_iterations
        .unwrap_or(limits.defaults.max_tool_iterations)
        .min(limits.limits.max_tool_iterations);
    let stream = request.stream;
    let the_loop = Loop {
        catalog: Arc::clone(&catalog),
        executor: state.executor.clone(),
        resolved,
        tool_set: set.map(|s| s.name.clone()),
        tools,
        gateway_tools,
        max_iterations,
        request,
        learned: Arc::clone(&state.learned),
        context: crate::api::call_context(&headers)?.with_tool_set(set.map(|s| s.name.clone())),
    };
    if stream {
        let events = the_loop.start_stream().await?;
        Ok(Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response())
    } else {
        Ok(axum::Json(the_loop.run().await?).into_response())
    }
}

/// Forwards a request and streams the upstream's answer back unchanged.
async fn proxy(upstream: &crate::upstream::Upstream, body: Bytes) -> Result<Response, ApiError> {
    let resp = upstream.chat(body).await?;
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::OK);
    let mut out = Response::builder().status(status);
    if let Some(ct) = resp.headers().get(reqwest::header::CONTENT_TYPE) {
        out = out.header(header::CONTENT_TYPE, ct.as_bytes());
    }
    out.body(Body::from_stream(resp.bytes_stream()))
        .map_err(|e| {
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "upstream_invalid_response",
                e.to_string(),
            )
        })
}
