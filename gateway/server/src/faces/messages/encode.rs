//! The loop's answer as a Messages response, and its events as
//! Anthropic's stream events.

use axum::response::sse::Event as SseEvent;
use serde_json::{Value, json};
use toolgate_engine::chat::{Answer, CallRecord, ChatError, Event, FinishReason};
use toolgate_engine::conversation::{Call, Opaque, Protocol, Reasoning, Usage};

use super::super::common;
use super::SERVER_NAME;

/// Anthropic's `stop_reason` for how the loop ended (a spent tool budget
/// ends with an answer: `end_turn`; the precise reason is in the report).
fn stop_reason(finish: &FinishReason) -> &str {
    match finish {
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
        // A reason of Anthropic's own the engine has no name for.
        FinishReason::Other(r) if matches!(r.as_str(), "pause_turn" | "compaction") => r,
        _ => "end_turn",
    }
}

/// Usage as Messages writes it: the model's own when every call spoke
/// Messages, else from the counts (its `input_tokens` leave out what was
/// read from or written to the cache).
fn usage(usage: &Usage) -> Value {
    if let Some(native) = usage.native_of(Protocol::Anthropic) {
        return native.clone();
    }
    let mut u = json!({
        "input_tokens": usage.input.saturating_sub(usage.cache_read + usage.cache_write),
        "output_tokens": usage.output,
    });
    if usage.cache_read > 0 || usage.cache_write > 0 {
        u["cache_read_input_tokens"] = json!(usage.cache_read);
        u["cache_creation_input_tokens"] = json!(usage.cache_write);
    }
    u
}

/// A reasoning as a thinking block, when a model of Messages made it
/// (its signature with it); another protocol's has no place here.
fn thinking_block(r: &Reasoning) -> Option<Value> {
    match &r.opaque {
        Some(o) if o.protocol == Protocol::Anthropic => Some(redacted_or_thinking(o, &r.text)),
        _ => None,
    }
}

fn redacted_or_thinking(o: &Opaque, text: &str) -> Value {
    if o.redacted {
        json!({"type": "redacted_thinking", "data": o.data})
    } else {
        json!({"type": "thinking", "thinking": text, "signature": o.data})
    }
}

fn tool_use(c: &Call) -> Value {
    let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
}

fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

/// A gateway tool call as Anthropic shows a tool it ran: `mcp_tool_use`.
fn mcp_tool_use(id: &str, name: &str, arguments: &str) -> Value {
    let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "mcp_tool_use", "id": id, "name": name, "server_name": SERVER_NAME, "input": input})
}

/// Which of the gateway's own calls a client is shown.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Every call, as `mcp_tool_use` / `mcp_tool_result` (the beta surface).
    pub calls: bool,
    /// The search of the client's deferred tools, always shown as
    /// Anthropic's own (`server_tool_use` / `tool_search_tool_result`), so
    /// the client keeps what it loaded.
    pub search: Option<String>,
    /// The model's thinking, with its signature (a model of Messages made
    /// it, and the client can send it back).
    pub thinking: bool,
}

impl Shown {
    fn is_search(&self, name: &str) -> bool {
        self.search.as_deref() == Some(name)
    }

    fn shows(&self, name: &str) -> bool {
        self.calls || self.is_search(name)
    }

    /// The block that opens a gateway call.
    fn call_block(&self, id: &str, name: &str, arguments: &str) -> Value {
        if self.is_search(name) {
            let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
            return json!({"type": "server_tool_use", "id": id, "name": name, "input": input});
        }
        mcp_tool_use(id, name, arguments)
    }

    /// The block of a gateway call's result.
    fn result_block(&self, record: &CallRecord) -> Value {
        if !self.is_search(&record.function.name) {
            return mcp_tool_result(record);
        }
        let content = if record.success {
            let references: Vec<Value> =
                toolgate_engine::tools::discovery::found_names(&record.result)
                    .map(|n| json!({"type": "tool_reference", "tool_name": n}))
                    .collect();
            json!({"type": "tool_search_tool_search_result", "tool_references": references})
        } else {
            json!({"type": "tool_search_tool_result_error", "error_code": "invalid_tool_input"})
        };
        json!({"type": "tool_search_tool_result", "tool_use_id": record.id, "content": content})
    }
}

/// A gateway tool call's result as `mcp_tool_result`.
fn mcp_tool_result(record: &CallRecord) -> Value {
    let text = match &record.result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    json!({"type": "mcp_tool_result", "tool_use_id": record.id, "is_error": !record.success,
           "content": [{"type": "text", "text": text}]})
}

/// A whole answer as a Messages response: the gateway's own tool calls
/// and their results first (as `mcp_tool_use` / `mcp_tool_result`, when
/// `show_calls`), then the answer's text and the client's tool calls.
pub fn message(answer: Answer, model: &str, shown: &Shown) -> Value {
    let mut content = Vec::new();
    for record in &answer.summary.report.tool_calls {
        if !shown.shows(&record.function.name) {
            continue;
        }
        content.push(shown.call_block(
            &record.id,
            &record.function.name,
            &record.function.arguments,
        ));
        content.push(shown.result_block(record));
    }
    content.extend(answer.reasoning_items.iter().filter_map(thinking_block));
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
pub struct StreamEncoder {
    id: String,
    model: String,
    /// `message_start` was sent.
    started: bool,
    /// The index of the next content block.
    next_block: usize,
    /// A text block is open.
    text_open: bool,
    /// A thinking block is open.
    thinking_open: bool,
    /// Which gateway calls are shown as blocks.
    shown: Shown,
}

impl StreamEncoder {
    pub fn new(model: &str, shown: Shown) -> StreamEncoder {
        StreamEncoder {
            id: message_id(),
            model: model.to_owned(),
            started: false,
            next_block: 0,
            text_open: false,
            thinking_open: false,
            shown,
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

    /// A block sent whole: its start (with all its content) and its stop.
    fn whole_block(&mut self, block: Value, out: &mut Vec<SseEvent>) {
        let index = self.next_block;
        self.next_block += 1;
        out.push(Self::event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        out.push(Self::event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }

    /// Closes an open thinking block (a model that sent no signature:
    /// the block ends as it is).
    fn close_thinking(&mut self, out: &mut Vec<SseEvent>) {
        if self.thinking_open {
            self.thinking_open = false;
            out.push(Self::event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next_block - 1}),
            ));
        }
    }

    fn close_text(&mut self, out: &mut Vec<SseEvent>) {
        self.close_thinking(out);
        if self.text_open {
            self.text_open = false;
            out.push(Self::event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next_block - 1}),
            ));
        }
    }

    pub fn encode(&mut self, event: Event) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.start());
        }
        match event {
            // Thinking, as the model wrote it, when it is Anthropic's.
            Event::Reasoning(text) if self.shown.thinking => {
                if self.text_open {
                    self.close_text(&mut out);
                }
                if !self.thinking_open {
                    self.thinking_open = true;
                    out.push(Self::event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": self.next_block,
                               "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                    ));
                    self.next_block += 1;
                }
                out.push(Self::event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.next_block - 1,
                           "delta": {"type": "thinking_delta", "thinking": text}}),
                ));
            }
            Event::ReasoningOpaque(o)
                if self.shown.thinking && o.protocol == Protocol::Anthropic =>
            {
                if self.thinking_open {
                    out.push(Self::event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": self.next_block - 1,
                               "delta": {"type": "signature_delta", "signature": o.data}}),
                    ));
                    self.close_thinking(&mut out);
                } else {
                    self.close_text(&mut out);
                    self.whole_block(
                        json!({"type": "redacted_thinking", "data": o.data}),
                        &mut out,
                    );
                }
            }
            Event::Content(text) => {
                self.close_thinking(&mut out);
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
            // Reasoning of another protocol has no signed thinking block
            // to go in.
            Event::Reasoning(_) | Event::ReasoningOpaque(_) | Event::ToolProgress(_) => {}
            Event::ToolCallStarted(call) if !self.shown.shows(&call.name) => {}
            Event::ToolCallDone(record) if !self.shown.shows(&record.function.name) => {}
            // The gateway's own calls, as Anthropic shows tools it runs.
            Event::ToolCallStarted(call) => {
                self.close_text(&mut out);
                let block = self.shown.call_block(&call.id, &call.name, &call.arguments);
                self.whole_block(block, &mut out);
            }
            Event::ToolCallDone(record) => {
                self.close_text(&mut out);
                let block = self.shown.result_block(&record);
                self.whole_block(block, &mut out);
            }
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
