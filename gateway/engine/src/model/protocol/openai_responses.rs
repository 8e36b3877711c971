//! OpenAI's Responses as a model protocol: `POST {base}/responses`, a
//! response object's `output` items and its `response.*` event stream.
//!
//! A Responses request keeps the client's fields as they came; `model`,
//! `instructions`, `input`, `tools`, `tool_choice` and `stream` are the
//! gateway's, and the client's items go as they came. The model's own
//! output items go back as it wrote them (its reasoning with its
//! `encrypted_content`, in order, ids left out as Codex does so that
//! `store: false` works); a request that does not store asks for the
//! encrypted reasoning (`include`), which the loop replays. Other faces'
//! turns are written from their items.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::{Decoded, Delta, Outgoing, Step, foreign_note};
use crate::conversation::{
    Call, CallResult, FinishReason, Item, Media, MediaKind, Native, Notices, Opaque, Protocol,
    Reasoning, Role, Slot, Source, ToolChoice, ToolDef, Turn, raw,
};

const PROTOCOL: Protocol = Protocol::OpenaiResponses;

/// What the loop needs returned to replay a model's reasoning when the
/// request stores nothing.
const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

/// The request body of one model call.
pub fn encode(call: &Outgoing<'_>, notices: &mut Notices) -> Bytes {
    let req = call.request;
    let same = req.face == PROTOCOL;
    let mut body: IndexMap<&str, Part<'_>, foldhash::fast::RandomState> = IndexMap::default();
    if same {
        for (k, v) in &req.fields {
            body.insert(k.as_str(), Part::Raw(v));
        }
    }
    if !same || req.fields.is_empty() {
        typed_params(call, &mut body, notices);
        // The gateway's own request stores nothing and asks for the
        // reasoning it replays.
        body.insert("store", Part::Value(json!(false)));
        body.insert("include", Part::Value(json!([ENCRYPTED_REASONING])));
    } else if req.field("store") == Some(json!(false)) {
        let mut include: Vec<Value> = match req.field("include") {
            Some(Value::Array(i)) => i,
            _ => Vec::new(),
        };
        if !include.iter().any(|i| i == ENCRYPTED_REASONING) {
            include.push(json!(ENCRYPTED_REASONING));
            body.insert("include", Part::Value(Value::Array(include)));
        }
    }
    if !same {
        for name in &req.untyped {
            notices.add(format!(
                "`{name}` ({}) is not carried to a model of {PROTOCOL} and was left out",
                req.face
            ));
        }
    }
    let (instructions, input) = conversation(call.turns, notices);
    body.insert("model", Part::Value(json!(call.model)));
    match instructions {
        Some(i) => body.insert("instructions", i),
        None => body.shift_remove("instructions"),
    };
    body.insert("input", Part::Input(input));
    let hosted = if same { &req.hosted[..] } else { &[] };
    if call.tools.is_empty() && hosted.is_empty() {
        body.shift_remove("tools");
        body.shift_remove("tool_choice");
        body.shift_remove("parallel_tool_calls");
    } else {
        let tools = super::with_hosted(call.tools.json(PROTOCOL, tool), hosted, PROTOCOL);
        body.insert("tools", Part::Json(tools));
        let choice = match (&call.tool_choice, same) {
            (Some(c), _) => Some(c),
            (None, false) => req.tool_choice.as_ref(),
            (None, true) => None,
        };
        if let Some(choice) = choice {
            body.insert("tool_choice", Part::Value(tool_choice(choice)));
        }
    }
    if call.stream {
        body.insert("stream", Part::Value(json!(true)));
    } else {
        body.shift_remove("stream");
        body.shift_remove("stream_options");
    }
    super::body(serde_json::to_vec(&body).unwrap_or_default())
}

/// The typed sampling fields, as Responses names them.
fn typed_params<'a>(
    call: &Outgoing<'a>,
    body: &mut IndexMap<&'a str, Part<'a>, foldhash::fast::RandomState>,
    notices: &mut Notices,
) {
    let p = &call.request.params;
    if let Some(t) = p.temperature {
        body.insert("temperature", Part::Value(json!(t)));
    }
    if let Some(t) = p.top_p {
        body.insert("top_p", Part::Value(json!(t)));
    }
    if let Some(m) = p.max_tokens {
        body.insert("max_output_tokens", Part::Value(json!(m)));
    }
    if let Some(parallel) = p.parallel_tool_calls {
        body.insert("parallel_tool_calls", Part::Value(json!(parallel)));
    }
    if let Some(effort) = &p.reasoning_effort {
        body.insert("reasoning", Part::Value(json!({"effort": effort})));
    }
    if let Some(f) = &p.response_format {
        let format = match &f.schema {
            Some(schema) => {
                let mut s = json!({"type": "json_schema", "name": f.name.as_deref().unwrap_or("answer"), "schema": schema});
                if let Some(strict) = f.strict {
                    s["strict"] = json!(strict);
                }
                s
            }
            None => json!({"type": "json_object"}),
        };
        body.insert("text", Part::Value(json!({"format": format})));
    }
    if !p.stop.is_empty() {
        notices.add(format!(
            "stop sequences are not carried to a model of {PROTOCOL} (it has none) and were left out"
        ));
    }
}

/// A tool as Responses offers it (flat, no `function` wrapper).
pub fn tool(spec: &ToolDef) -> Value {
    if let Some(n) = spec.native.as_ref().filter(|n| n.protocol == PROTOCOL) {
        return n.value.clone();
    }
    let mut t = Map::new();
    t.insert("type".into(), json!("function"));
    t.insert("name".into(), json!(spec.name));
    if let Some(d) = &spec.description {
        t.insert("description".into(), json!(d));
    }
    t.insert("parameters".into(), Value::clone(&spec.parameters));
    t.insert("strict".into(), json!(spec.strict.unwrap_or(false)));
    Value::Object(t)
}

pub fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "name": name}),
    }
}

/// One field of the body.
enum Part<'a> {
    Raw(&'a RawValue),
    Json(std::borrow::Cow<'a, RawValue>),
    Input(Vec<Entry<'a>>),
    Value(Value),
}

impl Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Raw(v) => v.serialize(s),
            Part::Json(v) => v.serialize(s),
            Part::Input(v) => v.serialize(s),
            Part::Value(v) => v.serialize(s),
        }
    }
}

/// One input item: as it came, or written from items.
enum Entry<'a> {
    Raw(&'a RawValue),
    Built(Value),
}

impl Serialize for Entry<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Raw(v) => v.serialize(s),
            Entry::Built(v) => v.serialize(s),
        }
    }
}

/// The conversation as `instructions` and `input` items.
fn conversation<'a>(
    turns: &'a [Turn],
    notices: &mut Notices,
) -> (Option<Part<'a>>, Vec<Entry<'a>>) {
    let mut instructions: Option<Part<'a>> = None;
    let mut input = Vec::with_capacity(turns.len());
    for (i, turn) in turns.iter().enumerate() {
        if let Some((o, raw)) = turn.kept_for(PROTOCOL) {
            match o.slot {
                Slot::System if instructions.is_none() => instructions = Some(Part::Raw(raw)),
                Slot::System => input.push(Entry::Built(
                    json!({"role": "developer", "content": turn.text()}),
                )),
                // The model's turn: its output items, one after another.
                Slot::Message if raw.get().starts_with('[') => {
                    if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw.get()) {
                        input.extend(items.into_iter().map(Entry::Raw));
                    }
                }
                Slot::Message => input.push(Entry::Raw(raw)),
            }
            continue;
        }
        match turn.role {
            Role::System if i == 0 && instructions.is_none() => {
                instructions = Some(Part::Value(json!(turn.text())));
            }
            Role::System => input.push(Entry::Built(
                json!({"role": "developer", "content": turn.text()}),
            )),
            Role::User => user(turn, &mut input, notices),
            Role::Assistant => assistant(turn, &mut input, notices),
        }
    }
    (instructions, input)
}

/// Media as an input content part (`None` when Responses cannot hold it).
fn media_part(m: &Media) -> Option<Value> {
    match (m.kind, &m.source) {
        (MediaKind::Image, Source::FileId { id }) => Some(
            json!({"type": "input_image", "file_id": id, "detail": m.detail.as_deref().unwrap_or("auto")}),
        ),
        (MediaKind::Image, source) => {
            Some(json!({"type": "input_image", "image_url": source.url()?,
            "detail": m.detail.as_deref().unwrap_or("auto")}))
        }
        (MediaKind::Document | MediaKind::File, source) => {
            let mut f = json!({"type": "input_file"});
            match source {
                Source::FileId { id } => f["file_id"] = json!(id),
                Source::Url { url } if !url.starts_with("data:") => f["file_url"] = json!(url),
                Source::Text { .. } => return None,
                other => f["file_data"] = json!(other.url()?),
            }
            if let Some(n) = &m.name {
                f["filename"] = json!(n);
            }
            Some(f)
        }
        (MediaKind::Audio | MediaKind::Video, _) => None,
    }
}

fn media_or_notice(m: &Media, notices: &mut Notices) -> Option<Value> {
    let part = media_part(m);
    if part.is_none() {
        notices.add(format!(
            "a {:?} {PROTOCOL} cannot hold was left out",
            m.kind
        ));
    }
    part
}

fn output(r: &CallResult, notices: &mut Notices) -> Value {
    let text = if r.is_error {
        format!("Error: {}", r.text)
    } else {
        r.text.clone()
    };
    if r.media.is_empty() {
        return json!({"type": "function_call_output", "call_id": r.call_id, "output": text});
    }
    let mut parts = vec![json!({"type": "input_text", "text": text})];
    parts.extend(r.media.iter().filter_map(|m| media_or_notice(m, notices)));
    json!({"type": "function_call_output", "call_id": r.call_id, "output": parts})
}

/// A user's turn: its results (they answer the calls before), then a
/// message of its text and media.
fn user<'a>(turn: &'a Turn, input: &mut Vec<Entry<'a>>, notices: &mut Notices) {
    let mut parts = Vec::new();
    for item in &turn.items {
        match item {
            Item::Result(r) => input.push(Entry::Built(output(r, notices))),
            Item::Text { text } => parts.push(json!({"type": "input_text", "text": text})),
            Item::Media { media } => parts.extend(media_or_notice(media, notices)),
            Item::Native(n) if n.protocol == PROTOCOL => input.push(Entry::Built(n.value.clone())),
            other => {
                if foreign_note(other, PROTOCOL, notices) {
                    notices.add(
                        "calls and reasoning in a user's turn are not carried and were left out",
                    );
                }
            }
        }
    }
    if !parts.is_empty() {
        input.push(Entry::Built(json!({"role": "user", "content": parts})));
    }
}

fn function_call(c: &Call) -> Value {
    json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
}

/// An assistant's turn, item by item: its reasoning of Responses with its
/// encrypted content, its text as a message, its calls, a result it holds
/// in place.
fn assistant<'a>(turn: &'a Turn, input: &mut Vec<Entry<'a>>, notices: &mut Notices) {
    let mut text: Vec<Value> = Vec::new();
    let flush = |text: &mut Vec<Value>, input: &mut Vec<Entry<'a>>| {
        if !text.is_empty() {
            input.push(Entry::Built(
                json!({"type": "message", "role": "assistant", "content": std::mem::take(text)}),
            ));
        }
    };
    for item in &turn.items {
        match item {
            Item::Reasoning(Reasoning {
                text: words,
                opaque: Some(o),
            }) if o.protocol == PROTOCOL => {
                flush(&mut text, input);
                let summary: Vec<Value> = if words.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": words})]
                };
                input.push(Entry::Built(
                    json!({"type": "reasoning", "summary": summary, "encrypted_content": o.data}),
                ));
            }
            Item::Text { text: t } => {
                text.push(json!({"type": "output_text", "text": t, "annotations": []}))
            }
            Item::Call(c) => {
                flush(&mut text, input);
                input.push(Entry::Built(function_call(c)));
            }
            Item::Result(r) => {
                flush(&mut text, input);
                input.push(Entry::Built(output(r, notices)));
            }
            Item::Native(n) if n.protocol == PROTOCOL => {
                flush(&mut text, input);
                input.push(Entry::Built(n.value.clone()));
            }
            Item::Media { .. } => {
                notices.add("media in an assistant's turn is not carried and was left out")
            }
            other => {
                foreign_note(other, PROTOCOL, notices);
            }
        }
    }
    flush(&mut text, input);
}

/// How a response ended: its status, why it is incomplete, whether it
/// called.
fn finish(response: &Value, called: bool) -> FinishReason {
    match response["status"].as_str() {
        Some("incomplete") => match response["incomplete_details"]["reason"].as_str() {
            Some("content_filter") => FinishReason::ContentFilter,
            _ => FinishReason::Length,
        },
        _ if called => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// An output item as the model reads it back in a later request: without
/// its id and status (which `store: false` does not keep).
fn replayable(item: &Value) -> Value {
    let mut item = item.clone();
    if let Some(o) = item.as_object_mut() {
        o.remove("id");
        o.remove("status");
    }
    item
}

/// The deltas of one whole output item; `calls` counts the calls so far.
fn item_deltas(item: &Value, calls: &mut usize, deltas: &mut Vec<Delta>) {
    match item["type"].as_str() {
        Some("message") => {
            for part in item["content"].as_array().into_iter().flatten() {
                let text = part["text"].as_str().or_else(|| part["refusal"].as_str());
                if let Some(t) = text {
                    deltas.push(Delta::Text(t.to_owned()));
                }
            }
        }
        Some("reasoning") => {
            let words: Vec<&str> = item["summary"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(item["content"].as_array().into_iter().flatten())
                .filter_map(|s| s["text"].as_str())
                .collect();
            if !words.is_empty() {
                deltas.push(Delta::Reasoning(words.join("\n")));
            }
            if let Some(e) = item["encrypted_content"].as_str() {
                deltas.push(Delta::ReasoningOpaque(Opaque::new(PROTOCOL, e)));
            }
        }
        Some("function_call") => {
            deltas.push(Delta::Call {
                index: *calls,
                id: item["call_id"].as_str().map(str::to_owned),
                name: item["name"].as_str().map(str::to_owned),
                arguments: Some(item["arguments"].as_str().unwrap_or("{}").to_owned()),
                opaque: None,
            });
            *calls += 1;
        }
        other => deltas.push(Delta::Native(Native {
            protocol: PROTOCOL,
            what: format!("`{}` items", other.unwrap_or("untyped")),
            value: item.clone(),
        })),
    }
}

/// A whole response as deltas; the response is its envelope.
pub fn decode(body: &[u8]) -> Result<Decoded, String> {
    let response: Value =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON response: {e}"))?;
    if response["status"] == "failed" {
        return Err(format!(
            "the response failed: {}",
            response["error"]["message"]
                .as_str()
                .unwrap_or("no message")
        ));
    }
    let Some(items) = response.get("output").and_then(Value::as_array) else {
        return Err("the response has no `output`".into());
    };
    let mut deltas = Vec::new();
    let mut calls = 0;
    for item in items {
        item_deltas(item, &mut calls, &mut deltas);
    }
    deltas.push(Delta::Finish(finish(&response, calls > 0)));
    if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
        deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u.clone())));
    }
    let replay: Vec<Value> = items.iter().map(replayable).collect();
    deltas.push(Delta::Replay(raw(&replay)));
    Ok(Decoded {
        deltas,
        model: response
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        envelope: super::Envelope::Read(Native {
            protocol: PROTOCOL,
            what: "response".into(),
            value: response,
        }),
    })
}

/// The decoder of a Responses event stream: text, reasoning and call
/// pieces as they come, each item taken whole from `output_item.done`
/// (for the replay), usage and how it ended from the terminal event.
#[derive(Debug, Default)]
pub struct Stream {
    /// A `function_call` item's id to its call's index.
    calls: Vec<(String, usize)>,
    /// The output items done, in order.
    items: Vec<Value>,
    done: bool,
}

/// The most output items one streamed response may have.
const MAX_ITEMS: usize = 4096;

impl Stream {
    pub fn event(&mut self, name: &str, data: &str) -> Result<Step, String> {
        let ev: Value =
            serde_json::from_str(data).map_err(|_| "a stream event is not JSON".to_owned())?;
        let kind = ev["type"].as_str().unwrap_or(name);
        let mut deltas = Vec::new();
        match kind {
            "response.output_item.added" if ev["item"]["type"] == "function_call" => {
                let index = self.calls.len();
                let item_id = ev["item"]["id"].as_str().unwrap_or_default().to_owned();
                self.calls.push((item_id, index));
                deltas.push(Delta::Call {
                    index,
                    id: ev["item"]["call_id"].as_str().map(str::to_owned),
                    name: ev["item"]["name"].as_str().map(str::to_owned),
                    arguments: None,
                    opaque: None,
                });
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(t) = ev["delta"].as_str().filter(|t| !t.is_empty()) {
                    deltas.push(Delta::Text(t.to_owned()));
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(t) = ev["delta"].as_str().filter(|t| !t.is_empty()) {
                    deltas.push(Delta::Reasoning(t.to_owned()));
                }
            }
            "response.function_call_arguments.delta" => {
                let item = ev["item_id"].as_str().unwrap_or_default();
                if let Some((_, index)) = self.calls.iter().find(|(id, _)| id == item) {
                    deltas.push(Delta::Call {
                        index: *index,
                        id: None,
                        name: None,
                        arguments: ev["delta"].as_str().map(str::to_owned),
                        opaque: None,
                    });
                }
            }
            "response.output_item.done" => {
                if self.items.len() >= MAX_ITEMS {
                    return Err(format!(
                        "the response has more than {MAX_ITEMS} output items"
                    ));
                }
                let item = &ev["item"];
                match item["type"].as_str() {
                    Some("reasoning") => {
                        if let Some(e) = item["encrypted_content"].as_str() {
                            deltas.push(Delta::ReasoningOpaque(Opaque::new(PROTOCOL, e)));
                        }
                    }
                    Some("message" | "function_call") => {}
                    _ => item_deltas(item, &mut 0, &mut deltas),
                }
                self.items.push(item.clone());
            }
            "response.completed" | "response.incomplete" => {
                self.done = true;
                let response = &ev["response"];
                deltas.push(Delta::Finish(finish(response, !self.calls.is_empty())));
                if let Some(u) = response.get("usage").filter(|u| u.is_object()) {
                    deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u.clone())));
                }
                let replay: Vec<Value> = self.items.iter().map(replayable).collect();
                deltas.push(Delta::Replay(raw(&replay)));
                return Ok(Step { deltas, done: true });
            }
            "response.failed" => {
                return Err(format!(
                    "the response failed: {}",
                    ev["response"]["error"]["message"]
                        .as_str()
                        .unwrap_or("no message")
                ));
            }
            "error" => {
                let message = ev["message"]
                    .as_str()
                    .or_else(|| ev["error"]["message"].as_str())
                    .unwrap_or("no message");
                return Err(format!("it reported an error mid-stream: {message}"));
            }
            _ => {}
        }
        Ok(Step {
            deltas,
            done: false,
        })
    }

    /// A terminal event came.
    pub fn complete(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Request;
    use crate::model::protocol::{Assembly, Tools};

    #[test]
    fn a_responses_request_keeps_its_fields_and_asks_for_the_reasoning_it_replays() {
        let body = json!({"model": "alias", "store": false, "prompt_cache_key": "k",
            "input": [{"role": "user", "content": "hi"}], "reasoning": {"effort": "high"}});
        let mut req = Request::new(PROTOCOL, "m");
        req.fields = body
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), raw(v)))
            .collect();
        let turns = [
            Turn::decoded(
                Role::User,
                vec![Item::text("hi")],
                PROTOCOL,
                Slot::Message,
                raw(&body["input"][0]),
            ),
            Turn {
                role: Role::Assistant,
                items: vec![Item::Call(Call::new("c1", "t", "{}"))],
                origin: Some(crate::conversation::Origin {
                    protocol: PROTOCOL,
                    slot: Slot::Message,
                    raw: raw(&json!([
                        {"type": "reasoning", "summary": [], "encrypted_content": "enc"},
                        {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"}])).into(),
                    untyped: Vec::new(),
                    made_by: Some("gpt".into()),
                }),
            },
            Turn::new(Role::User, vec![Item::Result(CallResult::text("c1", "42"))]),
        ];
        let call = Outgoing {
            request: &req,
            model: "real",
            turns: &turns,
            tools: Tools(&[]),
            tool_choice: None,
            stream: true,
        };
        let encoded = encode(&call, &mut Notices::default());
        // The conversation's raw fields given back, the body is the same:
        // they are written from the turns, in place.
        crate::model::protocol::assert_encodes_the_same_once_released(&call, encode, &["input"]);
        let v: Value = serde_json::from_slice(&encoded).unwrap();
        assert_eq!(v["model"], "real");
        assert_eq!(v["prompt_cache_key"], "k");
        assert_eq!(v["include"], json!([ENCRYPTED_REASONING]));
        assert_eq!(
            v["input"],
            json!([
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "summary": [], "encrypted_content": "enc"},
                {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ])
        );
    }

    #[test]
    fn whole_and_streamed_responses_give_the_same_turn() {
        let whole = json!({"id": "resp_1", "status": "completed", "model": "gpt",
            "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "enc1"},
                {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "c1", "name": "t", "arguments": "{\"a\":1}"}],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3}}});
        let d = decode(whole.to_string().as_bytes()).unwrap();
        let mut a = Assembly::default();
        for delta in d.deltas {
            a.push(delta, 8).unwrap();
        }
        let events = [
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}),
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"id": "rs_1", "type": "reasoning", "summary": []}}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "thi"}),
            json!({"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "nk"}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": whole["output"][0]}),
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "t", "arguments": ""}}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{\"a\""}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": ":1}"}),
            json!({"type": "response.output_item.done", "output_index": 1, "item": whole["output"][1]}),
            json!({"type": "response.completed", "response": whole}),
        ];
        let mut s = Stream::default();
        let mut b = Assembly::default();
        for e in events {
            for delta in s.event("", &e.to_string()).unwrap().deltas {
                b.push(delta, 8).unwrap();
            }
        }
        assert!(s.complete());
        assert_eq!(a.items(), b.items());
        assert_eq!(a.finish, Some(FinishReason::ToolCalls));
        assert_eq!(a.finish, b.finish);
        assert_eq!(
            (a.usage.input, a.usage.cache_read, a.usage.reasoning),
            (10, 4, 3)
        );
        let ra: Value = serde_json::from_str(a.replay.as_ref().unwrap().get()).unwrap();
        let rb: Value = serde_json::from_str(b.replay.as_ref().unwrap().get()).unwrap();
        assert_eq!(ra, rb);
        assert_eq!(
            ra[0],
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "enc1"})
        );
    }

    #[test]
    fn failures_and_errors_are_errors() {
        assert!(
            decode(br#"{"status": "failed", "error": {"message": "boom"}}"#)
                .unwrap_err()
                .contains("boom")
        );
        let mut s = Stream::default();
        assert!(
            s.event("", r#"{"type":"error","error":{"message":"too long"}}"#)
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            s.event("", r#"{"type":"error","message":"flat"}"#)
                .unwrap_err()
                .contains("flat")
        );
    }
}
