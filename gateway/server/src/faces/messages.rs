//! `POST /v1/messages`: Anthropic's Messages API as a face of the same tool
//! loop. The request is translated to the chat-completions request the
//! engine runs (system, text, `tool_use` and `tool_result` blocks, client
//! tools, `tool_choice`), the tool set is picked as for chat completions,
//! and the loop's answer or events are encoded as a message or as
//! Anthropic's stream events. Errors use Anthropic's error body.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use toolgate_engine::chat::{Answer, ChatError, Event, FinishReason};
use toolgate_engine::formatter::Call;

use super::common;
use crate::http::{ApiError, AppState, Caller, body_error};

pub async fn messages(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, caller, headers, body)
        .await
        .unwrap_or_else(anthropic_error)
}

async fn handle(
    state: AppState,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let (_, the_loop, places) =
        common::plan_translated(&state, &caller, &headers, &body, to_chat_request)?;
    let model = the_loop.request.model.clone();
    let mut encoder = StreamEncoder::new(&model);
    common::respond(
        the_loop,
        places,
        |answer| message(answer, &model),
        move |e| encoder.encode(e),
    )
    .await
}

/// Translates a Messages request into the chat-completions request the
/// engine runs. Fields the engine does not know are not forwarded.
fn to_chat_request(req: &Value) -> Result<Map<String, Value>, ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    let mut out = Map::new();
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?;
    out.insert("model".into(), json!(model));
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(system) => {
            let text =
                text_of(system, "system").map_err(|e| ApiError::bad_request(e).param("system"))?;
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let input = obj
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("`messages` is required and must be a non-empty array")
                .param("messages")
        })?;
    for (i, m) in input.iter().enumerate() {
        translate_message(m, &mut messages)
            .map_err(|e| ApiError::bad_request(format!("messages[{i}]: {e}")).param("messages"))?;
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = obj.get("tools").and_then(Value::as_array) {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t["name"],
                    "description": t.get("description").cloned().unwrap_or(json!("")),
                    "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
                }})
            })
            .collect();
        if !tools.is_empty() {
            out.insert("tools".into(), Value::Array(tools));
        }
    }
    if let Some(choice) = obj.get("tool_choice").filter(|c| !c.is_null()) {
        let translated = match choice["type"].as_str() {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": choice["name"]}}),
            _ => {
                return Err(ApiError::bad_request(
                    "`tool_choice.type` must be auto, any, tool or none",
                )
                .param("tool_choice"));
            }
        };
        out.insert("tool_choice".into(), translated);
        if choice["disable_parallel_tool_use"] == json!(true) {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    Ok(common::chat_request(
        obj,
        out,
        &[("max_tokens", "max_tokens"), ("stop_sequences", "stop")],
    ))
}

/// One Messages message as chat messages: a user message's `tool_result`
/// blocks become tool messages (first, as they answer the calls before),
/// its text a user message; an assistant message's `tool_use` blocks
/// become its `tool_calls`.
fn translate_message(m: &Value, out: &mut Vec<Value>) -> Result<(), String> {
    let role = m["role"].as_str().ok_or("`role` is required")?;
    let blocks: Vec<Value> = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => return Err("`content` must be a string or an array of blocks".into()),
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for b in &blocks {
        match (role, b["type"].as_str()) {
            (_, Some("text")) => text.push_str(b["text"].as_str().unwrap_or_default()),
            ("assistant", Some("tool_use")) => calls.push(json!({
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": b["input"].to_string()},
            })),
            ("user", Some("tool_result")) => {
                let mut content = text_of(&b["content"], "tool_result.content")?;
                if b["is_error"] == json!(true) {
                    content = format!("Error: {content}");
                }
                out.push(
                    json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": content}),
                );
            }
            // Thinking and other blocks carry nothing the upstream reads.
            _ => {}
        }
    }
    match role {
        "user" => {
            if !text.is_empty() {
                out.push(json!({"role": "user", "content": text}));
            }
        }
        "assistant" => {
            let mut msg =
                json!({"role": "assistant", "content": (!text.is_empty()).then_some(text)});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            out.push(msg);
        }
        other => return Err(format!("role {other:?} is neither user nor assistant")),
    }
    Ok(())
}

/// The text of a string or of an array of text blocks.
fn text_of(v: &Value, what: &str) -> Result<String, String> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => Ok(blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")),
        _ => Err(format!(
            "`{what}` must be a string or an array of text blocks"
        )),
    }
}

/// Anthropic's `stop_reason` for how the loop ended (a spent tool budget
/// ends with an answer: `end_turn`; the precise reason is in the report).
fn stop_reason(finish: &FinishReason) -> &'static str {
    match finish {
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        _ => "end_turn",
    }
}

fn usage(usage: &Value) -> Value {
    json!({
        "input_tokens": usage["prompt_tokens"].as_u64().unwrap_or(0),
        "output_tokens": usage["completion_tokens"].as_u64().unwrap_or(0),
    })
}

fn tool_use(c: &Call) -> Value {
    let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
}

fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

/// A whole answer as a Messages response.
fn message(answer: Answer, model: &str) -> Value {
    let mut content = Vec::new();
    if let Some(text) = answer.content.filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    content.extend(answer.client_calls.iter().map(tool_use));
    let summary = answer.summary;
    json!({
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(&summary.finish),
        "stop_sequence": null,
        "usage": usage(&summary.usage),
        "toolgate": common::report(&summary),
    })
}

/// Encodes a loop's events as Anthropic's stream events.
struct StreamEncoder {
    id: String,
    model: String,
    /// `message_start` was sent.
    started: bool,
    /// The index of the next content block.
    next_block: usize,
    /// A text block is open.
    text_open: bool,
}

impl StreamEncoder {
    fn new(model: &str) -> StreamEncoder {
        StreamEncoder {
            id: message_id(),
            model: model.to_owned(),
            started: false,
            next_block: 0,
            text_open: false,
        }
    }

    fn event(name: &str, data: Value) -> SseEvent {
        SseEvent::default().event(name).data(data.to_string())
    }

    fn start(&self) -> SseEvent {
        Self::event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        )
    }

    fn close_text(&mut self, out: &mut Vec<SseEvent>) {
        if self.text_open {
            self.text_open = false;
            out.push(Self::event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next_block - 1}),
            ));
        }
    }

    fn encode(&mut self, event: Event) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.start());
        }
        match event {
            Event::Content(text) => {
                if !self.text_open {
                    self.text_open = true;
                    out.push(Self::event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": self.next_block,
                               "content_block": {"type": "text", "text": ""}}),
                    ));
                    self.next_block += 1;
                }
                out.push(Self::event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.next_block - 1,
                           "delta": {"type": "text_delta", "text": text}}),
                ));
            }
            // Reasoning has no signed thinking block to go in; the gateway's
            // own calls are in the report.
            Event::Reasoning(_)
            | Event::ToolCallStarted(_)
            | Event::ToolProgress(_)
            | Event::ToolCallDone(_) => {}
            Event::ClientCalls(calls) => {
                self.close_text(&mut out);
                for c in &calls {
                    let index = self.next_block;
                    self.next_block += 1;
                    out.push(Self::event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
                    ));
                    out.push(Self::event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": c.arguments}}),
                    ));
                    out.push(Self::event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ));
                }
            }
            Event::Done(summary) => {
                self.close_text(&mut out);
                let mut delta = json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason(&summary.finish), "stop_sequence": null},
                    "usage": usage(&summary.usage)});
                delta["toolgate"] = common::report(&summary);
                out.push(Self::event("message_delta", delta));
                out.push(Self::event("message_stop", json!({"type": "message_stop"})));
            }
            Event::Failed(e) => out.push(stream_error(&e)),
        }
        out
    }
}

/// A failure after the stream started: Anthropic's `error` event.
fn stream_error(e: &ChatError) -> SseEvent {
    tracing::warn!("stream failed: {e}");
    StreamEncoder::event(
        "error",
        json!({"type": "error", "error": {"type": "api_error", "message": e.to_string()}}),
    )
}

/// An error in Anthropic's form: `{"type": "error", "error": {"type",
/// "message"}}`, with the same status.
fn anthropic_error(e: ApiError) -> Response {
    let kind = match e.status.as_u16() {
        400 | 405 | 408 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    };
    let retry_after = e.retry_after;
    let mut resp = (
        e.status,
        axum::Json(json!({"type": "error", "error": {"type": kind, "message": e.message}})),
    )
        .into_response();
    if let Some(secs) = retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_translate_to_chat_completions() {
        let req = json!({
            "model": "m", "max_tokens": 100, "system": "be brief",
            "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "tu1", "name": "t", "input": {"a": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "42"}]},
                    {"type": "text", "text": "thanks"}]},
            ],
        });
        let out = Value::Object(to_chat_request(&req).unwrap());
        assert_eq!(out["tool_choice"], "required");
        assert_eq!(
            out["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "tu1", "content": "42"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "thanks"}));
        let bad = json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]});
        let e = to_chat_request(&bad).unwrap_err();
        assert!(e.message.contains("messages[0]"), "{}", e.message);
    }
}
