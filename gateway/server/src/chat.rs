//! `POST /v1/chat/completions`: picks the tool set and the route, then
//! either proxies the request untouched or runs the engine's tool loop and
//! encodes its answer (or its events, as SSE chunks) in OpenAI's format.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_engine::chat::{Answer, ChatError, ChatRequest, Event, Loop, Summary};
use toolgate_engine::formatter::Call;
use toolgate_engine::limits::Permit;
use toolgate_engine::openai::ChunkBuilder;

use crate::api::{ApiError, AppState, Caller, body_error};

/// The header that picks a tool set when the body does not.
pub const TOOL_SET_HEADER: &str = "x-tool-set";
/// The tool-set name that turns gateway tools off for one request.
pub const NO_TOOL_SET: &str = "none";

pub async fn completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match handle(state, caller, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle(
    state: AppState,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let mut request = ChatRequest::parse(&body)?;
    let catalog = state.catalog();
    let max_messages = catalog.settings.limits.max_messages;
    let messages = request
        .raw
        .get("messages")
        .and_then(|m| serde_json::from_str::<Vec<&serde_json::value::RawValue>>(m.get()).ok())
        .map_or(0, |m| m.len());
    if messages > max_messages {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_messages",
            format!(
                "the request has {messages} messages; this gateway accepts at most {max_messages} (limits.max_messages)"
            ),
        )
        .param("messages"));
    }

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
        Some(name) => Some(catalog.usable_set(name, caller.key.as_deref())?),
        // A key's own default (resolved against the catalog's when the key
        // was validated), else the catalog's.
        None => match &caller.key {
            Some(key) => key.default_tool_set.as_deref().and_then(|n| catalog.set(n)),
            None => catalog.default_set(),
        },
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

    let limits = &catalog.settings.limits;
    let stream_guard = if request.stream {
        Some(
            state
                .guards
                .enter_stream(limits, caller.key.as_deref())
                .map_err(overloaded)?,
        )
    } else {
        None
    };

    if set.is_none() && request.client_tools.is_empty() {
        let body = request.proxy_body(body, &resolved.model);
        return proxy(&resolved.upstream, body, &caller.request_id, stream_guard).await;
    }

    // Tool mode: the set's tools, then the client's, with no name twice.
    let gateway: Vec<Arc<toolgate_engine::tool::Tool>> = set
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
    let loop_guard = state
        .guards
        .enter_loop(limits, caller.key.as_deref())
        .map_err(overloaded)?;
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
        guards: Arc::clone(&state.guards),
        key: caller.key.clone(),
        context: crate::api::call_context(&headers, &caller)?
            .with_tool_set(set.map(|s| s.name.clone())),
    };
    let model = the_loop.request.model.clone();
    if stream {
        let include_usage = the_loop.request.include_usage;
        let events = the_loop.start_stream().await?;
        // The guards are held until the stream ends (or the client leaves).
        let guards = (loop_guard, stream_guard);
        let mut chunks = Chunks::new(&model, include_usage);
        let events = futures::StreamExt::flat_map(events, move |e| {
            let _held = &guards;
            futures::stream::iter(chunks.encode(e).into_iter().map(Ok::<_, Infallible>))
        });
        Ok(Sse::new(events)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response())
    } else {
        let answer = the_loop.run().await?;
        drop(loop_guard);
        Ok(axum::Json(completion(answer, &model)).into_response())
    }
}

/// A whole answer as a chat completion: the upstream's last completion
/// with the loop's message, finish reason, summed usage and report.
fn completion(answer: Answer, model: &str) -> Value {
    let Answer {
        mut completion,
        content,
        reasoning,
        client_calls,
        summary,
    } = answer;
    let mut message = json!({"role": "assistant", "content": content});
    if !client_calls.is_empty() {
        message["tool_calls"] = Value::Array(client_calls.iter().map(Call::to_openai).collect());
    }
    if let Some(r) = reasoning {
        message["reasoning_content"] = json!(r);
    }
    // The engine checked that `choices[0].message` exists.
    if let Some(choice) = completion.pointer_mut("/choices/0") {
        choice["message"] = message;
        choice["finish_reason"] = json!(summary.finish.as_str());
    }
    completion["model"] = json!(model);
    if !summary.usage.is_null() {
        completion["usage"] = summary.usage;
    }
    completion["toolgate"] = json!(summary.report);
    completion
}

/// Encodes a loop's events as OpenAI chunks.
struct Chunks {
    builder: ChunkBuilder,
    include_usage: bool,
    sent_role: bool,
}

impl Chunks {
    fn new(model: &str, include_usage: bool) -> Chunks {
        Chunks {
            builder: ChunkBuilder::new(model),
            include_usage,
            sent_role: false,
        }
    }

    fn encode(&mut self, event: Event) -> Vec<SseEvent> {
        match event {
            Event::Content(t) => vec![self.delta(json!({"content": t}))],
            Event::Reasoning(t) => vec![self.delta(json!({"reasoning_content": t}))],
            // OpenAI's format has no place for the gateway's own calls; the
            // last chunk's `toolgate` report lists them.
            Event::ToolCallStarted(_) | Event::ToolCallDone(_) => Vec::new(),
            Event::ClientCalls(calls) => {
                let deltas: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        json!({"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect();
                vec![self.delta(json!({"tool_calls": deltas}))]
            }
            Event::Done(summary) => self.done(*summary),
            Event::Failed(e) => vec![error_event(&e)],
        }
    }

    /// A delta chunk; the first of a response carries `role: assistant`.
    fn delta(&mut self, mut delta: Value) -> SseEvent {
        if !self.sent_role {
            delta["role"] = json!("assistant");
            self.sent_role = true;
        }
        data_event(&self.builder.delta(delta, None))
    }

    /// The last chunk (finish reason, report), the usage chunk when asked
    /// for, and `[DONE]`.
    fn done(&mut self, summary: Summary) -> Vec<SseEvent> {
        let mut delta = json!({});
        if !self.sent_role {
            delta["role"] = json!("assistant");
            delta["content"] = json!("");
        }
        let mut last = self.builder.delta(delta, Some(summary.finish.as_str()));
        last["toolgate"] = json!(summary.report);
        let mut out = vec![data_event(&last)];
        if self.include_usage && !summary.usage.is_null() {
            out.push(data_event(&self.builder.usage(&summary.usage)));
        }
        out.push(SseEvent::default().data("[DONE]"));
        out
    }
}

fn data_event(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// An error in the middle of a stream: the status is already sent, so the
/// error travels as an OpenAI error object in a data event (the SDKs raise
/// it as an API error).
fn error_event(e: &ChatError) -> SseEvent {
    tracing::warn!("stream failed: {e}");
    data_event(&json!({"error": {"message": e.to_string(), "type": "api_error", "code": e.code()}}))
}

/// 503 with `Retry-After` for a request over a concurrency cap.
fn overloaded(full: toolgate_engine::limits::Full) -> ApiError {
    toolgate_engine::metrics::record(|m| m.reject(full.code));
    let mut err = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, full.code, full.message);
    err.retry_after = Some(1);
    err
}

/// Forwards a request and streams the upstream's answer back unchanged.
/// `guard` (a stream's place under the cap) is held until the body ends.
async fn proxy(
    upstream: &toolgate_engine::upstream::Upstream,
    body: Bytes,
    request_id: &str,
    guard: Option<Permit>,
) -> Result<Response, ApiError> {
    let reply = upstream.chat_with(body, Some(request_id)).await?;
    let status = StatusCode::from_u16(reply.response.status().as_u16()).unwrap_or(StatusCode::OK);
    let mut out = Response::builder().status(status);
    if let Some(ct) = reply.response.headers().get(reqwest::header::CONTENT_TYPE) {
        out = out.header(header::CONTENT_TYPE, ct.as_bytes());
    }
    // Not buffered, so not size-capped; the upstream's total deadline
    // still ends a trickling answer.
    let body = upstream.body_stream(reply, usize::MAX);
    let chunks = futures::StreamExt::map(body, move |chunk| {
        let _held = &guard;
        chunk
    });
    out.body(Body::from_stream(chunks)).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_invalid_response",
            e.to_string(),
        )
    })
}
