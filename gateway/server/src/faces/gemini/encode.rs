//! The loop's answer as a `GenerateContentResponse`, and its events as
//! the partial responses of a stream (each holding only its new parts).
//!
//! The Gemini API has no part for a tool the server ran (its own code
//! execution aside), so the gateway's own calls are in the `toolgate`
//! field only. Thought summaries are shown when the request asked for them
//! (`thinkingConfig.includeThoughts`); thought signatures go back on the
//! part they came on, when a model of Gemini made them.

use serde_json::{Value, json};
use toolgate_engine::chat::{Answer, ChatError, Event, FinishReason};
use toolgate_engine::conversation::{Call, Protocol, Reasoning, Usage};

use super::super::common;
use crate::http::ApiError;
use toolgate_engine::model::protocol::Envelope;
use toolgate_engine::model::protocol::gemini::MADE_ID;

/// What the client asked to see, and the names of its answer.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Thought summaries (`includeThoughts`).
    pub thoughts: bool,
    /// The model as the client named it (`modelVersion`).
    pub model: String,
    pub response_id: String,
}

impl Shown {
    pub fn new(model: &str, thoughts: bool) -> Shown {
        Shown {
            thoughts,
            model: model.to_owned(),
            response_id: uuid::Uuid::new_v4().simple().to_string(),
        }
    }
}

/// Gemini's `finishReason` for how the loop ended.
fn finish_reason(finish: &FinishReason) -> &str {
    match finish {
        FinishReason::Length => "MAX_TOKENS",
        FinishReason::ContentFilter => "SAFETY",
        FinishReason::Other(r)
            if matches!(
                r.as_str(),
                "RECITATION"
                    | "LANGUAGE"
                    | "BLOCKLIST"
                    | "PROHIBITED_CONTENT"
                    | "SPII"
                    | "MALFORMED_FUNCTION_CALL"
                    | "IMAGE_SAFETY"
                    | "UNEXPECTED_TOOL_CALL"
                    | "TOO_MANY_TOOL_CALLS"
            ) =>
        {
            r
        }
        _ => "STOP",
    }
}

/// Usage as Gemini writes it: the model's own when every call spoke
/// Gemini, else from the counts (candidates without the thoughts).
pub fn usage(usage: &Usage) -> Value {
    if let Some(native) = usage.native_of(Protocol::Gemini) {
        return native.clone();
    }
    let candidates = usage.output.saturating_sub(usage.reasoning);
    let mut u = json!({
        "promptTokenCount": usage.input,
        "candidatesTokenCount": candidates,
        "totalTokenCount": usage.input + usage.output,
    });
    if usage.reasoning > 0 {
        u["thoughtsTokenCount"] = json!(usage.reasoning);
    }
    if usage.cache_read > 0 {
        u["cachedContentTokenCount"] = json!(usage.cache_read);
    }
    u
}

/// A call of the client's tool as a `functionCall` part (its signature on
/// it when a model of Gemini made one). An id the gateway made for a call
/// that came without one is not shown: Google's clients pair a call and
/// its response by name, or by an id of their own.
fn call_part(c: &Call) -> Value {
    let mut call = json!({"name": c.name, "args": c.arguments_value()});
    if !c.id.starts_with(MADE_ID) {
        call["id"] = json!(c.id);
    }
    let mut part = json!({ "functionCall": call });
    if let Some(o) = c.opaque.as_ref().filter(|o| o.protocol == Protocol::Gemini) {
        part["thoughtSignature"] = json!(o.data);
    }
    part
}

/// Reasoning as parts: its words as a thought (when shown), its signature
/// (a Gemini model's) on it or on an empty part.
fn reasoning_parts(r: &Reasoning, shown: &Shown) -> Vec<Value> {
    let signature = r
        .opaque
        .as_ref()
        .filter(|o| o.protocol == Protocol::Gemini)
        .map(|o| o.data.clone());
    let mut parts = Vec::new();
    if shown.thoughts && !r.text.is_empty() {
        let mut p = json!({"text": r.text, "thought": true});
        if let Some(s) = &signature {
            p["thoughtSignature"] = json!(s);
        }
        parts.push(p);
    } else if let Some(s) = signature {
        parts.push(json!({"text": "", "thoughtSignature": s}));
    }
    parts
}

/// A partial or whole response around `parts`.
fn response(shown: &Shown, parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    json!({"candidates": [candidate], "modelVersion": shown.model, "responseId": shown.response_id})
}

/// The parts of a Gemini model's last answer as it wrote them, without
/// the calls the gateway ran (a signature on one of them moves to the
/// first call kept, where the API expects it), and without thoughts the
/// client did not ask for.
fn upstream_parts(envelope: &Value, client_calls: &[Call], shown: &Shown) -> Option<Vec<Value>> {
    let parts = envelope["candidates"][0]["content"]["parts"].as_array()?;
    let mut out = Vec::with_capacity(parts.len());
    let mut moved_signature = None;
    for p in parts {
        if let Some(f) = p.get("functionCall") {
            let name = f["name"].as_str().unwrap_or_default();
            if !client_calls.iter().any(|c| c.name == name) {
                if moved_signature.is_none() {
                    moved_signature = p.get("thoughtSignature").cloned();
                }
                continue;
            }
            let mut p = p.clone();
            if p.get("thoughtSignature").is_none()
                && let Some(s) = moved_signature.take()
            {
                p["thoughtSignature"] = s;
            }
            out.push(p);
            continue;
        }
        if p["thought"] == json!(true) && !shown.thoughts {
            if let Some(s) = p.get("thoughtSignature") {
                out.push(json!({"text": "", "thoughtSignature": s}));
            }
            continue;
        }
        out.push(p.clone());
    }
    Some(out)
}

/// A whole answer as a `GenerateContentResponse`.
pub fn whole(mut answer: Answer, shown: &Shown) -> Value {
    let envelope = answer.envelope.take().and_then(Envelope::read);
    let from_upstream = envelope
        .as_ref()
        .filter(|e| e.protocol == Protocol::Gemini)
        .and_then(|e| upstream_parts(&e.value, &answer.client_calls, shown));
    let parts = match from_upstream {
        Some(parts) => parts,
        None => {
            let mut parts: Vec<Value> = answer
                .reasoning_items
                .iter()
                .filter(|r| !r.text.is_empty())
                .flat_map(|r| reasoning_parts(r, shown))
                .collect();
            if let Some(text) = answer.content.as_ref().filter(|t| !t.is_empty()) {
                parts.push(json!({"text": text}));
            }
            parts.extend(answer.client_calls.iter().map(call_part));
            // A signature on the text (no words of its own) ends it.
            parts.extend(
                answer
                    .reasoning_items
                    .iter()
                    .filter(|r| r.text.is_empty())
                    .flat_map(|r| reasoning_parts(r, shown)),
            );
            parts
        }
    };
    let summary = answer.summary;
    let mut out = response(shown, parts, Some(finish_reason(&summary.finish)));
    out["usageMetadata"] = usage(&summary.usage);
    out["toolgate"] = common::report(&summary);
    out
}

/// A loop's events as partial responses.
pub struct StreamEncoder {
    shown: Shown,
}

impl StreamEncoder {
    pub fn new(shown: Shown) -> StreamEncoder {
        StreamEncoder { shown }
    }

    /// The partial responses an event makes (none for the gateway's own
    /// calls: they are in the last one's `toolgate`).
    pub fn encode(&mut self, event: Event) -> Vec<Value> {
        let parts = match event {
            Event::Content(text) => vec![json!({"text": text})],
            Event::Reasoning(text) if self.shown.thoughts => {
                vec![json!({"text": text, "thought": true})]
            }
            Event::ReasoningOpaque(o) if o.protocol == Protocol::Gemini => {
                vec![json!({"text": "", "thoughtSignature": o.data})]
            }
            Event::ClientCalls(calls) => calls.iter().map(call_part).collect(),
            Event::Done(summary) => {
                let mut last = response(
                    &self.shown,
                    Vec::new(),
                    Some(finish_reason(&summary.finish)),
                );
                last["usageMetadata"] = usage(&summary.usage);
                last["toolgate"] = common::report(&summary);
                return vec![last];
            }
            Event::Failed(e) => return vec![stream_error(&e)],
            Event::Reasoning(_)
            | Event::ReasoningOpaque(_)
            | Event::ToolCallStarted(_)
            | Event::ToolProgress(_)
            | Event::ToolCallDone(_) => return Vec::new(),
        };
        vec![response(&self.shown, parts, None)]
    }
}

/// A failure after the stream started: Google's error body as a chunk
/// (its clients raise it as an API error).
fn stream_error(e: &ChatError) -> Value {
    tracing::warn!("stream failed: {e}");
    let message = e.to_string();
    let status = match e {
        ChatError::Upstream(u) => ApiError::from(u.clone()).status,
        ChatError::Internal(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        ChatError::Spend(s) => ApiError::from(s.clone()).status,
    };
    ApiError::new(status, "stream_failed", message).google_error()
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_engine::chat::{Report, Summary};
    use toolgate_engine::conversation::{Native, Notices, Opaque};

    fn answer(envelope: Option<Value>, calls: Vec<Call>) -> Answer {
        Answer {
            envelope: envelope.map(|value| {
                Envelope::Read(Native {
                    protocol: Protocol::Gemini,
                    what: "response".into(),
                    value,
                })
            }),
            content: Some("hi".into()),
            reasoning: None,
            reasoning_items: Vec::new(),
            client_calls: calls,
            notices: Notices::default(),
            summary: Summary {
                finish: FinishReason::ToolCalls,
                report: Report::default(),
                usage: Usage {
                    input: 10,
                    output: 5,
                    reasoning: 2,
                    ..Default::default()
                },
            },
        }
    }

    #[test]
    fn a_gemini_model_s_parts_come_back_as_it_wrote_them_without_the_gateway_s_calls() {
        let envelope = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "t", "thought": true, "thoughtSignature": "czE="},
            {"functionCall": {"name": "gateway_tool", "args": {}}, "thoughtSignature": "czI="},
            {"functionCall": {"name": "client_tool", "args": {"a": 1}}}]}}]});
        let calls = vec![Call::new("gemini_call_2", "client_tool", "{\"a\":1}")];
        let v = whole(answer(Some(envelope), calls), &Shown::new("g", false));
        assert_eq!(
            v["candidates"][0]["content"]["parts"],
            json!([{"text": "", "thoughtSignature": "czE="},
                   {"functionCall": {"name": "client_tool", "args": {"a": 1}}, "thoughtSignature": "czI="}])
        );
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            v["usageMetadata"],
            json!({"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 2, "totalTokenCount": 15})
        );
    }

    #[test]
    fn another_model_s_answer_is_written_in_parts() {
        let mut call = Call::new("c1", "f", "{}");
        call.opaque = Some(Opaque::new(Protocol::Anthropic, "sig"));
        let v = whole(answer(None, vec![call]), &Shown::new("g", true));
        assert_eq!(
            v["candidates"][0]["content"]["parts"],
            json!([{"text": "hi"}, {"functionCall": {"id": "c1", "name": "f", "args": {}}}])
        );
    }
}
