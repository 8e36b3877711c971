//! Anthropic's Messages as a model protocol: `POST {base}/messages`, a
//! `message` answer and its stream of `message_start` …
//! `content_block_*` … `message_stop` events.
//!
//! A Messages request keeps the client's fields as they came (`thinking`,
//! `metadata`, `cache_control`, betas in its headers…); only `model`,
//! `system`, `messages`, `tools`, `tool_choice` and `stream` are the
//! gateway's, and the client's messages go as they came. The model's own
//! turns go back as it wrote them (`Delta::Replay`): a thinking block and
//! its signature reach the next call unchanged and in order, which the API
//! checks. Other faces' turns are written from their items; reasoning signed
//! by another protocol is left out with a notice.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::written::{self, Written};
use super::{Decoded, Delta, Outgoing, Step, foreign_note};
use crate::conversation::{
    Call, CallResult, FinishReason, Item, Media, MediaKind, Native, Notices, Opaque, Protocol,
    Reasoning, Role, Slot, Source, ToolChoice, ToolDef, Turn, raw,
};

const PROTOCOL: Protocol = Protocol::Anthropic;

/// `max_tokens` is required: what a request of another protocol that says
/// none gets.
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// The most `cache_control` markers one request may carry.
pub const MAX_CACHE_MARKERS: usize = 4;

/// The request body of one model call.
pub fn encode(call: &Outgoing<'_>, notices: &mut Notices) -> Bytes {
    let req = call.request;
    let same = req.face == PROTOCOL;
    let mut parts: IndexMap<&str, Value, foldhash::fast::RandomState> = IndexMap::default();
    let mut raw_parts: IndexMap<&str, &RawValue, foldhash::fast::RandomState> = IndexMap::default();
    if same {
        for (k, v) in &req.fields {
            raw_parts.insert(k.as_str(), v);
        }
    }
    if !same || req.fields.is_empty() {
        let p = &req.params;
        parts.insert(
            "max_tokens",
            json!(p.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
        );
        // Messages takes no sampling temperature or nucleus any more.
        for (name, given) in [
            ("temperature", p.temperature.is_some()),
            ("top_p", p.top_p.is_some()),
        ] {
            if given {
                notices.add(format!(
                    "`{name}` is not carried to a model of {PROTOCOL} (its API has no such field) and was left out"
                ));
            }
        }
        if !p.stop.is_empty() {
            parts.insert("stop_sequences", json!(p.stop));
        }
        if let Some(f) = p.response_format.as_ref().and_then(|f| f.schema.as_ref()) {
            parts.insert(
                "output_config",
                json!({"format": {"type": "json_schema", "schema": f}}),
            );
        }
        if p.reasoning_effort.is_some() {
            notices.add(format!(
                "`reasoning_effort` is not carried to a model of {PROTOCOL} (it takes `thinking` with a budget) and was left out"
            ));
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
    let (system, messages) = conversation(call.turns, notices);
    let mut body: IndexMap<&str, Part<'_>, foldhash::fast::RandomState> = IndexMap::default();
    for (k, v) in raw_parts {
        body.insert(k, Part::Raw(v));
    }
    for (k, v) in parts {
        body.insert(k, Part::Value(v));
    }
    body.insert("model", Part::Value(json!(call.model)));
    match system {
        Some(s) => body.insert("system", s),
        None => body.shift_remove("system"),
    };
    body.insert("messages", Part::Messages(messages));
    let hosted = if same { &req.hosted[..] } else { &[] };
    if call.tools.is_empty() && hosted.is_empty() {
        body.shift_remove("tools");
        body.shift_remove("tool_choice");
    } else {
        let tools = super::with_hosted(call.tools.json(PROTOCOL, tool), hosted, PROTOCOL);
        body.insert("tools", Part::Json(tools));
        let choice = match (&call.tool_choice, same) {
            (Some(c), _) => Some(c),
            (None, false) => req.tool_choice.as_ref(),
            (None, true) => None,
        };
        if let Some(choice) = choice {
            body.insert(
                "tool_choice",
                Part::Value(tool_choice(choice, req.params.parallel_tool_calls)),
            );
        } else if !same && req.params.parallel_tool_calls == Some(false) {
            body.insert(
                "tool_choice",
                Part::Value(json!({"type": "auto", "disable_parallel_tool_use": true})),
            );
        }
    }
    if call.stream {
        body.insert("stream", Part::Value(json!(true)));
    } else {
        body.shift_remove("stream");
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    super::body(cap_cache_markers(bytes, notices))
}

/// The body with at most [`MAX_CACHE_MARKERS`] `cache_control` markers:
/// the API refuses a request with more, so the earliest extra ones are
/// taken out (with a notice); the latest, which cover the longest
/// prefixes, stay.
fn cap_cache_markers(bytes: Vec<u8>, notices: &mut Notices) -> Vec<u8> {
    let marker = b"\"cache_control\"";
    let count = bytes.windows(marker.len()).filter(|w| w == marker).count();
    if count <= MAX_CACHE_MARKERS {
        return bytes;
    }
    let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) else {
        return bytes;
    };
    // Markers in prefix order: tools, system, messages.
    let mut found = 0;
    let total = count_markers(&v);
    if total <= MAX_CACHE_MARKERS {
        return bytes;
    }
    let drop = total - MAX_CACHE_MARKERS;
    for key in ["tools", "system", "messages"] {
        if let Some(part) = v.get_mut(key) {
            strip_markers(part, drop, &mut found);
        }
    }
    notices.add(format!(
        "the request had {total} `cache_control` markers and {PROTOCOL} takes at most {MAX_CACHE_MARKERS}; the {drop} earliest were left out"
    ));
    serde_json::to_vec(&v).unwrap_or(bytes)
}

fn count_markers(v: &Value) -> usize {
    match v {
        Value::Object(o) => {
            usize::from(o.contains_key("cache_control"))
                + o.values().map(count_markers).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_markers).sum(),
        _ => 0,
    }
}

fn strip_markers(v: &mut Value, drop: usize, dropped: &mut usize) {
    if *dropped >= drop {
        return;
    }
    match v {
        Value::Object(o) => {
            if o.remove("cache_control").is_some() {
                *dropped += 1;
            }
            for child in o.values_mut() {
                strip_markers(child, drop, dropped);
            }
        }
        Value::Array(a) => {
            for child in a {
                strip_markers(child, drop, dropped);
            }
        }
        _ => {}
    }
}

/// A tool as Messages offers it.
pub fn tool(spec: &ToolDef) -> Value {
    if let Some(n) = spec.native.as_ref().filter(|n| n.protocol == PROTOCOL) {
        return n.value.clone();
    }
    let mut t = Map::new();
    t.insert("name".into(), json!(spec.name));
    if let Some(d) = spec.description.as_ref().filter(|d| !d.is_empty()) {
        t.insert("description".into(), json!(d));
    }
    t.insert("input_schema".into(), Value::clone(&spec.parameters));
    Value::Object(t)
}

pub fn tool_choice(choice: &ToolChoice, parallel: Option<bool>) -> Value {
    let mut c = match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => return json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Tool { name } => json!({"type": "tool", "name": name}),
    };
    if parallel == Some(false) {
        c["disable_parallel_tool_use"] = json!(true);
    }
    c
}

/// One field of the body.
enum Part<'a> {
    Raw(&'a RawValue),
    Json(std::borrow::Cow<'a, RawValue>),
    Messages(Vec<Written<'a>>),
    Value(Value),
}

impl Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Raw(v) => v.serialize(s),
            Part::Json(v) => v.serialize(s),
            Part::Messages(v) => v.serialize(s),
            Part::Value(v) => v.serialize(s),
        }
    }
}

/// The conversation as Messages' `system` and `messages`.
fn conversation<'a>(
    turns: &'a [Turn],
    notices: &mut Notices,
) -> (Option<Part<'a>>, Vec<Written<'a>>) {
    let mut system_raw = None;
    let mut system_texts: Vec<Value> = Vec::new();
    let mut messages: Vec<Written<'a>> = Vec::with_capacity(turns.len());
    for turn in turns {
        match turn.kept_for(PROTOCOL) {
            Some((o, raw))
                if o.slot == Slot::System && system_raw.is_none() && system_texts.is_empty() =>
            {
                system_raw = Some(raw);
                continue;
            }
            Some((o, raw)) if o.slot == Slot::Message => {
                messages.push(Written::Raw(raw));
                continue;
            }
            _ => {}
        }
        match turn.role {
            Role::System => {
                for item in &turn.items {
                    match item {
                        Item::Text { text } => {
                            system_texts.push(json!({"type": "text", "text": text}))
                        }
                        other => {
                            if foreign_note(other, PROTOCOL, notices) {
                                notices
                                    .add("media in instructions is not carried and was left out");
                            }
                        }
                    }
                }
            }
            Role::User => user(turn, &mut messages, notices),
            Role::Assistant => assistant(turn, &mut messages, notices),
        }
    }
    let system = match (system_raw, system_texts.is_empty()) {
        (Some(raw), true) => Some(Part::Raw(raw)),
        (Some(raw), false) => {
            // The client's system and instructions of another turn: blocks.
            let mut blocks = match serde_json::from_str::<Value>(raw.get()) {
                Ok(Value::String(s)) => vec![json!({"type": "text", "text": s})],
                Ok(Value::Array(b)) => b,
                _ => Vec::new(),
            };
            blocks.extend(system_texts);
            Some(Part::Value(Value::Array(blocks)))
        }
        (None, false) => Some(Part::Value(Value::Array(system_texts))),
        (None, true) => None,
    };
    (system, messages)
}

/// Appends `block` to the message of `role` being written, or starts one.
fn push(messages: &mut Vec<Written<'_>>, role: &'static str, block: Value) {
    written::push(messages, role, "content", block);
}

/// Media as a content block (`None` when Messages cannot hold it).
fn media_block(m: &Media) -> Option<Value> {
    let source = match &m.source {
        Source::Base64 { mime, data } => {
            json!({"type": "base64", "media_type": mime, "data": data})
        }
        Source::Url { url } => json!({"type": "url", "url": url}),
        Source::Text { text } => json!({"type": "text", "media_type": "text/plain", "data": text}),
        Source::FileId { .. } => return None,
    };
    match m.kind {
        MediaKind::Image => Some(json!({"type": "image", "source": source})),
        MediaKind::Document | MediaKind::File => {
            let mut d = json!({"type": "document", "source": source});
            if let Some(title) = &m.name {
                d["title"] = json!(title);
            }
            Some(d)
        }
        MediaKind::Audio | MediaKind::Video => None,
    }
}

fn media_or_notice(m: &Media, notices: &mut Notices) -> Option<Value> {
    let block = media_block(m);
    if block.is_none() {
        notices.add(format!(
            "a {:?} {PROTOCOL} cannot hold (a file id, audio or video) was left out",
            m.kind
        ));
    }
    block
}

fn result_block(r: &CallResult, notices: &mut Notices) -> Value {
    let mut content = vec![json!({"type": "text", "text": r.text})];
    content.extend(r.media.iter().filter_map(|m| media_or_notice(m, notices)));
    let mut b = json!({"type": "tool_result", "tool_use_id": r.call_id, "content": content});
    if r.is_error {
        b["is_error"] = json!(true);
    }
    b
}

/// A user's turn: its results first (they answer the calls before), then
/// its text and media.
fn user<'a>(turn: &'a Turn, messages: &mut Vec<Written<'a>>, notices: &mut Notices) {
    let mut rest = Vec::new();
    for item in &turn.items {
        match item {
            Item::Result(r) => push(messages, "user", result_block(r, notices)),
            other => rest.push(other),
        }
    }
    for item in rest {
        match item {
            Item::Text { text } => push(messages, "user", json!({"type": "text", "text": text})),
            Item::Media { media } => {
                if let Some(b) = media_or_notice(media, notices) {
                    push(messages, "user", b);
                }
            }
            Item::Native(n) if n.protocol == PROTOCOL => push(messages, "user", n.value.clone()),
            other => {
                if foreign_note(other, PROTOCOL, notices) {
                    notices.add(
                        "calls and reasoning in a user's turn are not carried and were left out",
                    );
                }
            }
        }
    }
}

/// A call as a `tool_use` block.
fn tool_use(c: &Call) -> Value {
    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments_value()})
}

/// An assistant's turn, its blocks in order: its own reasoning as thinking
/// with its signature, text, calls as `tool_use`; a result it holds (the
/// gateway's own call, as a face showed it) in a user message between.
fn assistant<'a>(turn: &'a Turn, messages: &mut Vec<Written<'a>>, notices: &mut Notices) {
    for item in &turn.items {
        match item {
            Item::Reasoning(Reasoning {
                text,
                opaque: Some(o),
            }) if o.protocol == PROTOCOL => {
                let block = if o.redacted {
                    json!({"type": "redacted_thinking", "data": o.data})
                } else {
                    json!({"type": "thinking", "thinking": text, "signature": o.data})
                };
                push(messages, "assistant", block);
            }
            Item::Reasoning(Reasoning { opaque: None, .. }) => notices.add(format!(
                "reasoning without a signature is not carried to a model of {PROTOCOL} (its thinking blocks must be signed) and was left out"
            )),
            Item::Text { text } => {
                push(messages, "assistant", json!({"type": "text", "text": text}))
            }
            Item::Call(c) => push(messages, "assistant", tool_use(c)),
            Item::Result(r) => push(messages, "user", result_block(r, notices)),
            Item::Native(n) if n.protocol == PROTOCOL => {
                push(messages, "assistant", n.value.clone())
            }
            Item::Media { .. } => {
                notices.add("media in an assistant's turn is not carried and was left out")
            }
            other => {
                foreign_note(other, PROTOCOL, notices);
            }
        }
    }
}

/// Anthropic's `stop_reason` read.
pub fn finish(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The deltas of one whole content block; `calls` counts the calls so far.
fn block_deltas(b: &Value, calls: &mut usize, deltas: &mut Vec<Delta>) {
    match b["type"].as_str() {
        Some("text") => deltas.push(Delta::Text(
            b["text"].as_str().unwrap_or_default().to_owned(),
        )),
        Some("thinking") => {
            deltas.push(Delta::Reasoning(
                b["thinking"].as_str().unwrap_or_default().to_owned(),
            ));
            deltas.push(Delta::ReasoningOpaque(Opaque::new(
                PROTOCOL,
                b["signature"].as_str().unwrap_or_default(),
            )));
        }
        Some("redacted_thinking") => deltas.push(Delta::ReasoningOpaque(Opaque {
            redacted: true,
            ..Opaque::new(PROTOCOL, b["data"].as_str().unwrap_or_default())
        })),
        Some("tool_use") => {
            deltas.push(Delta::Call {
                index: *calls,
                id: b["id"].as_str().map(str::to_owned),
                name: b["name"].as_str().map(str::to_owned),
                arguments: Some(
                    b.get("input")
                        .map_or_else(|| "{}".to_owned(), Value::to_string),
                ),
                opaque: None,
            });
            *calls += 1;
        }
        other => deltas.push(Delta::Native(Native {
            protocol: PROTOCOL,
            what: format!("`{}` blocks", other.unwrap_or("untyped")),
            value: b.clone(),
        })),
    }
}

/// A whole message as deltas; the message is its envelope.
pub fn decode(body: &[u8]) -> Result<Decoded, String> {
    let message: Value =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON message: {e}"))?;
    let Some(content) = message.get("content").and_then(Value::as_array) else {
        return Err("the message has no `content`".into());
    };
    let mut deltas = Vec::new();
    let mut calls = 0;
    for b in content {
        block_deltas(b, &mut calls, &mut deltas);
    }
    if let Some(reason) = message.get("stop_reason").and_then(Value::as_str) {
        deltas.push(Delta::Finish(finish(reason)));
    }
    if let Some(u) = message.get("usage").filter(|u| u.is_object()) {
        deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u.clone())));
    }
    deltas.push(Delta::Replay(raw(
        &json!({"role": "assistant", "content": content}),
    )));
    Ok(Decoded {
        deltas,
        model: message
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        envelope: super::Envelope::Read(Native {
            protocol: PROTOCOL,
            what: "message".into(),
            value: message,
        }),
    })
}

/// The decoder of a Messages event stream: deltas as the events come, the
/// blocks assembled as the API would write them (for the replay), usage
/// from `message_start` with `message_delta`'s cumulative counts over it.
#[derive(Debug, Default)]
pub struct Stream {
    /// The blocks so far, by index.
    blocks: Vec<Value>,
    /// A `tool_use` block's index to its call's index, and its input's
    /// JSON so far.
    calls: Vec<(usize, usize, String)>,
    usage: Value,
    stop: Option<String>,
    done: bool,
}

impl Stream {
    pub fn event(&mut self, name: &str, data: &str) -> Result<Step, String> {
        let ev: Value =
            serde_json::from_str(data).map_err(|_| "a stream event is not JSON".to_owned())?;
        let kind = ev["type"].as_str().unwrap_or(name);
        let mut deltas = Vec::new();
        match kind {
            "message_start" => {
                self.usage = ev["message"]["usage"].clone();
            }
            "content_block_start" => {
                let block = ev["content_block"].clone();
                let index = index_of(&ev, self.blocks.len())?;
                match block["type"].as_str() {
                    Some("tool_use") => {
                        let call = self.calls.len();
                        self.calls.push((index, call, String::new()));
                        deltas.push(Delta::Call {
                            index: call,
                            id: block["id"].as_str().map(str::to_owned),
                            name: block["name"].as_str().map(str::to_owned),
                            arguments: None,
                            opaque: None,
                        });
                    }
                    Some("text" | "thinking") => {}
                    // A block that comes whole (redacted thinking, a
                    // server tool's use or result).
                    _ => block_deltas(&block, &mut 0, &mut deltas),
                }
                self.set(index, block);
            }
            "content_block_delta" => {
                let index = index_of(&ev, 0)?;
                let d = &ev["delta"];
                let block = self
                    .blocks
                    .get_mut(index)
                    .ok_or("a delta of a block never started")?;
                match d["type"].as_str() {
                    Some("text_delta") => {
                        let t = d["text"].as_str().unwrap_or_default();
                        append(block, "text", t);
                        if !t.is_empty() {
                            deltas.push(Delta::Text(t.to_owned()));
                        }
                    }
                    Some("thinking_delta") => {
                        let t = d["thinking"].as_str().unwrap_or_default();
                        append(block, "thinking", t);
                        if !t.is_empty() {
                            deltas.push(Delta::Reasoning(t.to_owned()));
                        }
                    }
                    Some("signature_delta") => {
                        block["signature"] = d["signature"].clone();
                    }
                    Some("citations_delta") => match block["citations"].as_array_mut() {
                        Some(c) => c.push(d["citation"].clone()),
                        None => block["citations"] = json!([d["citation"]]),
                    },
                    Some("input_json_delta") => {
                        let piece = d["partial_json"].as_str().unwrap_or_default();
                        if let Some((_, call, json)) =
                            self.calls.iter_mut().find(|(i, _, _)| *i == index)
                        {
                            json.push_str(piece);
                            deltas.push(Delta::Call {
                                index: *call,
                                id: None,
                                name: None,
                                arguments: Some(piece.to_owned()),
                                opaque: None,
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index_of(&ev, 0)?;
                if let Some(block) = self.blocks.get_mut(index) {
                    match block["type"].as_str() {
                        Some("thinking") => deltas.push(Delta::ReasoningOpaque(Opaque::new(
                            PROTOCOL,
                            block["signature"].as_str().unwrap_or_default(),
                        ))),
                        Some("tool_use") => {
                            if let Some((_, _, json)) =
                                self.calls.iter().find(|(i, _, _)| *i == index)
                            {
                                block["input"] = if json.trim().is_empty() {
                                    json!({})
                                } else {
                                    serde_json::from_str(json).unwrap_or(json!({}))
                                };
                            }
                        }
                        _ => {}
                    }
                }
            }
            "message_delta" => {
                if let Some(reason) = ev["delta"]["stop_reason"].as_str() {
                    self.stop = Some(reason.to_owned());
                    deltas.push(Delta::Finish(finish(reason)));
                }
                // Cumulative counts: each given one replaces the start's.
                if let (Some(now), Some(u)) = (ev["usage"].as_object(), self.usage.as_object_mut())
                {
                    for (k, v) in now {
                        if !v.is_null() {
                            u.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            "message_stop" => {
                self.done = true;
                if self.usage.is_object() {
                    deltas.push(Delta::Usage(super::usage::of_value(
                        PROTOCOL,
                        self.usage.clone(),
                    )));
                }
                deltas.push(Delta::Replay(raw(
                    &json!({"role": "assistant", "content": self.blocks}),
                )));
                return Ok(Step { deltas, done: true });
            }
            "ping" => {}
            "error" => {
                return Err(format!(
                    "it reported an error mid-stream: {}",
                    ev["error"]["message"].as_str().unwrap_or("no message")
                ));
            }
            _ => {}
        }
        Ok(Step {
            deltas,
            done: false,
        })
    }

    fn set(&mut self, index: usize, block: Value) {
        while self.blocks.len() <= index {
            self.blocks.push(Value::Null);
        }
        self.blocks[index] = block;
    }

    /// `message_stop` came.
    pub fn complete(&self) -> bool {
        self.done
    }
}

/// An event's block index, bounded by what a stream can hold.
fn index_of(ev: &Value, default: usize) -> Result<usize, String> {
    let index = ev["index"]
        .as_u64()
        .map_or(default, |i| usize::try_from(i).unwrap_or(usize::MAX));
    if index > MAX_BLOCKS {
        return Err(format!(
            "a content block has index {index}, beyond {MAX_BLOCKS}"
        ));
    }
    Ok(index)
}

/// The most content blocks one streamed message may have.
const MAX_BLOCKS: usize = 4096;

fn append(block: &mut Value, key: &str, text: &str) {
    let now = block[key].as_str().unwrap_or_default();
    block[key] = Value::String(format!("{now}{text}"));
}

/// The human message of an error body (`{"type": "error", "error":
/// {"type", "message"}}`).
pub fn error_message(body: &[u8]) -> String {
    super::openai_chat::error_message(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Request;
    use crate::model::protocol::{Assembly, Tools};

    fn messages_request(body: &Value) -> Request {
        let mut r = Request::new(Protocol::Anthropic, "m");
        r.fields = body
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), raw(v)))
            .collect();
        r
    }

    #[test]
    fn a_messages_request_keeps_its_fields_and_the_model_s_turns_go_back_as_written() {
        let body = json!({"model": "alias", "max_tokens": 100, "thinking": {"type": "enabled", "budget_tokens": 50},
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}], "metadata": {"user_id": "u"}});
        let req = messages_request(&body);
        let turns = [
            Turn::decoded(
                Role::System,
                vec![Item::text("be brief")],
                PROTOCOL,
                Slot::System,
                raw(&body["system"]),
            ),
            Turn::decoded(
                Role::User,
                vec![Item::text("hi")],
                PROTOCOL,
                Slot::Message,
                raw(&body["messages"][0]),
            ),
            Turn {
                role: Role::Assistant,
                items: vec![Item::Call(Call::new("tu1", "t", "{}"))],
                origin: Some(crate::conversation::Origin {
                    protocol: PROTOCOL,
                    slot: Slot::Message,
                    raw: raw(&json!({"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "hm", "signature": "sig"},
                        {"type": "tool_use", "id": "tu1", "name": "t", "input": {}}]}))
                    .into(),
                    untyped: Vec::new(),
                    made_by: Some("claude".into()),
                }),
            },
            Turn::new(
                Role::User,
                vec![Item::Result(CallResult::text("tu1", "42"))],
            ),
        ];
        let tools = [std::sync::Arc::new(crate::model::protocol::test_tool())];
        let call = Outgoing {
            request: &req,
            model: "real",
            turns: &turns,
            tools: Tools(&tools),
            tool_choice: None,
            stream: true,
        };
        let mut notices = Notices::default();
        let encoded = encode(&call, &mut notices);
        // The conversation's raw fields given back, the body is the same:
        // `system` and `messages` are written from the turns, in place.
        crate::model::protocol::assert_encodes_the_same_once_released(
            &call,
            encode,
            &["system", "messages"],
        );
        let v: Value = serde_json::from_slice(&encoded).unwrap();
        assert!(notices.is_empty(), "{notices:?}");
        assert_eq!(v["model"], "real");
        assert_eq!(v["thinking"], body["thinking"]);
        assert_eq!(v["metadata"], body["metadata"]);
        assert_eq!(v["system"], body["system"]);
        assert_eq!(v["stream"], true);
        assert_eq!(
            v["tools"],
            json!([{"name": "t", "description": "d", "input_schema": {"type": "object"}}])
        );
        assert_eq!(v["messages"][1]["content"][0]["signature"], "sig");
        assert_eq!(
            v["messages"][2],
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "42"}]}]})
        );
    }

    #[test]
    fn another_face_s_turns_are_written_from_their_items() {
        let mut req = Request::new(Protocol::OpenaiChat, "m");
        req.untyped = vec!["seed".into()];
        req.params.temperature = Some(0.5);
        let turns = [
            Turn::new(Role::System, vec![Item::text("be brief")]),
            Turn::new(Role::User, vec![Item::text("hi")]),
            Turn::new(
                Role::Assistant,
                vec![
                    Item::Reasoning(Reasoning {
                        text: "hm".into(),
                        opaque: None,
                    }),
                    Item::text("calling"),
                    Item::Call(Call::new("c1", "t", r#"{"a":1}"#)),
                ],
            ),
            Turn::new(Role::User, vec![Item::Result(CallResult::text("c1", "42"))]),
        ];
        let call = Outgoing {
            request: &req,
            model: "m",
            turns: &turns,
            tools: Tools(&[]),
            tool_choice: None,
            stream: false,
        };
        let mut notices = Notices::default();
        let v: Value = serde_json::from_slice(&encode(&call, &mut notices)).unwrap();
        assert_eq!(v["system"], json!([{"type": "text", "text": "be brief"}]));
        assert_eq!(v["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(
            v.get("temperature").is_none(),
            "Messages has no temperature"
        );
        assert_eq!(
            v["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "c1", "name": "t", "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": "42"}]}]},
            ])
        );
        let said: Vec<&str> = notices.iter().collect();
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said.iter().any(|n| n.contains("`temperature`")), "{said:?}");
    }

    #[test]
    fn more_than_four_cache_markers_keep_the_last_four() {
        let mut notices = Notices::default();
        let body = json!({"tools": [{"name": "a", "cache_control": {}}, {"name": "b", "cache_control": {}}],
            "system": [{"type": "text", "text": "s", "cache_control": {}}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}, {"type": "text", "text": "y", "cache_control": {}}]}]});
        let out: Value = serde_json::from_slice(&cap_cache_markers(
            serde_json::to_vec(&body).unwrap(),
            &mut notices,
        ))
        .unwrap();
        assert_eq!(count_markers(&out), 4);
        assert!(out["tools"][0].get("cache_control").is_none());
        assert!(
            out["messages"][0]["content"][1]
                .get("cache_control")
                .is_some()
        );
        assert_eq!(notices.iter().count(), 1);
    }

    #[test]
    fn whole_and_streamed_messages_give_the_same_turn() {
        let whole = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [
                {"type": "thinking", "thinking": "hm, call t", "signature": "sig1"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "tu1", "name": "t", "input": {"a": 1}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}});
        let d = decode(whole.to_string().as_bytes()).unwrap();
        let mut a = Assembly::default();
        for delta in d.deltas {
            a.push(delta, 8).unwrap();
        }
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm, "}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "call t"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig1"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking."}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu1", "name": "t", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ": 1}"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}}),
            json!({"type": "message_stop"}),
        ];
        let mut s = Stream::default();
        let mut b = Assembly::default();
        for e in events {
            for delta in s.event("", &e.to_string()).unwrap().deltas {
                b.push(delta, 8).unwrap();
            }
        }
        assert!(s.complete());
        assert_eq!(a.reasoning, b.reasoning);
        assert_eq!(a.text, b.text);
        assert_eq!(a.calls.len(), 1);
        assert_eq!(
            serde_json::from_str::<Value>(&a.calls[0].arguments).unwrap(),
            serde_json::from_str::<Value>(&b.calls[0].arguments).unwrap()
        );
        assert_eq!(a.finish, Some(FinishReason::ToolCalls));
        assert_eq!(a.finish, b.finish);
        assert_eq!(
            (a.usage.input, a.usage.cache_read, a.usage.cache_write),
            (117, 100, 7)
        );
        assert_eq!(a.usage.input, b.usage.input);
        assert_eq!(a.usage.output, b.usage.output);
        // The replays are the same message, the signature in place.
        let ra: Value = serde_json::from_str(a.replay.as_ref().unwrap().get()).unwrap();
        let rb: Value = serde_json::from_str(b.replay.as_ref().unwrap().get()).unwrap();
        assert_eq!(ra, rb);
        assert_eq!(ra["content"][0]["signature"], "sig1");
    }

    #[test]
    fn a_mid_stream_error_is_an_error() {
        let mut s = Stream::default();
        let e = s
            .event(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
            .unwrap_err();
        assert!(e.contains("Overloaded"), "{e}");
        assert!(
            s.event(
                "",
                r#"{"type":"content_block_delta","index":9999999,"delta":{}}"#
            )
            .is_err()
        );
    }
}
