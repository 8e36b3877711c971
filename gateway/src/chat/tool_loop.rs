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
//! - The formatter (see [`crate::formatter`]) decides how tools reach the
//!   model and how calls come back; the loop itself works on OpenAI-shaped
//!   messages whatever the formatter.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::sse::Event;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::request::ChatRequest;
use super::subagent;
use crate::api::ApiError;
use crate::catalog::Catalog;
use crate::config::format::FormatterKind;
use crate::executor::{Executor, ToolCall, ToolResult};
use crate::formatter::{self, Call, Learned, PromptTemplate, Turn};
use crate::openai::{ChunkBuilder, add_usage};
use crate::tool::ToolError;
use crate::toolcall::{OfferedTool, ParseOptions, StreamEvent, StreamParser};
use crate::upstream::{Reply, Resolved, UpstreamError};

/// How text is parsed for structured-prompt models. A `</think>` without an
/// opener is content: treating it as the end of reasoning would hold back
/// every streamed word until the answer ends.
const PARSE: ParseOptions = ParseOptions {
    orphan_think_close: false,
};

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
    /// Formatter choices learned in `auto` mode.
    pub learned: Arc<Learned>,
    /// The request's context, injected into native tool calls.
    pub context: crate::tool::context::CallContext,
    /// The caps and buckets sub-agents are counted against.
    pub guards: Arc<crate::limits::Guards>,
    /// The caller's key, whose limits sub-agents count against.
    pub key: Option<Arc<crate::auth::ApiKey>>,
}

/// The formatter in force for one loop.
#[derive(Debug, Clone)]
enum Mode {
    /// Native function calling; `fallback` when `auto` may still switch.
    FunctionCalling { fallback: bool },
    Structured {
        template: Arc<PromptTemplate>,
        offered: Vec<OfferedTool>,
    },
}

impl Mode {
    fn label(&self) -> &'static str {
        match self {
            Mode::FunctionCalling { .. } => "function_calling",
            Mode::Structured { .. } => "structured_prompt",
        }
    }
}

/// What the loop did, reported in the response's `toolgate` field.
#[derive(Debug, Default)]
struct Report {
    iterations: u32,
    calls: Vec<Value>,
    usage: Value,
}

/// What to do after a turn.
enum Next {
    /// The model answered: return this turn.
    Answer,
    /// The model called client tools: return only those calls.
    ClientCalls(Vec<Call>),
    /// The budget is spent and the model still wants gateway tools.
    OutOfIterations,
    /// Run these gateway calls and go on.
    Run(Vec<Call>),
}

/// A loop in progress.
struct Run {
    l: Loop,
    mode: Mode,
    messages: Vec<Value>,
    report: Report,
}

impl Loop {
    fn start(self) -> Result<Run, ApiError> {
        let kind = self.learned.effective(
            self.resolved.formatter,
            &self.resolved.upstream.name,
            &self.resolved.model,
        );
        let mode = match kind {
            FormatterKind::FunctionCalling => Mode::FunctionCalling { fallback: false },
            FormatterKind::Auto => Mode::FunctionCalling { fallback: true },
            FormatterKind::StructuredPrompt => self.structured()?,
        };
        tracing::debug!(formatter = mode.label(), model = %self.request.model, "tool loop");
        Ok(Run {
            messages: self.request.messages(),
            report: Report {
                usage: Value::Null,
                ..Report::default()
            },
            mode,
            l: self,
        })
    }

    fn structured(&self) -> Result<Mode, ApiError> {
        let template = match &self.resolved.template {
            Some(t) => Arc::clone(t),
            None => PromptTemplate::default_template().map_err(internal)?,
        };
        Ok(Mode::Structured {
            template,
            offered: formatter::offered(&self.tools),
        })
    }

    /// Runs the loop and returns the final chat completion. (Boxed: a loop
    /// may run sub-agents, which are loops.)
    pub fn run(self) -> futures::future::BoxFuture<'static, Result<Value, ApiError>> {
        Box::pin(self.run_to_end())
    }

    async fn run_to_end(self) -> Result<Value, ApiError> {
        let mut run = self.start()?;
        let mut iteration = 0;
        loop {
            iteration += 1;
            run.report.iterations = iteration;
            let reply = run.call(iteration, false).await?;
            let body = run
                .l
                .resolved
                .upstream
                .read_body(reply, run.limits().max_upstream_response_bytes)
                .await?;
            let mut completion: Value = serde_json::from_slice(&body).map_err(|e| {
                ApiError::from(UpstreamError::Invalid {
                    upstream: run.l.resolved.upstream.name.clone(),
                    message: format!("not a JSON chat completion: {e}"),
                })
            })?;
            drop(body);
            if let Some(u) = completion.get("usage") {
                add_usage(&mut run.report.usage, u);
            }
            let Some(message) = completion.pointer("/choices/0/message").cloned() else {
                return Err(ApiError::from(UpstreamError::Invalid {
                    upstream: run.l.resolved.upstream.name.clone(),
                    message: "the completion has no choices[0].message".into(),
                }));
            };
            let mut turn = run.turn_of(&message);
            run.check_call_count(turn.calls.len())?;
            turn.finish_reason = completion
                .pointer("/choices/0/finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let (finish, calls) = match run.decide(&turn, iteration) {
                Next::Run(calls) => {
                    run.run_calls(&turn, &calls, iteration).await;
                    continue;
                }
                Next::Answer => (
                    turn.finish_reason.clone().unwrap_or_else(|| "stop".into()),
                    Vec::new(),
                ),
                Next::ClientCalls(calls) => ("tool_calls".to_owned(), calls),
                Next::OutOfIterations => ("max_tool_iterations".to_owned(), Vec::new()),
            };
            let mut out = json!({"role": "assistant", "content": turn.content});
            if !calls.is_empty() {
                out["tool_calls"] = Value::Array(calls.iter().map(Call::to_openai).collect());
            }
            if let Some(r) = &turn.reasoning {
                out["reasoning_content"] = json!(r);
            }
            crate::metrics::record(|m| m.loop_finished(iteration, &finish));
            completion["choices"][0]["message"] = out;
            completion["choices"][0]["finish_reason"] = json!(finish);
            completion["model"] = json!(run.l.request.model);
            if !run.report.usage.is_null() {
                completion["usage"] = run.report.usage.clone();
            }
            completion["toolgate"] = run.report_json();
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
        let mut run = self.start()?;
        run.report.iterations = 1;
        let first = run.call(1, true).await?;
        let is_sse = first
            .response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.contains("text/event-stream"));
        if !is_sse {
            return Err(ApiError::from(UpstreamError::Invalid {
                upstream: run.l.resolved.upstream.name.clone(),
                message: "asked to stream, it answered without an event stream".into(),
            }));
        }
        Ok(run.stream(first))
    }
}

impl Run {
    fn upstream_name(&self) -> &str {
        &self.l.resolved.upstream.name
    }

    fn limits(&self) -> &crate::config::format::Limits {
        &self.l.catalog.settings.limits
    }

    /// A turn with more calls than `limits.max_tool_calls_per_turn` is a
    /// broken (or hostile) model answer.
    fn check_call_count(&self, calls: usize) -> Result<(), ApiError> {
        let max = self.limits().max_tool_calls_per_turn;
        if calls > max {
            return Err(self.invalid(format!(
                "the model made {calls} tool calls in one turn, more than {max} (limits.max_tool_calls_per_turn)"
            )));
        }
        Ok(())
    }

    fn report_json(&self) -> Value {
        json!({
            "tool_set": self.l.tool_set,
            "formatter": self.mode.label(),
            "upstream": self.upstream_name(),
            "iterations": self.report.iterations,
            "tool_calls": self.report.calls,
        })
    }

    /// The request body of model call number `iteration` (1-based).
    fn body(&self, iteration: u32, stream: bool) -> Result<bytes::Bytes, ApiError> {
        let req = &self.l.request;
        let mut tool_choice = req.get("tool_choice").unwrap_or(json!("auto"));
        let forced = tool_choice != json!("auto") && tool_choice != json!("none");
        if iteration > 1 && forced {
            tool_choice = json!("auto");
        }
        let mut overrides: Vec<(&str, Value)> = Vec::new();
        if stream {
            overrides.push(("stream", json!(true)));
            overrides.push(("stream_options", json!({"include_usage": true})));
        } else {
            overrides.push(("stream", Value::Null));
            overrides.push(("stream_options", Value::Null));
        }
        let model = &self.l.resolved.model;
        Ok(match &self.mode {
            Mode::FunctionCalling { .. } => {
                if iteration > 1 && forced {
                    overrides.push(("tool_choice", tool_choice));
                }
                req.upstream_body(model, &self.messages, &self.l.tools, &overrides)
            }
            Mode::Structured { template, .. } => {
                let plain = formatter::to_plain_messages(
                    template,
                    &self.messages,
                    &self.l.tools,
                    &tool_choice,
                )
                .map_err(internal)?;
                req.upstream_body(model, &plain, &[], &overrides)
            }
        })
    }

    /// Calls the model; in `auto` mode, falls back to the structured prompt
    /// (and remembers it) when the upstream rejects `tools`.
    async fn call(&mut self, iteration: u32, stream: bool) -> Result<Reply, ApiError> {
        let upstream = Arc::clone(&self.l.resolved.upstream);
        let request_id = self.l.context.request_id.clone();
        match upstream
            .chat_with(self.body(iteration, stream)?, Some(&request_id))
            .await
        {
            Ok(r) => Ok(r),
            Err(e)
                if matches!(self.mode, Mode::FunctionCalling { fallback: true })
                    && formatter::rejects_tools(&e) =>
            {
                tracing::warn!(
                    upstream = %upstream.name,
                    model = %self.l.resolved.model,
                    "the upstream rejects tools ({e}); using the structured prompt for this model from now on"
                );
                self.l
                    .learned
                    .remember_structured(&upstream.name, &self.l.resolved.model);
                self.mode = self.l.structured()?;
                Ok(upstream
                    .chat_with(self.body(iteration, stream)?, Some(&request_id))
                    .await?)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// What a (non-streamed) assistant message says.
    fn turn_of(&self, message: &Value) -> Turn {
        match &self.mode {
            Mode::FunctionCalling { .. } => Turn {
                content: message["content"].as_str().map(str::to_owned),
                reasoning: message["reasoning_content"].as_str().map(str::to_owned),
                calls: message["tool_calls"]
                    .as_array()
                    .map(|a| a.iter().map(Call::from_openai).collect())
                    .unwrap_or_default(),
                finish_reason: None,
            },
            Mode::Structured { offered, .. } => {
                let text = message["content"].as_str().unwrap_or_default();
                let parsed = crate::toolcall::parse_with_options(text, offered, PARSE);
                Turn {
                    content: (!parsed.content.is_empty()).then_some(parsed.content),
                    reasoning: parsed.reasoning,
                    calls: parsed.calls.into_iter().map(Call::from_parsed).collect(),
                    finish_reason: None,
                }
            }
        }
    }

    fn decide(&self, turn: &Turn, iteration: u32) -> Next {
        if turn.calls.is_empty() {
            return Next::Answer;
        }
        let client_names: HashSet<&str> = self
            .l
            .request
            .client_tools
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
            .collect();
        let client: Vec<Call> = turn
            .calls
            .iter()
            .filter(|c| client_names.contains(c.name.as_str()))
            .cloned()
            .collect();
        if !client.is_empty() {
            return Next::ClientCalls(client);
        }
        if iteration >= self.l.max_iterations {
            return Next::OutOfIterations;
        }
        Next::Run(turn.calls.clone())
    }

    /// Runs a turn's calls: appends the assistant message and the tool
    /// messages to the conversation, and records each call in the report.
    async fn run_calls(&mut self, turn: &Turn, calls: &[Call], iteration: u32) {
        self.messages.push(json!({
            "role": "assistant",
            "content": turn.content,
            "tool_calls": calls.iter().map(Call::to_openai).collect::<Vec<_>>(),
        }));
        // Arguments that are not JSON are an error result, like any other.
        let mut parsed: Vec<Result<ToolCall, ToolResult>> = Vec::with_capacity(calls.len());
        for c in calls {
            let args = if c.arguments.trim().is_empty() {
                Ok(json!({}))
            } else {
                serde_json::from_str::<Value>(&c.arguments)
            };
            parsed.push(match args {
                Ok(arguments) if self.l.gateway_tools.contains(&c.name) => Ok(ToolCall {
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
        // `spawn` (sub-agents) needs the model, so the loop runs it itself,
        // next to the executor's batch.
        let (spawns, batch): (Vec<ToolCall>, Vec<ToolCall>) = parsed
            .iter()
            .filter_map(|p| p.as_ref().ok().cloned())
            .partition(|c| c.name == subagent::SPAWN);
        let (batch_results, spawn_results) = futures::join!(
            self.l
                .executor
                .run_batch(&self.l.catalog, &batch, &self.l.context),
            self.run_spawns(&spawns),
        );
        let mut results = batch_results.into_iter();
        let mut spawn_results = spawn_results.into_iter();
        for (call, p) in calls.iter().zip(parsed) {
            let result = match p {
                Ok(c) => if c.name == subagent::SPAWN {
                    spawn_results.next()
                } else {
                    results.next()
                }
                .unwrap_or_else(|| failed(ToolError::Failed("the call did not run".into()))),
                // Refused before the executor (not in the set, arguments not
                // JSON): counted and audited like any call.
                Err(r) => {
                    let refused = ToolCall {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
                    };
                    self.l
                        .executor
                        .record(&self.l.catalog, &refused, &self.l.context, &r)
                        .await;
                    r
                }
            };
            tracing::info!(
                tool = %call.name,
                success = result.success,
                ms = result.duration_ms,
                iteration,
                formatter = self.mode.label(),
                "tool call"
            );
            self.report.calls.push(json!({
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
            self.messages.push(
                json!({"role": "tool", "tool_call_id": call.id, "content": result.to_model_text()}),
            );
        }
    }

    /// Runs `spawn` calls: validated like any call, then each call's tasks
    /// as sub-agents.
    async fn run_spawns(&self, calls: &[ToolCall]) -> Vec<ToolResult> {
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            let started = std::time::Instant::now();
            let outcome = match self.l.catalog.tool(subagent::SPAWN) {
                None => Err(ToolError::UnknownTool(call.name.clone())),
                Some(tool) => match tool.validate(&call.arguments) {
                    Err(errors) => Err(ToolError::InvalidArguments(errors)),
                    Ok(()) => {
                        let tasks: Vec<String> = call.arguments["tasks"]
                            .as_array()
                            .map(|t| {
                                t.iter()
                                    .filter_map(|v| v.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default();
                        subagent::run(&self.l, tasks).await
                    }
                },
            };
            let result = self.l.executor.finish(outcome, &self.l.catalog, started);
            self.l
                .executor
                .record(&self.l.catalog, call, &self.l.context, &result)
                .await;
            out.push(result);
        }
        out
    }

    fn stream(mut self, first: Reply) -> impl Stream<Item = Result<Event, Infallible>> {
        async_stream::stream! {
            let chunks = ChunkBuilder::new(&self.l.request.model);
            let mut pending = Some(first);
            let mut iteration = 1;
            let mut sent_role = false;
            loop {
                self.report.iterations = iteration;
                let next = match pending.take() {
                    Some(r) => Ok(r),
                    None => self.call(iteration, true).await,
                };
                let resp = match next {
                    Ok(r) => r,
                    Err(e) => {
                        yield Ok(error_event(e));
                        return;
                    }
                };
                let mut parser = match &self.mode {
                    Mode::Structured { offered, .. } => Some(StreamParser::with_options(offered.clone(), PARSE)),
                    Mode::FunctionCalling { .. } => None,
                };
                let mut turn = Turn::default();
                let limit = self.limits().max_upstream_response_bytes;
                let max_calls = self.limits().max_tool_calls_per_turn;
                let mut events = Box::pin(self.l.resolved.upstream.body_stream(resp, limit).eventsource());
                let mut finished = false;
                while let Some(ev) = events.next().await {
                    let ev = match ev {
                        Ok(ev) => ev,
                        // Over the byte cap or past the deadline.
                        Err(eventsource_stream::EventStreamError::Transport(e)) => {
                            yield Ok(error_event(ApiError::from(e)));
                            return;
                        }
                        Err(e) => {
                            yield Ok(error_event(self.invalid(format!("the stream broke: {e}"))));
                            return;
                        }
                    };
                    if ev.data.trim() == "[DONE]" {
                        finished = true;
                        break;
                    }
                    let Ok(chunk) = serde_json::from_str::<Value>(&ev.data) else {
                        yield Ok(error_event(self.invalid("a stream chunk is not JSON".into())));
                        return;
                    };
                    if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                        add_usage(&mut self.report.usage, u);
                    }
                    if let Some(e) = chunk.get("error") {
                        yield Ok(error_event(self.invalid(format!("it reported an error mid-stream: {e}"))));
                        return;
                    }
                    let Some(choice) = chunk.pointer("/choices/0") else { continue };
                    if let Some(reason) = choice["finish_reason"].as_str() {
                        turn.finish_reason = Some(reason.to_owned());
                    }
                    let delta = &choice["delta"];
                    if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                        let out = match &mut parser {
                            None => vec![StreamEvent::Content(text.to_owned())],
                            Some(p) => p.push(text),
                        };
                        for e in apply_events(out, &mut turn) {
                            yield Ok(data_event(&chunks.delta(with_role(e, &mut sent_role), None)));
                        }
                    }
                    if let Some(deltas) = delta["tool_calls"].as_array()
                        && let Err(e) = merge_call_deltas(&mut turn.calls, deltas, max_calls)
                    {
                        yield Ok(error_event(self.invalid(e)));
                        return;
                    }
                }
                if !finished && turn.finish_reason.is_none() {
                    yield Ok(error_event(self.invalid("the stream ended before the answer was complete".into())));
                    return;
                }
                if let Some(p) = parser.take() {
                    for e in apply_events(p.finish(), &mut turn) {
                        yield Ok(data_event(&chunks.delta(with_role(e, &mut sent_role), None)));
                    }
                }
                if let Err(e) = self.check_call_count(turn.calls.len()) {
                    yield Ok(error_event(e));
                    return;
                }
                let finish = match self.decide(&turn, iteration) {
                    Next::Run(calls) => {
                        self.run_calls(&turn, &calls, iteration).await;
                        iteration += 1;
                        continue;
                    }
                    Next::Answer => turn.finish_reason.clone().filter(|r| r != "tool_calls").unwrap_or_else(|| "stop".into()),
                    Next::OutOfIterations => "max_tool_iterations".to_owned(),
                    Next::ClientCalls(calls) => {
                        let deltas: Vec<Value> = calls.iter().enumerate().map(|(i, c)| {
                            json!({"index": i, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
                        }).collect();
                        yield Ok(data_event(&chunks.delta(with_role(json!({"tool_calls": deltas}), &mut sent_role), None)));
                        "tool_calls".to_owned()
                    }
                };
                crate::metrics::record(|m| m.loop_finished(iteration, &finish));
                let mut d = json!({});
                if !sent_role {
                    d["role"] = json!("assistant");
                    d["content"] = json!("");
                }
                let mut last = chunks.delta(d, Some(&finish));
                last["toolgate"] = self.report_json();
                yield Ok(data_event(&last));
                if self.l.request.include_usage && !self.report.usage.is_null() {
                    yield Ok(data_event(&chunks.usage(&self.report.usage)));
                }
                yield Ok(Event::default().data("[DONE]"));
                return;
            }
        }
    }

    fn invalid(&self, message: String) -> ApiError {
        ApiError::from(UpstreamError::Invalid {
            upstream: self.upstream_name().to_owned(),
            message,
        })
    }
}

/// Folds one streamed `tool_calls` delta into the turn's calls (OpenAI
/// streams each call as pieces keyed by `index`). The index sizes the list,
/// so one beyond `max` calls is refused before anything is allocated.
fn merge_call_deltas(calls: &mut Vec<Call>, deltas: &[Value], max: usize) -> Result<(), String> {
    for c in deltas {
        let idx = c["index"].as_u64().unwrap_or(calls.len() as u64);
        let Some(idx) = usize::try_from(idx).ok().filter(|i| *i < max) else {
            return Err(format!(
                "a streamed tool call has index {idx}, beyond {max} calls in one turn (limits.max_tool_calls_per_turn)"
            ));
        };
        while calls.len() <= idx {
            calls.push(Call {
                id: String::new(),
                name: String::new(),
                arguments: String::new(),
            });
        }
        let p = &mut calls[idx];
        if let Some(id) = c["id"].as_str() {
            p.id.push_str(id);
        }
        if let Some(n) = c.pointer("/function/name").and_then(Value::as_str) {
            p.name.push_str(n);
        }
        if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) {
            p.arguments.push_str(a);
        }
    }
    Ok(())
}

/// Folds parser events into the turn; returns the deltas to send.
fn apply_events(events: Vec<StreamEvent>, turn: &mut Turn) -> Vec<Value> {
    let mut out = Vec::new();
    for e in events {
        match e {
            StreamEvent::Content(t) if !t.is_empty() => {
                turn.content.get_or_insert_with(String::new).push_str(&t);
                out.push(json!({"content": t}));
            }
            StreamEvent::Reasoning(t) if !t.is_empty() => {
                turn.reasoning.get_or_insert_with(String::new).push_str(&t);
                out.push(json!({"reasoning_content": t}));
            }
            StreamEvent::Call(c) => turn.calls.push(Call::from_parsed(c)),
            _ => {}
        }
    }
    out
}

/// Adds `role: assistant` to the first delta of a response.
fn with_role(mut delta: Value, sent_role: &mut bool) -> Value {
    if !*sent_role {
        delta["role"] = json!("assistant");
        *sent_role = true;
    }
    delta
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

fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delta() -> impl Strategy<Value = Value> {
        (
            prop_oneof![
                Just(None),
                any::<u64>().prop_map(Some),
                (0u64..8).prop_map(Some)
            ],
            proptest::option::of("[a-z_]{0,8}"),
            proptest::option::of(".{0,16}"),
        )
            .prop_map(|(index, name, args)| {
                let mut d = json!({"function": {}});
                if let Some(i) = index {
                    d["index"] = json!(i);
                }
                if let Some(n) = name {
                    d["function"]["name"] = json!(n);
                }
                if let Some(a) = args {
                    d["function"]["arguments"] = json!(a);
                }
                d
            })
    }

    proptest! {
        /// Any sequence of streamed call pieces: no panic, never more calls
        /// than the cap, and an index beyond it is an error.
        #[test]
        fn streamed_call_deltas_are_bounded(chunks in prop::collection::vec(prop::collection::vec(delta(), 0..4), 0..16)) {
            let mut calls = Vec::new();
            for chunk in &chunks {
                let r = merge_call_deltas(&mut calls, chunk, 16);
                prop_assert!(calls.len() <= 16);
                if r.is_err() {
                    prop_assert!(chunk.iter().any(|c| c["index"].as_u64().is_some_and(|i| i >= 16)) || calls.len() >= 16);
                    break;
                }
            }
        }
    }

    #[test]
    fn a_huge_index_allocates_nothing() {
        let mut calls = Vec::new();
        let e =
            merge_call_deltas(&mut calls, &[json!({"index": 1_000_000_000u64})], 128).unwrap_err();
        assert!(e.contains("1000000000"), "{e}");
        assert!(calls.is_empty());
    }
}
