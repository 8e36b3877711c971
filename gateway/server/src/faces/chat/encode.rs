//! The loop's answer as a chat completion, and its events as
//! `chat.completion.chunk`s.

use std::collections::BTreeMap;

use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use toolgate_engine::chat::{Answer, ChatError, Event, FinishReason, Summary};
use toolgate_engine::conversation::{Protocol, Usage};
use toolgate_engine::model::protocol::Envelope;
use toolgate_engine::model::protocol::openai_chat::call_json;

use super::super::common;

/// A whole answer as a chat completion: the upstream's last completion
/// with the loop's message, finish reason, summed usage and report.
pub fn completion(answer: Answer, model: &str) -> Response {
    let Answer {
        envelope,
        content,
        reasoning,
        client_calls,
        summary,
        ..
    } = answer;
    let mut message = json!({"role": "assistant", "content": content});
    if !client_calls.is_empty() {
        message["tool_calls"] = Value::Array(client_calls.iter().map(call_json).collect());
    }
    if let Some(r) = reasoning {
        message["reasoning_content"] = json!(r);
    }
    let ours = Ours {
        message,
        finish_reason: wire_finish(&summary.finish),
        model,
        report: common::report_raw(&summary),
        usage: usage(&summary.usage),
    };
    // The model's own completion, as it wrote it: its fields are copied,
    // not read, but for those the gateway replaces. Not the plain shape (a
    // key written with escapes), it is read below.
    if let Some(Envelope::Body {
        protocol: Protocol::OpenaiChat,
        body,
        ..
    }) = &envelope
        && let Some(bytes) = over_raw(body, &ours)
    {
        return json_response(bytes);
    }
    let envelope = envelope.and_then(Envelope::read);
    // The model's own completion when it speaks chat completions (its id,
    // times, fingerprint), else one of the gateway's.
    let mut completion = match envelope {
        // (An answer that is not an object, which the deltas' reader lets
        // through, has nothing to keep.)
        Some(e) if e.protocol == Protocol::OpenaiChat && e.value.is_object() => e.value,
        _ => json!({
            "id": format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            "object": "chat.completion",
            "created": common::unix_now(),
            "choices": [{"index": 0, "logprobs": null}],
        }),
    };
    // The engine checked that `choices[0].message` exists.
    if let Some(choice) = completion.get_mut("choices").and_then(|c| c.get_mut(0)) {
        choice["message"] = ours.message;
        choice["finish_reason"] = json!(ours.finish_reason);
    }
    completion["model"] = json!(model);
    completion["toolgate"] = serde_json::from_str(ours.report.get()).unwrap_or(Value::Null);
    if let Some(usage) = ours.usage {
        completion["usage"] = usage;
    }
    axum::Json(completion).into_response()
}

/// What the gateway writes over the upstream's completion.
struct Ours<'a> {
    message: Value,
    finish_reason: &'a str,
    model: &'a str,
    report: Box<RawValue>,
    usage: Option<Value>,
}

/// An object's fields as written, by key (sorted, as `Value` writes them).
type RawObject<'a> = BTreeMap<&'a str, &'a RawValue>;

/// A field of the completion as written: the upstream's, copied, or the
/// gateway's.
#[derive(Serialize)]
#[serde(untagged)]
enum Field<'a> {
    Raw(&'a RawValue),
    Value(&'a Value),
    Str(&'a str),
    Choices(Vec<BTreeMap<&'a str, Field<'a>>>),
}

/// The upstream's completion `body` with the gateway's fields written
/// over it, without reading the rest into values; `None` when it is not
/// an object of plain keys whose `choices` is an array of such objects.
/// What it copies is copied as written: a number beyond `f64` or a lone
/// surrogate's escape in a field the gateway does not read passes as the
/// model wrote it.
fn over_raw(body: &[u8], ours: &Ours<'_>) -> Option<Vec<u8>> {
    let top: RawObject<'_> = serde_json::from_slice(body).ok()?;
    let choices: Vec<RawObject<'_>> = match top.get("choices") {
        Some(raw) => serde_json::from_str(raw.get()).ok()?,
        None => Vec::new(),
    };
    let mut out: BTreeMap<&str, Field<'_>> = top.iter().map(|(k, v)| (*k, Field::Raw(v))).collect();
    if top.contains_key("choices") {
        let choices = choices
            .iter()
            .enumerate()
            .map(|(i, choice)| {
                let mut choice: BTreeMap<&str, Field<'_>> =
                    choice.iter().map(|(k, v)| (*k, Field::Raw(v))).collect();
                if i == 0 {
                    choice.insert("message", Field::Value(&ours.message));
                    choice.insert("finish_reason", Field::Str(ours.finish_reason));
                }
                choice
            })
            .collect();
        out.insert("choices", Field::Choices(choices));
    }
    out.insert("model", Field::Str(ours.model));
    out.insert("toolgate", Field::Raw(&ours.report));
    if let Some(usage) = &ours.usage {
        out.insert("usage", Field::Value(usage));
    }
    serde_json::to_vec(&out).ok()
}

/// JSON bytes as a response, as `axum::Json` answers.
fn json_response(bytes: Vec<u8>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
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

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_engine::chat::{Report, Summary};
    use toolgate_engine::conversation::{Native, Notices};

    fn answer(envelope: Envelope) -> Answer {
        Answer {
            envelope: Some(envelope),
            content: Some("the answer".into()),
            reasoning: None,
            reasoning_items: Vec::new(),
            client_calls: Vec::new(),
            notices: Notices::default(),
            summary: Summary {
                finish: FinishReason::Stop,
                report: Report::default(),
                usage: Usage {
                    input: 10,
                    output: 5,
                    calls: 2,
                    ..Default::default()
                },
            },
        }
    }

    /// A chat model's completion as the loop keeps it: its bytes.
    fn chat_body(body: &str) -> Envelope {
        Envelope::Body {
            protocol: Protocol::OpenaiChat,
            what: "chat completion",
            body: bytes::Bytes::from(body.to_owned()),
        }
    }

    async fn written(response: Response) -> (String, Value) {
        let kind = response.headers()[axum::http::header::CONTENT_TYPE].clone();
        assert_eq!(kind, "application/json");
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let value = serde_json::from_str(&text).unwrap();
        (text, value)
    }

    /// The upstream's completion as sent (pretty, with fields the gateway
    /// does not know, two choices) is copied where the gateway does not
    /// write over it, and says what reading it as a value says.
    #[tokio::test]
    async fn a_chat_model_s_completion_is_copied_where_the_gateway_does_not_write() {
        let body = r#"{
  "id": "chatcmpl-9",
  "object": "chat.completion",
  "created": 1700000001,
  "model": "gpt-x-2026",
  "system_fingerprint": "fp_1",
  "service_tier": {"tier": "default", "nested": [1, 2.5e3]},
  "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "model's"}, "logprobs": null, "finish_reason": "tool_calls"},
    {"index": 1, "message": {"role": "assistant", "content": "second"}, "logprobs": {"content": []}, "finish_reason": "stop"}
  ],
  "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
}"#;
        let raw = completion(answer(chat_body(body)), "alias");
        let read = completion(
            answer(Envelope::Read(Native {
                protocol: Protocol::OpenaiChat,
                what: "chat completion".into(),
                value: serde_json::from_str(body).unwrap(),
            })),
            "alias",
        );
        let (text, raw) = written(raw).await;
        let (_, read) = written(read).await;
        assert_eq!(raw, read);
        assert_eq!(raw["choices"][0]["message"]["content"], "the answer");
        assert_eq!(raw["choices"][0]["finish_reason"], "stop");
        assert_eq!(raw["choices"][1]["message"]["content"], "second");
        assert_eq!(raw["model"], "alias");
        assert_eq!(raw["usage"]["total_tokens"], 15);
        assert_eq!(raw["system_fingerprint"], "fp_1");
        // Copied as written, not read and written again.
        assert!(
            text.contains(r#"{"tier": "default", "nested": [1, 2.5e3]}"#),
            "{text}"
        );
    }

    /// The report written straight from the summary says what the report
    /// built as a value says.
    #[test]
    fn the_report_written_as_text_is_the_report_as_a_value() {
        use toolgate_engine::chat::{CallFunction, CallRecord, Cost};
        let summary = Summary {
            finish: FinishReason::MaxToolIterations,
            report: Report {
                tool_set: Some("calc".into()),
                formatter: "function_calling",
                upstream: "mock".into(),
                iterations: 2,
                tool_calls: vec![CallRecord {
                    id: "call_1".into(),
                    function: CallFunction {
                        name: "calculator".into(),
                        arguments: r#"{"expression":"6*7"}"#.into(),
                    },
                    result: json!({"b": [1, "two"], "a": null}),
                    success: true,
                    skipped: false,
                    cached: false,
                    execution_time: 0.25,
                    error: None,
                    iteration: 1,
                }],
                attempts: Vec::new(),
                cost: Cost {
                    usd: Some(0.5),
                    unpriced_calls: 1,
                    budget_warnings: vec!["day".into()],
                },
            },
            usage: Usage::default(),
        };
        // Flattened beside the report's own fields, `finish_reason` would be
        // written twice were the report to gain one.
        assert!(json!(summary.report).get("finish_reason").is_none());
        let text: Value = serde_json::from_str(common::report_raw(&summary).get()).unwrap();
        assert_eq!(text, common::report(&summary));
        assert_eq!(text["finish_reason"], "max_tool_iterations");
    }

    /// An answer that is not an object (the deltas' reader lets an array
    /// through) gives the gateway's own completion, not a panic.
    #[tokio::test]
    async fn an_answer_that_is_not_an_object_gives_the_gateway_s_completion() {
        let body = r#"[[{"message":{"content":"x"}}]]"#;
        let (_, v) = written(completion(answer(chat_body(body)), "m")).await;
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "m");
        assert_eq!(v["choices"][0]["message"]["content"], "the answer");
    }

    /// Without usage of the gateway's, the upstream's is kept as written.
    #[tokio::test]
    async fn without_counted_usage_the_upstream_s_is_kept() {
        let body = r#"{"id":"c","choices":[{"index":0,"message":{}}],"usage":{"total_tokens": 7}}"#;
        let mut a = answer(chat_body(body));
        a.summary.usage = Usage::default();
        let (text, v) = written(completion(a, "m")).await;
        assert_eq!(v["usage"]["total_tokens"], 7);
        assert!(text.contains(r#"{"total_tokens": 7}"#), "{text}");
    }

    /// A key written with escapes cannot be borrowed: the completion is
    /// read as a value instead, and nothing is lost.
    #[tokio::test]
    async fn a_completion_with_an_escaped_key_is_read_and_kept_whole() {
        let body = r#"{"id":"c","x\u0041":1,"choices":[{"index":0,"message":{}}]}"#;
        let (_, v) = written(completion(answer(chat_body(body)), "m")).await;
        assert_eq!(v["xA"], 1);
        assert_eq!(v["id"], "c");
        assert_eq!(v["choices"][0]["message"]["content"], "the answer");
    }
}
