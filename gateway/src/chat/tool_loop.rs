//! The server-side tool loop: call the model, run the gateway tools it asks
//! for, feed the results back, repeat until it answers (or the iteration
//! budget is spent), then answer the client, streaming or not.
//!
//! Policies:
//! - Tool calls in one turn run as one executor batch (validated, in
//!   parallel, de-duplicated); failures become tool messages the model reads.
//! - `tool_choice` forcing a call (`required` or a named function) applies to
//!   the first model call only; later calls use `auto`, or the loop could
//!   never end.
//! - When a turn calls a client tool, the loop stops and the client gets the
//!   client tools' calls as a normal `tool_calls` answer. Gateway tool calls
//!   of that same turn are not run and not shown: the model sees the client's
//!   results on the next request and asks again for what it still needs.
//! - When the budget is spent and the model still asks for gateway tools,
//!   those calls are not run; the last message is returned without them and
//!   with `finish_reason: "max_tool_iterations"`.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::Event;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::request::ChatRequest;
use crate::api::ApiError;
use crate::catalog::Catalog;
use crate::executor::{Executor, ToolCall, ToolResult};
use crate::openai::{ChunkBuilder, add_usage};
use crate::tool::ToolError;
use crate::upstream::{Resolved, UpstreamError};

/// Everything one loop needs.
#[derive(Debug)]
pub struct Loop {
    pub catalog: Arc<Catalog>,
    pub executor: Executor,
    pub resolved: Resolved,
    pub request: ChatRequest,
    /// The tool set in force, if any.
    pub tool_set: Option<String>,
    /// Tools offered to the model: the set's, then the client's.
    pub tools: Vec<Value>,
    /// Names of the set's tools (run by the gateway).
    pub gateway_tools: HashSet<String>,
    pub max_iterations: u32,
}

/// What the loop did, reported in the response's `toolgate` field.
#[derive(Debug, Default)]
struct Report {
    iterations: u32,
    calls: Vec<Value>,
    usage: Value,
}

impl Report {
    fn to_json(&self, l: &Loop) -> Value {
        json!({
            "tool_set": l.tool_set,
            "formatter": "function_calling",
            "upstream": l.resolved.upstream.name,
            "iterations": self.iterations,
            "tool_calls": self.calls,
        })
    }
}

/// A tool call as the model sent it.
#[derive(Debug, Clone)]
struct ModelCall {
    id: String,
    name: String,
    arguments: String,
}

impl ModelCall {
    fn from_json(v: &Value) -> ModelCall {
        ModelCall {
            id: v["id"].as_str().unwrap_or_default().to_owned(),
            name: v
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            arguments: v
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}")
                .to_owned(),
        }
    }

    fn to_json(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }
}

/// What the model said in one turn.
#[derive(Debug, Default)]
struct Turn {
    content: Option<String>,
    calls: Vec<ModelCall>,
    finish_reason: Option<String>,
}

/// What to do after a turn.
enum Next {
    /// The model answered: return this turn.
    Answer,
    /// The model called client tools: return only those calls.
    ClientCalls(Vec<ModelCall>),
    /// The budget is spent and the model still wants gateway tools.
    OutOfIterations,
    /// Run these gateway calls and go on.
    Run(Vec<ModelCall>),
}

impl Loop {
    fn decide(&self, turn: &Turn, iteration: u32) -> Next {
        if turn.calls.is_empty() {
            return Next::Answer;
        }
        let client: Vec<ModelCall> = turn
            .calls
            .iter()
            .filter(|c| !self.gateway_tools.contains(&c.name))
            .cloned()
            .collect();
        let offered_to_client = self.request.client_tools.iter().any(|t| {
            client.iter().any(|c| {
                t.pointer("/function/name").and_then(Value::as_str) == Some(c.name.as_str())
            })
        });
        if offered_to_client {
            return Next::ClientCalls(client);
        }
        if iteration >= self.max_iterations {
            return Next::OutOfIterations;
        }
        Next::Run(turn.calls.clone())
    }

    /// The request body of model call number `iteration` (1-based).
    fn body(&self, messages: &[Value], iteration: u32, stream: bool) -> bytes::Bytes {
        let mut overrides: Vec<(&str, Value)> = Vec::new();
        if iteration > 1
            && let Some(choice) = self.request.get("tool_choice")
            && choice != json!("auto")
            && choice != json!("none")
        {
            overrides.push(("tool_choice", json!("auto")));
        }
        if stream {
            overrides.push(("stream", json!(true)));
            overrides.push(("stream_options", json!({"include_usage": true})));
        } else {
            overrides.push(("stream", Value::Null));
            overrides.push(("stream_options", Value::Null));
        }
        self.request
            .upstream_body(&self.resolved.model, messages, &self.tools, &overrides)
    }

    /// Runs a turn's calls; returns the tool messages for the model and
    /// records each call in the report.
    async fn run_calls(
        &self,
        calls: &[ModelCall],
        iteration: u32,
        report: &mut Report,
    ) -> Vec<Value> {
        // Arguments that are not JSON are an error result, like any other.
        let mut parsed: Vec<Result<ToolCall, ToolResult>> = Vec::with_capacity(calls.len());
        for c in calls {
            let args = if c.arguments.trim().is_empty() {
                Ok(json!({}))
            } else {
                serde_json::from_str::<Value>(&c.arguments)
            };
            parsed.push(match args {
                Ok(arguments) if self.gateway_tools.contains(&c.name) => Ok(ToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments,
                }),
                Ok(_) => Err(failed(ToolError::UnknownTool(c.name.clone()))),
                Err(e) => Err(failed(ToolError::InvalidArguments(vec![
                    crate::tool::ArgError {
                        path: "/".into(),
                        rule: "json".into(),
                        message: format!("the arguments are not valid JSON: {e}"),
                    },
                ]))),
            });
        }
        let batch: Vec<ToolCall> = parsed
            .iter()
            .filter_map(|p| p.as_ref().ok().cloned())
            .collect();
        let mut results = self
            .executor
            .run_batch(&self.catalog, &batch)
            .await
            .into_iter();
        let mut messages = Vec::with_capacity(calls.len());
        for (call, p) in calls.iter().zip(parsed) {
            let result = match p {
                Ok(_) => results
                    .next()
                    .unwrap_or_else(|| failed(ToolError::Failed("the call did not run".into()))),
                Err(r) => r,
            };
            let text = result.to_model_text();
            tracing::info!(
                tool = %call.name,
                success = result.success,
                ms = result.duration_ms,
                iteration,
                "tool call"
            );
            report.calls.push(json!({
                "id": call.id,
                "function": {"name": call.name, "arguments": call.arguments},
                "result": match (&result.data, &result.error) { (_, Some(e)) => json!(e.to_string()), (Some(d), None) => d.clone(), (None, None) => Value::Null },
                "success": result.success,
                "skipped": result.skipped,
                "cached": result.cached,
                "execution_time": result.duration_ms / 1000.0,
                "error": result.error,
                "iteration": iteration,
            }));
            messages.push(json!({"role": "tool", "tool_call_id": call.id, "content": text}));
        }
        messages
    }

    /// Runs the loop and returns the final chat completion.
    pub async fn run(self) -> Result<Value, ApiError> {
        let mut messages = self.request.messages();
        let mut report = Report {
            usage: Value::Null,
            ..Report::default()
        };
        let mut iteration = 0;
        loop {
            iteration += 1;
            report.iterations = iteration;
            let resp = self
                .resolved
                .upstream
                .chat(self.body(&messages, iteration, false))
                .await?;
            let mut completion: Value = resp.json().await.map_err(|e| {
                ApiError::from(UpstreamError::Invalid {
                    upstream: self.resolved.upstream.name.clone(),
                    message: format!(
                        "not a JSON chat completion: {}",
                        std::error::Error::source(&e).map_or(e.to_string(), ToString::to_string)
                    ),
                })
            })?;
            if let Some(u) = completion.get("usage") {
                add_usage(&mut report.usage, u);
            }
            let message = completion
                .pointer("/choices/0/message")
                .cloned()
                .ok_or_else(|| {
                    ApiError::from(UpstreamError::Invalid {
                        upstream: self.resolved.upstream.name.clone(),
                        message: "the completion has no choices[0].message".into(),
                    })
                })?;
            let turn = Turn {
                content: message["content"].as_str().map(str::to_owned),
                calls: message["tool_calls"]
                    .as_array()
                    .map(|a| a.iter().map(ModelCall::from_json).collect())
                    .unwrap_or_default(),
                finish_reason: completion
                    .pointer("/choices/0/finish_reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            };
            let _ = &turn.finish_reason;
            match self.decide(&turn, iteration) {
                Next::Answer => {}
                Next::ClientCalls(calls) => {
                    if let Some(m) = completion.pointer_mut("/choices/0/message") {
                        m["tool_calls"] =
                            Value::Array(calls.iter().map(ModelCall::to_json).collect());
                    }
                    completion["choices"][0]["finish_reason"] = json!("tool_calls");
                }
                Next::OutOfIterations => {
                    if let Some(m) = completion
                        .pointer_mut("/choices/0/message")
                        .and_then(Value::as_object_mut)
                    {
                        m.remove("tool_calls");
                        m.entry("content").or_insert(Value::Null);
                        if m["content"].is_null() {
                            m.insert("content".into(), json!(""));
                        }
                    }
                    completion["choices"][0]["finish_reason"] = json!("max_tool_iterations");
                }
                Next::Run(calls) => {
                    messages.push(assistant_message(&turn.content, &calls));
                    let results = self.run_calls(&calls, iteration, &mut report).await;
                    messages.extend(results);
                    continue;
                }
            }
            completion["model"] = json!(self.request.model);
            if !report.usage.is_null() {
                completion["usage"] = report.usage.clone();
            }
            completion["toolgate"] = report.to_json(&self);
            return Ok(completion);
        }
    }

    /// Starts the loop as a stream of SSE events (OpenAI chunks). The first
    /// model call is made before the stream starts, so its failure is an
    /// ordinary HTTP error. Dropping the stream (the client went away)
    /// cancels the model call and the tools in progress.
    pub async fn start_stream(
        self,
    ) -> Result<impl Stream<Item = Result<Event, Infallible>>, ApiError> {
        let first = self
            .resolved
            .upstream
            .chat(self.body(&self.request.messages(), 1, true))
            .await?;
        Ok(self.run_stream(first))
    }

    fn run_stream(self, first: reqwest::Response) -> impl Stream<Item = Result<Event, Infallible>> {
        async_stream::stream! {
            let mut pending = Some(first);
            let chunks = ChunkBuilder::new(&self.request.model);
            let mut messages = self.request.messages();
            let mut report = Report { usage: Value::Null, ..Report::default() };
            let mut iteration = 0;
            let mut sent_role = false;
            loop {
                iteration += 1;
                report.iterations = iteration;
                let next = match pending.take() {
                    Some(r) => Ok(r),
                    None => self.resolved.upstream.chat(self.body(&messages, iteration, true)).await,
                };
                let resp = match next {
                    Ok(r) => r,
                    Err(e) => {
                        yield Ok(error_event(ApiError::from(e)));
                        return;
                    }
                };
                let mut turn = Turn::default();
                let mut partial: Vec<ModelCall> = Vec::new();
                let mut events = resp.bytes_stream().eventsource();
                let mut finished = false;
                while let Some(ev) = events.next().await {
                    let ev = match ev {
                        Ok(ev) => ev,
                        Err(e) => {
                            yield Ok(error_event(ApiError::from(UpstreamError::Invalid {
                                upstream: self.resolved.upstream.name.clone(),
                                message: format!("the stream broke: {e}"),
                            })));
                            return;
                        }
                    };
                    if ev.data.trim() == "[DONE]" {
                        finished = true;
                        break;
                    }
                    let Ok(chunk) = serde_json::from_str::<Value>(&ev.data) else {
                        yield Ok(error_event(ApiError::from(UpstreamError::Invalid {
                            upstream: self.resolved.upstream.name.clone(),
                            message: "a stream chunk is not JSON".into(),
                        })));
                        return;
                    };
                    if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                        add_usage(&mut report.usage, u);
                    }
                    let Some(choice) = chunk.pointer("/choices/0") else { continue };
                    if let Some(reason) = choice["finish_reason"].as_str() {
                        turn.finish_reason = Some(reason.to_owned());
                    }
                    let delta = &choice["delta"];
                    if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                        turn.content.get_or_insert_with(String::new).push_str(text);
                        let mut d = json!({"content": text});
                        if !sent_role {
                            d["role"] = json!("assistant");
                            sent_role = true;
                        }
                        yield Ok(data_event(&chunks.delta(d, None)));
                    }
                    if let Some(calls) = delta["tool_calls"].as_array() {
                        for c in calls {
                            let idx = c["index"].as_u64().unwrap_or(partial.len() as u64) as usize;
                            while partial.len() <= idx {
                                partial.push(ModelCall { id: String::new(), name: String::new(), arguments: String::new() });
                            }
                            let p = &mut partial[idx];
                            if let Some(id) = c["id"].as_str() { p.id.push_str(id); }
                            if let Some(n) = c.pointer("/function/name").and_then(Value::as_str) { p.name.push_str(n); }
                            if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) { p.arguments.push_str(a); }
                        }
                    }
                }
                if !finished && turn.finish_reason.is_none() {
                    yield Ok(error_event(ApiError::from(UpstreamError::Invalid {
                        upstream: self.resolved.upstream.name.clone(),
                        message: "the stream ended before the answer was complete".into(),
                    })));
                    return;
                }
                turn.calls = partial;
                let finish = match self.decide(&turn, iteration) {
                    Next::Run(calls) => {
                        messages.push(assistant_message(&turn.content, &calls));
                        let results = self.run_calls(&calls, iteration, &mut report).await;
                        messages.extend(results);
                        continue;
                    }
                    Next::Answer => turn.finish_reason.clone().unwrap_or_else(|| "stop".into()),
                    Next::OutOfIterations => "max_tool_iterations".to_owned(),
                    Next::ClientCalls(calls) => {
                        let deltas: Vec<Value> = calls.iter().enumerate().map(|(i, c)| {
                            json!({"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                        }).collect();
                        let mut d = json!({"tool_calls": deltas});
                        if !sent_role {
                            d["role"] = json!("assistant");
                            sent_role = true;
                        }
                        yield Ok(data_event(&chunks.delta(d, None)));
                        "tool_calls".to_owned()
                    }
                };
                let mut d = json!({});
                if !sent_role {
                    d["role"] = json!("assistant");
                    d["content"] = json!("");
                }
                let mut last = chunks.delta(d, Some(&finish));
                last["toolgate"] = report.to_json(&self);
                yield Ok(data_event(&last));
                if self.request.include_usage && !report.usage.is_null() {
                    yield Ok(data_event(&chunks.usage(&report.usage)));
                }
                yield Ok(Event::default().data("[DONE]"));
                return;
            }
        }
    }
}

fn failed(e: ToolError) -> ToolResult {
    ToolResult {
        success: false,
        data: None,
        error: Some(e),
        duration_ms: 0.0,
        skipped: false,
        cached: false,
        truncated: false,
    }
}

fn assistant_message(content: &Option<String>, calls: &[ModelCall]) -> Value {
    json!({
        "role": "assistant",
        "content": content,
        "tool_calls": calls.iter().map(ModelCall::to_json).collect::<Vec<_>>(),
    })
}

fn data_event(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// An error in the middle of a stream: the status is already sent, so the
/// error travels as an OpenAI error object in a data event (the SDKs raise
/// it as an API error).
fn error_event(e: ApiError) -> Event {
    tracing::warn!("stream failed: {}", e.message);
    data_event(&json!({"error": {"message": e.message, "type": "api_error", "code": e.code}}))
}
