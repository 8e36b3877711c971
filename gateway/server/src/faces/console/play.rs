//! The playground: a conversation with a model route and a tool set, the
//! tool loop shown as it runs.
//!
//! `POST /console/ui/play` plans the conversation like any chat request
//! (the caller's key, its sets, the caps) and streams the loop's events as
//! lines of JSON, each an operation on the page: append or replace a
//! fragment rendered here (tool-call cards, the summary), or add text to
//! the answer. The page's script only applies them, so every piece of HTML
//! is escaped by the templates, never built from model text in the browser.

use std::collections::{HashMap, VecDeque};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_engine::chat::{CallRecord, Event, Passthrough, Plan, Summary};

use super::{console_access, fragment, render, secured};
use crate::http::{ApiError, AppState, Caller};

/// `GET /console/ui/playground`: the form (models the routes serve, the
/// caller's tool sets) and an empty transcript.
pub async fn page(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    console_access(&state, &caller, &headers)?;
    let catalog = state.catalog();
    let models: Vec<String> = catalog
        .upstreams
        .list_models()
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let default = caller.default_set(&catalog);
    let sets: Vec<Value> = catalog
        .sets()
        .filter(|s| caller.may_use(&s.name))
        .map(|s| json!({"name": s.name, "default": Some(&s.name) == default.as_ref()}))
        .collect();
    Ok(fragment(render(
        "playground.html",
        json!({"models": models, "model": models.first(), "sets": sets}),
    )?))
}

/// What the page sends: the conversation so far, ending with the person's
/// message.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlayRequest {
    model: String,
    /// A set's name, or `none`.
    tool_set: String,
    /// `{role, content}` messages, as in a chat completion.
    messages: Vec<Value>,
    /// The turn's number: the page's ids for this answer start with it.
    turn: u32,
}

/// `POST /console/ui/play`: the loop's events as lines of JSON.
pub async fn play(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    console_access(&state, &caller, &headers)?;
    let body = body.map_err(crate::http::body_error)?;
    let asked: PlayRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!("the playground's request is not valid: {e}"))
    })?;
    let request = json!({
        "model": asked.model,
        "messages": asked.messages,
        "tool_set": asked.tool_set,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let request = crate::faces::chat::decode::decode(&bytes::Bytes::from(request.to_string()))?;
    let crate::faces::common::Admitted { plan, places } =
        crate::faces::common::plan_request(&state, &caller, &headers, request, Passthrough::Never)
            .await?;
    let Plan::Loop(the_loop) = plan else {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "the playground's request was planned as a passthrough",
        ));
    };
    let tool_set = the_loop.tool_set.clone();
    let (_, stream) = the_loop.start_stream().await?;
    let stream = crate::faces::common::in_request_span(stream);
    let mut page = Transcript::new(asked.turn, tool_set);
    let lines = futures::StreamExt::map(stream, move |event| {
        let _held = &places;
        let mut out = String::new();
        for op in page.ops(event) {
            out.push_str(&op.to_string());
            out.push('\n');
        }
        Ok::<_, std::convert::Infallible>(Bytes::from(out))
    });
    let response = (
        [(header::CONTENT_TYPE, "application/x-ndjson; charset=utf-8")],
        Body::from_stream(lines),
    )
        .into_response();
    Ok(secured(response, "no-store"))
}

/// What the stream has shown of one answer.
struct Transcript {
    turn: u32,
    /// Cards made so far: each call gets the next number.
    cards: usize,
    /// The cards of calls not finished yet, by the model's call id (ids
    /// come from the model: one may repeat, or be empty).
    running: HashMap<String, VecDeque<usize>>,
    /// The answer's text so far (sent back whole at the end, for the
    /// conversation's next turn).
    answer: String,
    tool_set: Option<String>,
}

impl Transcript {
    fn new(turn: u32, tool_set: Option<String>) -> Transcript {
        Transcript {
            turn,
            cards: 0,
            running: HashMap::new(),
            answer: String::new(),
            tool_set,
        }
    }

    fn card_id(&self, n: usize) -> String {
        format!("t{}-call{n}", self.turn)
    }

    /// A new card for a call that starts.
    fn start(&mut self, call_id: &str) -> String {
        self.cards += 1;
        let n = self.cards;
        self.running
            .entry(call_id.to_owned())
            .or_default()
            .push_back(n);
        self.card_id(n)
    }

    /// The card of the oldest running call with this id.
    fn running(&self, call_id: &str) -> Option<String> {
        let n = *self.running.get(call_id)?.front()?;
        Some(self.card_id(n))
    }

    /// The card of the oldest running call with this id, now finished.
    fn finish(&mut self, call_id: &str) -> Option<String> {
        let n = self.running.get_mut(call_id)?.pop_front()?;
        Some(self.card_id(n))
    }

    fn html(&self, template: &str, context: Value) -> String {
        render(template, context).unwrap_or_else(|e| format!("<p role=\"alert\">{}</p>", e.message))
    }

    /// The page operations an event stands for.
    fn ops(&mut self, event: Event) -> Vec<Value> {
        let answer = format!("t{}-answer", self.turn);
        let cards = format!("t{}-cards", self.turn);
        match event {
            Event::Content(text) => {
                self.answer.push_str(&text);
                vec![json!({"op": "text", "target": answer, "text": text})]
            }
            Event::Reasoning(text) => {
                vec![
                    json!({"op": "text", "target": format!("t{}-reasoning", self.turn), "text": text}),
                ]
            }
            Event::ReasoningOpaque(_) => Vec::new(),
            Event::ToolCallStarted(call) => {
                let id = self.start(&call.id);
                let html = self.html(
                    "card.html",
                    json!({"id": id, "running": true, "name": call.name, "arguments": pretty(&call.arguments)}),
                );
                vec![json!({"op": "append", "target": cards, "html": html})]
            }
            Event::ToolProgress(p) => {
                let Some(id) = self.running(&p.call_id) else {
                    return Vec::new();
                };
                let total = p
                    .progress
                    .total
                    .map_or(String::new(), |t| format!(" of {t}"));
                let text = match &p.progress.message {
                    Some(m) => format!("{}{total}: {m}", p.progress.progress),
                    None => format!("{}{total}", p.progress.progress),
                };
                vec![json!({"op": "progress", "target": format!("{id}-progress"), "text": text})]
            }
            Event::ToolCallDone(record) => match self.finish(&record.id) {
                Some(id) => {
                    let html = self.html("card.html", card(&id, &record));
                    vec![json!({"op": "replace", "target": id, "html": html})]
                }
                // A call the page has no card for gets one.
                None => {
                    self.cards += 1;
                    let id = self.card_id(self.cards);
                    let html = self.html("card.html", card(&id, &record));
                    vec![json!({"op": "append", "target": cards, "html": html})]
                }
            },
            Event::ClientCalls(calls) => {
                let names: Vec<String> = calls.into_iter().map(|c| c.name).collect();
                vec![json!({"op": "text", "target": answer,
                    "text": format!("[the model called tools the gateway does not run: {}]", names.join(", "))})]
            }
            Event::Done(summary) => {
                let html = self.html("summary.html", summary_context(&summary));
                vec![
                    json!({"op": "append", "target": format!("t{}", self.turn), "html": html}),
                    json!({"op": "done", "content": self.answer}),
                ]
            }
            Event::Failed(error) => {
                let error = ApiError::from(*error);
                let html = self.html(
                    "summary.html",
                    json!({"failed": true, "code": error.code, "message": error.message,
                           "tool_set": self.tool_set}),
                );
                vec![
                    json!({"op": "append", "target": format!("t{}", self.turn), "html": html}),
                    json!({"op": "done", "content": self.answer}),
                ]
            }
        }
    }
}

/// JSON text pretty-printed when it is JSON, else as it is.
fn pretty(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}

/// The most of a result a card shows.
const CARD_RESULT_CHARS: usize = 4000;

fn card(id: &str, record: &CallRecord) -> Value {
    let result = match &record.result {
        Value::String(s) => s.clone(),
        v => serde_json::to_string_pretty(v).unwrap_or_default(),
    };
    let cut = result.chars().count() > CARD_RESULT_CHARS;
    let result: String = result.chars().take(CARD_RESULT_CHARS).collect();
    json!({
        "id": id,
        "running": false,
        "name": record.function.name,
        "arguments": pretty(&record.function.arguments),
        "success": record.success,
        "code": record.error.as_ref().map(|e| e.code()),
        "result": result,
        "cut": cut,
        "cached": record.cached,
        "skipped": record.skipped,
        "duration_ms": format!("{:.1}", record.execution_time * 1000.0),
        "iteration": record.iteration,
    })
}

fn summary_context(summary: &Summary) -> Value {
    let report = &summary.report;
    json!({
        "failed": false,
        "finish": summary.finish.as_str(),
        "formatter": report.formatter,
        "upstream": report.upstream,
        "tool_set": report.tool_set,
        "iterations": report.iterations,
        "tool_calls": report.tool_calls.len(),
        "usage": (!summary.usage.is_empty()).then_some(&summary.usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_engine::chat::{CallFunction, FinishReason, Report};
    use toolgate_engine::conversation::Call;
    use toolgate_engine::executor::CallProgress;
    use toolgate_engine::tools::tool::{Progress, ToolError};

    fn record(id: &str, success: bool) -> CallRecord {
        CallRecord {
            id: id.into(),
            function: CallFunction {
                name: "calculator".into(),
                arguments: r#"{"expression":"<b>6*7</b>"}"#.into(),
            },
            result: if success {
                json!(42)
            } else {
                json!("invalid arguments: /: \"expression\" is a required property")
            },
            success,
            skipped: false,
            cached: false,
            execution_time: 0.0012,
            error: (!success).then(|| ToolError::Failed("no".into()).into()),
            iteration: 1,
        }
    }

    /// The page operations of a loop: the wire format between the gateway
    /// and the page's script. Model and tool text stays text; HTML comes
    /// only from the templates, escaped.
    #[test]
    fn a_loop_s_events_are_page_operations() {
        let mut page = Transcript::new(2, Some("default".into()));
        let events = vec![
            Event::Reasoning("thinking".into()),
            Event::ToolCallStarted(Box::new(Call::new(
                "call_a",
                "calculator",
                r#"{"expression":"<b>6*7</b>"}"#,
            ))),
            Event::ToolProgress(Box::new(CallProgress {
                call_id: "call_a".into(),
                tool: "calculator".into(),
                progress: Progress {
                    progress: 1.0,
                    total: Some(2.0),
                    message: Some("half".into()),
                },
            })),
            Event::ToolCallDone(Box::new(record("call_a", true))),
            Event::ToolCallDone(Box::new(record("call_b", false))),
            // A model that gives every call the same (empty) id: each call
            // still has its own card, finished in order.
            Event::ToolCallStarted(Box::new(Call::new("", "calculator", "{}"))),
            Event::ToolCallStarted(Box::new(Call::new("", "calculator", "{}"))),
            Event::ToolCallDone(Box::new(record("", true))),
            Event::ToolCallDone(Box::new(record("", true))),
            Event::Content("<script>alert(1)</script>".into()),
            Event::Done(Box::new(Summary {
                finish: FinishReason::Stop,
                report: Report {
                    tool_set: Some("default".into()),
                    formatter: "function_calling",
                    upstream: "default".into(),
                    iterations: 2,
                    tool_calls: vec![record("call_a", true)],
                    attempts: Vec::new(),
                    cost: Default::default(),
                },
                usage: toolgate_engine::conversation::Usage {
                    input: 22,
                    output: 19,
                    calls: 1,
                    ..Default::default()
                },
            })),
        ];
        let ops: Vec<Value> = events.into_iter().flat_map(|e| page.ops(e)).collect();
        insta::assert_json_snapshot!(ops);
    }
}
