//! The loop's answer as a chat completion, and its events as
//! `chat.completion.chunk`s.

use axum::response::sse::Event as SseEvent;
use serde_json::{Value, json};
use toolgate_engine::chat::{Answer, ChatError, Event, FinishReason, Summary};
use toolgate_engine::conversation::{Protocol, Usage};
use toolgate_engine::model::protocol::openai_chat::call_json;

use super::super::common;

/// A whole answer as a chat completion: the upstream's last completion
/// with the loop's message, finish reason, summed usage and report.
pub fn completion(answer: Answer, model: &str) -> Value {
    let Answer {
        envelope,
        content,
        reasoning,
        client_calls,
        summary,
        ..
    } = answer;
    // The model's own completion when it speaks chat completions (its id,
    // times, fingerprint), else one of the gateway's.
    let mut completion = match envelope {
        Some(e) if e.protocol == Protocol::OpenaiChat => e.value,
        _ => json!({
            "id": format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            "object": "chat.completion",
            "created": common::unix_now(),
            "choices": [{"index": 0, "logprobs": null}],
        }),
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !client_calls.is_empty() {
        message["tool_calls"] = Value::Array(client_calls.iter().map(call_json).collect());
    }
    if let Some(r) = reasoning {
        message["reasoning_content"] = json!(r);
    }
    // The engine checked that `choices[0].message` exists.
    if let Some(choice) = completion.get_mut("choices").and_then(|c| c.get_mut(0)) {
        choice["message"] = message;
        choice["finish_reason"] = json!(wire_finish(&summary.finish));
    }
    completion["model"] = json!(model);
    completion["toolgate"] = common::report(&summary);
    if let Some(usage) = usage(&summary.usage) {
        completion["usage"] = usage;
    }
    completion
}

/// Usage as chat completions writes it: the model's own when every call
/// spoke it, else from the counts.
pub fn usage(usage: &Usage) -> Option<Value> {
    if usage.is_empty() {
        return None;
    }
    if let Some(native) = usage.native_of(Protocol::OpenaiChat) {
        return Some(native.clone());
    }
    let mut u = json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.total(),
    });
    if usage.cache_read > 0 {
        u["prompt_tokens_details"] = json!({"cached_tokens": usage.cache_read});
    }
    if usage.reasoning > 0 {
        u["completion_tokens_details"] = json!({"reasoning_tokens": usage.reasoning});
    }
    Some(u)
}

/// OpenAI's `finish_reason` for how the loop ended: a spent tool or
/// spending budget ends with an answer, so it is `stop` (clients that see
/// anything else ask again); the precise reason is in the report.
fn wire_finish(finish: &FinishReason) -> &str {
    match finish {
        FinishReason::MaxToolIterations | FinishReason::BudgetExceeded => "stop",
        other => other.as_str(),
    }
}

/// Encodes a loop's events as OpenAI chunks.
pub struct Chunks {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    sent_role: bool,
}

impl Chunks {
    pub fn new(model: &str, include_usage: bool) -> Chunks {
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

    pub fn encode(&mut self, event: Event) -> Vec<SseEvent> {
        match event {
            Event::Content(t) => vec![self.delta(json!({"content": t}))],
            Event::Reasoning(t) => vec![self.delta(json!({"reasoning_content": t}))],
            // Only the model's protocol can read its opaque state.
            Event::ReasoningOpaque(_) => Vec::new(),
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
        if self.include_usage
            && let Some(u) = usage(&summary.usage)
        {
            let mut chunk = self.chunk(json!([]));
            chunk["usage"] = u;
            out.push(data_event(&chunk));
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
