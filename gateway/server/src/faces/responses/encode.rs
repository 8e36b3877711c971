//! The loop's answer as a Responses response object (kept when the
//! request asks), and its events as Responses stream events.

use serde_json::{Map, Value, json};
use toolgate_engine::chat::stored::{Conversations, Stored};
use toolgate_engine::chat::{Answer, CallRecord, ChatError, Event, FinishReason, Summary};
use toolgate_engine::conversation::{Call, Item, Protocol, Reasoning, Role, Turn, Usage};

use super::super::common;
use super::decode::{Offered, TOOL_SEARCH};

/// Request fields a response repeats back, with the API's defaults where
/// the request has none (the response object has every field).
#[derive(Debug, Clone)]
pub struct Echo(Map<String, Value>);

impl Echo {
    pub fn of(req: &Value) -> Echo {
        let defaults = [
            ("instructions", Value::Null),
            ("tools", json!([])),
            ("tool_choice", json!("auto")),
            ("parallel_tool_calls", json!(true)),
            ("temperature", json!(1.0)),
            ("top_p", json!(1.0)),
            ("presence_penalty", json!(0.0)),
            ("frequency_penalty", json!(0.0)),
            ("top_logprobs", json!(0)),
            ("max_output_tokens", Value::Null),
            ("max_tool_calls", Value::Null),
            ("metadata", json!({})),
            ("text", json!({"format": {"type": "text"}})),
            ("reasoning", Value::Null),
            ("previous_response_id", Value::Null),
            ("service_tier", json!("default")),
            ("safety_identifier", Value::Null),
            ("prompt_cache_key", Value::Null),
        ];
        let mut echo = Map::new();
        for (k, default) in defaults {
            let v = req
                .get(k)
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(default);
            echo.insert(k.into(), v);
        }
        // Function tools with every field of their type.
        if let Some(tools) = echo.get_mut("tools").and_then(Value::as_array_mut) {
            for t in tools.iter_mut().filter(|t| t["type"] == "function") {
                if let Some(t) = t.as_object_mut() {
                    for k in ["description", "parameters", "strict"] {
                        t.entry(k).or_insert(Value::Null);
                    }
                }
            }
        }
        Echo(echo)
    }
}

/// The response object's fixed parts, filled in as the answer comes.
#[derive(Debug, Clone)]
pub struct Skeleton {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    pub offered: Offered,
    /// Where the response is kept, when the request asks.
    keep: Option<Keep>,
    /// The request asked for the model's reasoning encrypted
    /// (`include: ["reasoning.encrypted_content"]`).
    encrypted_reasoning: bool,
}

/// What a response is kept with (`store`, on unless `false`).
#[derive(Debug, Clone)]
pub struct Keep {
    /// `store` in the response object: kept for the key, not only by a
    /// WebSocket connection.
    pub stored: bool,
    pub store: Conversations,
    pub owner: Option<String>,
    /// The conversation before the answer.
    pub history: Vec<Turn>,
    pub input_items: Vec<Value>,
}

impl Keep {
    /// Keeps `response` with the conversation it ends (its text and the
    /// client's calls as the assistant's message).
    fn save(&self, response: &Value) {
        let mut text = String::new();
        let mut calls = Vec::new();
        for item in response["output"].as_array().into_iter().flatten() {
            match item["type"].as_str() {
                Some("message") => {
                    for part in item["content"].as_array().into_iter().flatten() {
                        text.push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
                Some("function_call") => calls.push(Item::Call(Call::new(
                    item["call_id"].as_str().unwrap_or_default(),
                    Offered::flat_name_of(item),
                    item["arguments"].as_str().unwrap_or_default(),
                ))),
                Some("tool_search_call") if item["execution"] == "client" => {
                    calls.push(Item::Call(Call::new(
                        item["call_id"].as_str().unwrap_or_default(),
                        TOOL_SEARCH,
                        item["arguments"].to_string(),
                    )))
                }
                _ => {}
            }
        }
        let mut answer = Vec::new();
        if !text.is_empty() {
            answer.push(Item::text(text));
        }
        answer.extend(calls);
        let mut turns = self.history.clone();
        turns.push(Turn::new(Role::Assistant, answer));
        let id = response["id"].as_str().unwrap_or_default();
        let kept = self.store.put(
            id,
            Stored {
                owner: self.owner.clone(),
                turns,
                input_items: self.input_items.clone(),
                response: response.clone(),
            },
        );
        if !kept {
            tracing::info!("response {id} is too large to keep");
        }
    }
}

/// A request's `input` as items (a string is one user message).
pub fn input_items(req: &Value) -> Vec<Value> {
    match req.get("input") {
        Some(Value::String(text)) => vec![json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

impl Skeleton {
    pub fn new(model: &str, echo: Echo, offered: Offered, keep: Option<Keep>) -> Skeleton {
        Skeleton {
            id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
            created_at: common::unix_now(),
            model: model.to_owned(),
            echo,
            offered,
            keep,
            encrypted_reasoning: false,
        }
    }

    /// Shows the model's reasoning with its encrypted content.
    pub fn with_encrypted_reasoning(mut self, yes: bool) -> Skeleton {
        self.encrypted_reasoning = yes;
        self
    }

    /// A reasoning item, when a model of Responses reasoned (a client
    /// sends it back; the encrypted content when the request asked).
    fn reasoning_item(&self, r: &Reasoning) -> Option<Value> {
        let o = r
            .opaque
            .as_ref()
            .filter(|o| o.protocol == Protocol::OpenaiResponses)?;
        let summary: Vec<Value> = if r.text.is_empty() {
            Vec::new()
        } else {
            vec![json!({"type": "summary_text", "text": r.text})]
        };
        let mut item = json!({"type": "reasoning", "id": item_id("rs"), "summary": summary});
        if self.encrypted_reasoning {
            item["encrypted_content"] = json!(o.data);
        }
        Some(item)
    }

    /// The response object with `status`, `output` and what else is known.
    fn object(&self, status: &str, output: Vec<Value>, summary: Option<&Summary>) -> Value {
        let mut r = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": null,
            "status": status,
            "model": self.model,
            "output": output,
            "error": null,
            "incomplete_details": null,
            "store": self.keep.as_ref().is_some_and(|k| k.stored),
            "background": false,
            "truncation": "disabled",
            "usage": null,
        });
        if let Some(obj) = r.as_object_mut() {
            obj.extend(self.echo.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(s) = summary {
            r["usage"] = usage(&s.usage);
            r["toolgate"] = common::report(s);
            r["completed_at"] = json!(common::unix_now());
            if s.finish == FinishReason::Length {
                r["status"] = json!("incomplete");
                r["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
        }
        r
    }

    /// A whole answer as a response object.
    pub fn complete(&self, answer: Answer) -> Value {
        let mut output: Vec<Value> = answer
            .summary
            .report
            .tool_calls
            .iter()
            .flat_map(|c| self.gateway_items(c))
            .collect();
        output.extend(
            answer
                .reasoning_items
                .iter()
                .filter_map(|r| self.reasoning_item(r)),
        );
        if let Some(text) = answer.content.filter(|t| !t.is_empty()) {
            output.push(message_item(&item_id("msg"), &text, "completed"));
        }
        output.extend(
            answer
                .client_calls
                .iter()
                .map(|c| self.client_item(c, "completed")),
        );
        let response = self.object("completed", output, Some(&answer.summary));
        if let Some(keep) = &self.keep {
            keep.save(&response);
        }
        response
    }
}

pub fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

impl Skeleton {
    /// A gateway call as output items: the search of deferred tools as
    /// OpenAI's own (`tool_search_call` and the `tool_search_output` that
    /// loads the tools found, as the client defined them), any other as an
    /// `mcp_call`.
    fn gateway_items(&self, c: &CallRecord) -> Vec<Value> {
        if c.function.name != TOOL_SEARCH || self.offered.deferred.is_empty() {
            return vec![mcp_call(c, "completed")];
        }
        let arguments: Value = serde_json::from_str(&c.function.arguments).unwrap_or(json!({}));
        let tools: Vec<Value> = toolgate_engine::tools::discovery::found_names(&c.result)
            .filter_map(|n| self.offered.deferred.get(n).cloned())
            .collect();
        let status = if c.success { "completed" } else { "incomplete" };
        vec![
            json!({"type": "tool_search_call", "id": format!("tsc_{}", c.id), "call_id": c.id,
                   "execution": "server", "status": status, "arguments": arguments}),
            json!({"type": "tool_search_output", "id": format!("tso_{}", c.id), "call_id": c.id,
                   "execution": "server", "status": status, "tools": tools}),
        ]
    }

    /// A client call as an output item: a `function_call` (with its
    /// `namespace` when the tool was offered in one), or the client's own
    /// `tool_search` as a `tool_search_call`.
    fn client_item(&self, c: &Call, status: &str) -> Value {
        if self.offered.is_client_search(&c.name) {
            let arguments: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
            return json!({"type": "tool_search_call", "id": item_id("tsc"), "call_id": c.id,
                          "execution": "client", "status": status, "arguments": arguments});
        }
        function_call(&item_id("fc"), c, status, &self.offered)
    }
}

/// A client call as a `function_call` item, with its `namespace` when the
/// tool was offered in one.
fn function_call(id: &str, c: &Call, status: &str, offered: &Offered) -> Value {
    let (namespace, name) = offered.split(&c.name);
    let mut item = json!({"type": "function_call", "id": id, "call_id": c.id, "name": name, "arguments": c.arguments, "status": status});
    if let Some(ns) = namespace {
        item["namespace"] = json!(ns);
    }
    item
}

/// A gateway tool call as the item of a tool the server ran.
fn mcp_call(c: &CallRecord, status: &str) -> Value {
    let mut item = json!({
        "type": "mcp_call",
        "id": format!("mcp_{}", c.id),
        "server_label": "toolgate",
        "name": c.function.name,
        "arguments": c.function.arguments,
        "status": status,
        "output": null,
        "error": null,
    });
    if c.success {
        item["output"] = match &c.result {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        };
    } else {
        item["error"] = json!(c.result.as_str().unwrap_or("the call failed"));
    }
    item
}

pub fn usage(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input,
        "input_tokens_details": {"cached_tokens": usage.cache_read},
        "output_tokens": usage.output,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning},
        "total_tokens": usage.total(),
    })
}

/// Encodes a loop's events as Responses stream events.
pub struct StreamEncoder {
    skeleton: Skeleton,
    sequence: u64,
    started: bool,
    /// Output items so far (for `response.completed`).
    output: Vec<Value>,
    /// The message item being written: its id and text.
    text: Option<(String, String)>,
    /// The reasoning streamed so far, shown whole once its encrypted
    /// content comes.
    reasoning: String,
}

impl StreamEncoder {
    pub fn new(skeleton: Skeleton) -> StreamEncoder {
        StreamEncoder {
            skeleton,
            sequence: 0,
            started: false,
            output: Vec::new(),
            text: None,
            reasoning: String::new(),
        }
    }

    fn event(&mut self, kind: &str, mut data: Value) -> Value {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        data
    }

    /// Adds `item` as a finished output item (added, then done).
    fn whole_item(&mut self, item: Value, out: &mut Vec<Value>) {
        let index = self.output.len();
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        let Some((id, text)) = self.text.take() else {
            return;
        };
        let index = self.output.len();
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        out.push(self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
        ));
        out.push(self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        ));
        let item = message_item(&id, &text, "completed");
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
    }

    pub fn encode(&mut self, event: Event) -> Vec<Value> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            let created = self.skeleton.object("in_progress", Vec::new(), None);
            out.push(self.event("response.created", json!({"response": created})));
            let progress = self.skeleton.object("in_progress", Vec::new(), None);
            out.push(self.event("response.in_progress", json!({"response": progress})));
        }
        match event {
            Event::Content(delta) => {
                let index = self.output.len();
                if self.text.is_none() {
                    let id = item_id("msg");
                    let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    ));
                    self.text = Some((id, String::new()));
                }
                let id = match &mut self.text {
                    Some((id, text)) => {
                        text.push_str(&delta);
                        id.clone()
                    }
                    None => String::new(),
                };
                out.push(self.event(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
                ));
            }
            Event::Reasoning(t) => self.reasoning.push_str(&t),
            Event::ReasoningOpaque(o) => {
                let r = Reasoning {
                    text: std::mem::take(&mut self.reasoning),
                    opaque: Some(o),
                };
                if let Some(item) = self.skeleton.reasoning_item(&r) {
                    self.close_text(&mut out);
                    self.whole_item(item, &mut out);
                }
            }
            Event::ToolProgress(_) => {}
            Event::ToolCallStarted(_) => self.close_text(&mut out),
            Event::ToolCallDone(record) => {
                self.close_text(&mut out);
                for item in self.skeleton.gateway_items(&record) {
                    self.whole_item(item, &mut out);
                }
            }
            Event::ClientCalls(calls) => {
                self.close_text(&mut out);
                for c in &calls {
                    if self.skeleton.offered.is_client_search(&c.name) {
                        let item = self.skeleton.client_item(c, "completed");
                        self.whole_item(item, &mut out);
                        continue;
                    }
                    let index = self.output.len();
                    let id = item_id("fc");
                    let mut item = function_call(&id, c, "in_progress", &self.skeleton.offered);
                    item["arguments"] = json!("");
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    out.push(self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": c.arguments}),
                    ));
                    out.push(self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": id, "output_index": index, "arguments": c.arguments}),
                    ));
                    let item = function_call(&id, c, "completed", &self.skeleton.offered);
                    out.push(self.event(
                        "response.output_item.done",
                        json!({"output_index": index, "item": item}),
                    ));
                    self.output.push(item);
                }
            }
            Event::Done(summary) => {
                self.close_text(&mut out);
                let output = std::mem::take(&mut self.output);
                let response = self.skeleton.object("completed", output, Some(&summary));
                if let Some(keep) = &self.skeleton.keep {
                    keep.save(&response);
                }
                let kind = match response["status"].as_str() {
                    Some("incomplete") => "response.incomplete",
                    _ => "response.completed",
                };
                out.push(self.event(kind, json!({"response": response})));
            }
            Event::Failed(e) => {
                self.close_text(&mut out);
                out.push(self.failed(&e));
            }
        }
        out
    }

    /// A failure after the stream started: `response.failed`.
    fn failed(&mut self, e: &ChatError) -> Value {
        tracing::warn!("stream failed: {e}");
        let output = std::mem::take(&mut self.output);
        let mut response = self.skeleton.object("failed", output, None);
        response["error"] = json!({"code": e.code(), "message": e.to_string()});
        self.event("response.failed", json!({"response": response}))
    }
}
