//! `POST /v1/chat/completions`: picks the tool set and the route, then
//! either proxies the request untouched or runs the engine's tool loop and
//! encodes its answer (or its events, as SSE chunks) in OpenAI's format.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::response::sse::Event as SseEvent;
use serde_json::{Value, json};
use toolgate_engine::chat::{
    self, Answer, ChatError, ChatRequest, Event, FinishReason, Plan, Summary,
};
use toolgate_engine::formatter::Call;
use toolgate_engine::limits::Permit;

use super::common::{self, Admitted};
use crate::http::{ApiError, AppState, Caller, body_error};
use tracing::Instrument;

pub async fn completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let request = ChatRequest::parse(&body)?;
    let Admitted { plan, places } = common::plan_request(
        &state,
        &caller,
        &headers,
        request,
        chat::Passthrough::Allowed,
    )
    .await?;
    let the_loop = match plan {
        Plan::Proxy {
            upstream,
            model,
            request,
        } => {
            let body = request.proxy_body(body, &model);
            let span = toolgate_engine::upstream::chat_span(&upstream, &model);
            return proxy(&upstream, body, &caller.request_id, places.stream)
                .instrument(span)
                .await;
        }
        Plan::Loop(l) => *l,
    };
    let model = the_loop.request.model.clone();
    let mut chunks = Chunks::new(&model, the_loop.request.include_usage);
    // Boxed: the loop's state is large, and a proxied request (the common
    // case, and the hot one) should not carry or move it.
    Box::pin(common::respond(
        the_loop,
        places,
        |answer| completion(answer, &model),
        move |e| chunks.encode(e),
    ))
    .await
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
        choice["finish_reason"] = json!(wire_finish(&summary.finish));
    }
    completion["model"] = json!(model);
    completion["toolgate"] = common::report(&summary);
    if !summary.usage.is_null() {
        completion["usage"] = summary.usage;
    }
    completion
}

/// OpenAI's `finish_reason` for how the loop ended: a spent tool budget
/// ends with an answer, so it is `stop` (clients that see anything else
/// ask again); the precise reason is in the report.
fn wire_finish(finish: &FinishReason) -> &str {
    match finish {
        FinishReason::MaxToolIterations => "stop",
        other => other.as_str(),
    }
}

/// Encodes a loop's events as OpenAI chunks.
struct Chunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    sent_role: bool,
}

impl Chunks {
    fn new(model: &str, include_usage: bool) -> Chunks {
        Chunks {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            created: common::unix_now(),
            model: model.to_owned(),
            include_usage,
            sent_role: false,
        }
    }

    /// A chunk with `choices` (and more fields, e.g. `usage`).
    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    /// A chunk with one choice.
    fn choice(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        self.chunk(json!([{"index": 0, "delta": delta, "finish_reason": finish_reason}]))
    }

    fn encode(&mut self, event: Event) -> Vec<SseEvent> {
        match event {
            Event::Content(t) => vec![self.delta(json!({"content": t}))],
            Event::Reasoning(t) => vec![self.delta(json!({"reasoning_content": t}))],
            // OpenAI's format has no place for the gateway's own calls; the
            // last chunk's `toolgate` report lists them.
            Event::ToolCallStarted(_) | Event::ToolCallDone(_) => Vec::new(),
            // Nor for a tool's progress: an SSE comment, which clients
            // skip, with the report as JSON for those that read it.
            Event::ToolProgress(p) => vec![progress_comment(&p)],
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
        data_event(&self.choice(delta, None))
    }

    /// The last chunk (finish reason, report), the usage chunk when asked
    /// for, and `[DONE]`.
    fn done(&mut self, summary: Summary) -> Vec<SseEvent> {
        let mut delta = json!({});
        if !self.sent_role {
            delta["role"] = json!("assistant");
            delta["content"] = json!("");
        }
        let mut last = self.choice(delta, Some(wire_finish(&summary.finish)));
        last["toolgate"] = common::report(&summary);
        let mut out = vec![data_event(&last)];
        if self.include_usage && !summary.usage.is_null() {
            let mut usage = self.chunk(json!([]));
            usage["usage"] = summary.usage;
            out.push(data_event(&usage));
        }
        out.push(SseEvent::default().data("[DONE]"));
        out
    }
}

fn data_event(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// `: toolgate.progress {"call_id": …, "tool": …, "progress": …, "total": …, "message": …}`
fn progress_comment(p: &toolgate_engine::executor::CallProgress) -> SseEvent {
    let report = json!({
        "call_id": p.call_id,
        "tool": p.tool,
        "progress": p.progress.progress,
        "total": p.progress.total,
        "message": p.progress.message,
    });
    // A comment is one line: the JSON has no raw newline in it.
    SseEvent::default().comment(format!("toolgate.progress {report}"))
}

/// An error in the middle of a stream: the status is already sent, so the
/// error travels as an OpenAI error object in a data event (the SDKs raise
/// it as an API error).
fn error_event(e: &ChatError) -> SseEvent {
    tracing::warn!("stream failed: {e}");
    data_event(&json!({"error": {"message": e.to_string(), "type": "api_error", "code": e.code()}}))
}

/// Forwards a request and passes the upstream's answer back unchanged:
/// status, content type and body, with its length when it has one (a
/// stream stays a stream). `guard` (a stream's place under the cap) is
/// held until the body ends.
async fn proxy(
    upstream: &toolgate_engine::upstream::Upstream,
    body: Bytes,
    request_id: &str,
    guard: Option<Permit>,
) -> Result<Response, ApiError> {
    let reply = upstream.chat_with(body, Some(request_id)).await?;
    let status = reply.response.status();
    let content_type = reply.response.headers().get(header::CONTENT_TYPE).cloned();
    // Not size-capped (nothing is buffered); the upstream's read timeout
    // and total deadline still end a trickling answer.
    let body = upstream.body(reply, usize::MAX);
    let mut out = Response::new(Body::new(Held {
        body,
        _guard: guard,
    }));
    *out.status_mut() = status;
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    Ok(out)
}

/// A body that holds a place under the stream cap until it is dropped.
struct Held<B> {
    body: B,
    _guard: Option<Permit>,
}

impl<B: http_body::Body + Unpin> http_body::Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
