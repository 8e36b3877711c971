//! OpenAI's chat completions as a model protocol: `POST
//! {base}/chat/completions`, the answer's `choices[0]` (the only place the
//! engine reads it) and its `chat.completion.chunk` stream.
//!
//! A request of the chat face keeps the client's fields as they came;
//! only `model`, `messages`, `tools`, `tool_choice` and the streaming
//! options are the gateway's. The client's messages go as they came; the
//! loop's own turns and those of other faces are written from their items.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::lenient::{First, Lenient, List, Text};
use super::{Decoded, Delta, Outgoing, Step, foreign_note};
use crate::conversation::{
    Call, CallResult, FinishReason, Item, Media, MediaKind, Notices, Protocol, Raw, Role, Source,
    ToolChoice, ToolDef, Turn,
};

const PROTOCOL: Protocol = Protocol::OpenaiChat;

/// The request body of one model call.
pub fn encode(call: &Outgoing<'_>, notices: &mut Notices) -> Bytes {
    let req = call.request;
    let same = req.face == PROTOCOL;
    // Which value each field takes, in the order of the client's fields
    // (a chat request's) or of the typed ones; the values are written once,
    // straight into the body.
    let mut parts: IndexMap<&str, Part<'_>, foldhash::fast::RandomState> = IndexMap::default();
    if same {
        for (k, v) in &req.fields {
            parts.insert(k.as_str(), Part::Raw(v));
        }
    }
    // A request the gateway made itself (sampling) has typed fields only.
    if !same || req.fields.is_empty() {
        typed_params(call, &mut parts);
    }
    if !same {
        for name in &req.untyped {
            notices.add(format!(
                "`{name}` ({}) is not carried to a model of {PROTOCOL} and was left out",
                req.face
            ));
        }
    }
    parts.insert("model", Part::Str(call.model));
    parts.insert("messages", Part::Messages(messages(call.turns, notices)));
    if call.tools.is_empty() {
        parts.shift_remove("tools");
        parts.shift_remove("tool_choice");
        parts.shift_remove("parallel_tool_calls");
    } else {
        parts.insert("tools", Part::Json(call.tools.json(PROTOCOL, tool)));
        let choice = match (&call.tool_choice, same) {
            (Some(c), _) => Some(c),
            (None, false) => req.tool_choice.as_ref(),
            (None, true) => None,
        };
        if let Some(choice) = choice {
            parts.insert("tool_choice", Part::Value(tool_choice(choice)));
        }
    }
    if call.stream {
        parts.insert("stream", Part::Value(json!(true)));
        parts.insert(
            "stream_options",
            Part::Value(json!({"include_usage": true})),
        );
    } else {
        parts.shift_remove("stream");
        parts.shift_remove("stream_options");
    }
    super::body(serde_json::to_vec(&parts).unwrap_or_default())
}

/// The typed sampling fields, as chat completions names them.
fn typed_params<'a>(
    call: &Outgoing<'a>,
    parts: &mut IndexMap<&'a str, Part<'a>, foldhash::fast::RandomState>,
) {
    let p = &call.request.params;
    if let Some(t) = p.temperature {
        parts.insert("temperature", Part::Value(json!(t)));
    }
    if let Some(t) = p.top_p {
        parts.insert("top_p", Part::Value(json!(t)));
    }
    if let Some(m) = p.max_tokens {
        parts.insert("max_tokens", Part::Value(json!(m)));
    }
    if !p.stop.is_empty() {
        parts.insert("stop", Part::Value(json!(p.stop)));
    }
    if let Some(parallel) = p.parallel_tool_calls {
        parts.insert("parallel_tool_calls", Part::Value(json!(parallel)));
    }
    if let Some(effort) = &p.reasoning_effort {
        parts.insert("reasoning_effort", Part::Value(json!(effort)));
    }
    if let Some(f) = &p.response_format {
        let format = match &f.schema {
            Some(schema) => {
                let mut s =
                    json!({"name": f.name.as_deref().unwrap_or("answer"), "schema": schema});
                if let Some(strict) = f.strict {
                    s["strict"] = json!(strict);
                }
                json!({"type": "json_schema", "json_schema": s})
            }
            None => json!({"type": "json_object"}),
        };
        parts.insert("response_format", Part::Value(format));
    }
}

/// A tool as chat completions offers it.
pub fn tool(spec: &ToolDef) -> Value {
    if let Some(n) = spec.native.as_ref().filter(|n| n.protocol == PROTOCOL) {
        return n.value.clone();
    }
    let mut f = Map::new();
    f.insert("name".into(), Value::String(spec.name.clone()));
    if let Some(d) = &spec.description {
        f.insert("description".into(), Value::String(d.to_string()));
    }
    f.insert("parameters".into(), Value::clone(&spec.parameters));
    if let Some(s) = spec.strict {
        f.insert("strict".into(), Value::Bool(s));
    }
    let mut t = Map::new();
    t.insert("type".into(), Value::String("function".into()));
    t.insert("function".into(), Value::Object(f));
    Value::Object(t)
}

pub fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool { name } => json!({"type": "function", "function": {"name": name}}),
    }
}

/// One field of the body: the client's raw JSON or what the gateway puts
/// in its place.
enum Part<'a> {
    Raw(&'a RawValue),
    Str(&'a str),
    Json(std::borrow::Cow<'a, RawValue>),
    Messages(Vec<Message<'a>>),
    Value(Value),
}

impl Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Raw(v) => v.serialize(s),
            Part::Str(v) => v.serialize(s),
            Part::Json(v) => v.serialize(s),
            Part::Messages(v) => v.serialize(s),
            Part::Value(v) => v.serialize(s),
        }
    }
}

/// One chat message of the body.
enum Message<'a> {
    /// A chat client's message, as it came.
    Raw(&'a RawValue),
    /// A chat client's plain message, written again as it came.
    Plain(PlainMessage<'a>),
    /// An assistant message written from items.
    Assistant {
        content: Option<String>,
        calls: Vec<&'a Call>,
    },
    /// A tool's result.
    Tool { call_id: &'a str, content: String },
    /// Any other message written from items.
    Built { role: &'static str, content: Value },
}

/// Written straight into the body (keys in sorted order, as a `Value`
/// would write them), without building values.
impl Serialize for Message<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Message::Raw(v) => v.serialize(s),
            Message::Plain(m) => m.serialize(s),
            Message::Assistant { content, calls } => {
                let n = if calls.is_empty() { 2 } else { 3 };
                let mut m = s.serialize_map(Some(n))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "assistant")?;
                if !calls.is_empty() {
                    m.serialize_entry("tool_calls", &Calls(calls))?;
                }
                m.end()
            }
            Message::Tool { call_id, content } => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "tool")?;
                m.serialize_entry("tool_call_id", call_id)?;
                m.end()
            }
            Message::Built { role, content } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", role)?;
                m.end()
            }
        }
    }
}

/// A chat message of a role and a text alone, its two keys in the order
/// the client wrote them: how a [`Raw::Plain`] turn is written again.
struct PlainMessage<'a> {
    /// Written as chat names it (`Role`'s serde names are chat's).
    role: Role,
    text: &'a str,
    role_first: bool,
}

impl Serialize for PlainMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        if self.role_first {
            m.serialize_entry("role", &self.role)?;
            m.serialize_entry("content", self.text)?;
        } else {
            m.serialize_entry("content", self.text)?;
            m.serialize_entry("role", &self.role)?;
        }
        m.end()
    }
}

/// A plain message as the turn of `role` and `items` writes it again.
fn plain_message(role: Role, items: &[Item], role_first: bool) -> Option<PlainMessage<'_>> {
    match items {
        [Item::Text { text }] => Some(PlainMessage {
            role,
            text,
            role_first,
        }),
        _ => None,
    }
}

/// The shortest message held as [`Raw::Plain`]: a shorter one costs
/// little to hold twice, and writing a text again (escaped, on every
/// model call) costs more than copying it as it came.
pub const PLAIN_AT_LEAST: usize = 512;

/// How a chat client's message `raw`, decoded as `role` and `items`, is
/// kept: as [`Raw::Plain`] when it is a plain message (a role and its
/// text, compact, of [`PLAIN_AT_LEAST`] bytes or more) that the turn
/// writes again byte for byte, so that its text is held once; else as it
/// came.
pub fn plain(role: Role, items: &[Item], raw: Box<RawValue>) -> Raw {
    let text = raw.get();
    if text.len() < PLAIN_AT_LEAST {
        return Raw::Kept(raw);
    }
    let role_first = text.starts_with("{\"role\":");
    if !(role_first || text.starts_with("{\"content\":")) {
        return Raw::Kept(raw);
    }
    match plain_message(role, items, role_first).map(|m| serde_json::to_string(&m)) {
        Some(Ok(written)) if written == text => Raw::Plain { role_first },
        _ => Raw::Kept(raw),
    }
}

/// An assistant message's calls, written without building them.
struct Calls<'a, 'b>(&'b [&'a Call]);

impl Serialize for Calls<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| ChatCall(c)))
    }
}

struct ChatCall<'a>(&'a Call);

impl Serialize for ChatCall<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Function<'a>(&'a Call);
        impl Serialize for Function<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("arguments", &self.0.arguments)?;
                m.serialize_entry("name", &self.0.name)?;
                m.end()
            }
        }
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("function", &Function(self.0))?;
        m.serialize_entry("id", &self.0.id)?;
        m.serialize_entry("type", "function")?;
        m.end()
    }
}

/// A call as chat completions writes it.
pub fn call_json(c: &Call) -> Value {
    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

/// The conversation as chat messages.
fn messages<'a>(turns: &'a [Turn], notices: &mut Notices) -> Vec<Message<'a>> {
    let mut out = Vec::with_capacity(turns.len() + 1);
    for turn in turns {
        if let Some(origin) = turn.raw_for(PROTOCOL) {
            let message = match &origin.raw {
                Raw::Kept(raw) => Some(Message::Raw(raw)),
                Raw::Plain { role_first } => {
                    plain_message(turn.role, &turn.items, *role_first).map(Message::Plain)
                }
            };
            if let Some(message) = message {
                out.push(message);
                continue;
            }
        }
        match turn.role {
            Role::System => system(turn, &mut out, notices),
            Role::User => user(turn, &mut out, notices),
            Role::Assistant => assistant(turn, &mut out, notices),
        }
    }
    out
}

/// The content of a message: a string when it is all text, else parts.
fn content(parts: Vec<Value>) -> Value {
    if parts.is_empty() {
        return Value::Null;
    }
    // Text parts alone become one string (what every chat server reads),
    // a line between parts as chat templates join them.
    if parts.iter().all(|p| p["type"] == "text") {
        let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        return json!(text.join("\n"));
    }
    Value::Array(parts)
}

fn text_part(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// Media as a content part (`None` when chat completions cannot hold it).
fn media_part(m: &Media) -> Option<Value> {
    match (m.kind, &m.source) {
        (MediaKind::Image, source) => {
            let mut image = json!({"url": source.url()?});
            if let Some(d) = &m.detail {
                image["detail"] = json!(d);
            }
            Some(json!({"type": "image_url", "image_url": image}))
        }
        (MediaKind::Document, source @ Source::Base64 { .. }) => {
            Some(json!({"type": "file", "file": {
                "filename": m.name.as_deref().unwrap_or("document.pdf"),
                "file_data": source.url()?,
            }}))
        }
        (_, source) => {
            let mut file = Map::new();
            match source {
                Source::FileId { id } => {
                    file.insert("file_id".into(), json!(id));
                }
                Source::Text { .. } => return None,
                other => {
                    file.insert("file_data".into(), json!(other.url()?));
                }
            }
            if let Some(n) = &m.name {
                file.insert("filename".into(), json!(n));
            }
            Some(json!({"type": "file", "file": file}))
        }
    }
}

fn media_or_notice(m: &Media, notices: &mut Notices) -> Option<Value> {
    let part = media_part(m);
    if part.is_none() {
        notices.add(format!(
            "a {:?} chat completions cannot hold was left out",
            m.kind
        ));
    }
    part
}

fn system<'a>(turn: &'a Turn, out: &mut Vec<Message<'a>>, notices: &mut Notices) {
    let mut text = String::new();
    for item in &turn.items {
        match item {
            Item::Text { text: t } => text.push_str(t),
            other => {
                if foreign_note(other, PROTOCOL, notices) {
                    notices.add("media in instructions is not carried and was left out");
                }
            }
        }
    }
    if !text.is_empty() {
        out.push(Message::Built {
            role: "system",
            content: json!(text),
        });
    }
}

fn result_text(r: &CallResult) -> String {
    if r.is_error {
        format!("Error: {}", r.text)
    } else {
        r.text.clone()
    }
}

/// A user's turn: its tool results first (as tool messages, their media in
/// a user message after them), then its text and media.
fn user<'a>(turn: &'a Turn, out: &mut Vec<Message<'a>>, notices: &mut Notices) {
    let mut parts = Vec::new();
    let mut result_media = Vec::new();
    for item in &turn.items {
        match item {
            Item::Result(r) => {
                out.push(Message::Tool {
                    call_id: &r.call_id,
                    content: result_text(r),
                });
                result_media.extend(r.media.iter().filter_map(|m| media_or_notice(m, notices)));
            }
            Item::Text { text } => parts.push(text_part(text)),
            Item::Media { media } => parts.extend(media_or_notice(media, notices)),
            other => {
                if foreign_note(other, PROTOCOL, notices) {
                    notices.add(
                        "calls and reasoning in a user's turn are not carried and were left out",
                    );
                }
            }
        }
    }
    if !result_media.is_empty() {
        out.push(Message::Built {
            role: "user",
            content: Value::Array(result_media),
        });
    }
    if !parts.is_empty() {
        out.push(Message::Built {
            role: "user",
            content: content(parts),
        });
    }
}

/// An assistant's turn: its text and calls as one message (a turn of
/// calls alone joins the assistant message before it); results it holds
/// (the gateway's own calls, as a face showed them) as tool messages in
/// place; its reasoning stays with the model that made it.
fn assistant<'a>(turn: &'a Turn, out: &mut Vec<Message<'a>>, notices: &mut Notices) {
    let mut parts: Vec<Value> = Vec::new();
    let mut calls: Vec<&'a Call> = Vec::new();
    let only_calls = turn.items.iter().all(|i| matches!(i, Item::Call(_)));
    if only_calls && let Some(Message::Assistant { calls: earlier, .. }) = out.last_mut() {
        earlier.extend(turn.items.iter().filter_map(|i| match i {
            Item::Call(c) => Some(c),
            _ => None,
        }));
        return;
    }
    let flush = |parts: &mut Vec<Value>, calls: &mut Vec<&'a Call>, out: &mut Vec<Message<'a>>| {
        if parts.is_empty() && calls.is_empty() {
            return;
        }
        let content = match content(std::mem::take(parts)) {
            Value::String(s) => Some(s),
            Value::Null => None,
            // An assistant's media was left out: only text remains.
            other => Some(other.to_string()),
        };
        out.push(Message::Assistant {
            content,
            calls: std::mem::take(calls),
        });
    };
    for item in &turn.items {
        match item {
            Item::Text { text } => parts.push(text_part(text)),
            Item::Call(c) => calls.push(c),
            Item::Result(r) => {
                flush(&mut parts, &mut calls, out);
                out.push(Message::Tool {
                    call_id: &r.call_id,
                    content: result_text(r),
                });
            }
            Item::Media { .. } => {
                notices.add("media in an assistant's turn is not carried and was left out")
            }
            // The client's reasoning (a chat model's own, made in this
            // loop, is never sent back by chat completions' rule).
            Item::Reasoning(r) if r.opaque.is_none() && turn.origin.is_some() => notices.add(
                "reasoning in an assistant's turn is not carried to chat completions and was left out",
            ),
            other => {
                foreign_note(other, PROTOCOL, notices);
            }
        }
    }
    flush(&mut parts, &mut calls, out);
}

/// A whole chat completion as deltas; the completion is its envelope.
pub fn decode(body: &bytes::Bytes) -> Result<Decoded, String> {
    let completion: Completion<'_> =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON chat completion: {e}"))?;
    let mut deltas = Vec::new();
    let Some(choice) = completion.choices.0.into_iter().next().map(|c| c.0) else {
        return Err("the completion has no choices[0].message".into());
    };
    let Some(Lenient(message)) = choice.message else {
        return Err("the completion has no choices[0].message".into());
    };
    if let Some(r) = message.reasoning_content.into_string() {
        deltas.push(Delta::Reasoning(r));
    }
    if let Some(t) = message.content.into_string() {
        deltas.push(Delta::Text(t));
    }
    for (index, Lenient(c)) in message.tool_calls.0.into_iter().enumerate() {
        let f = c.function.0;
        deltas.push(Delta::Call {
            index,
            id: Some(c.id.into_string().unwrap_or_default()),
            name: Some(f.name.into_string().unwrap_or_default()),
            arguments: Some(f.arguments.into_string().unwrap_or_else(|| "{}".to_owned())),
            opaque: None,
        });
    }
    if let Some(reason) = choice.finish_reason.as_deref() {
        deltas.push(Delta::Finish(FinishReason::from_openai(reason)));
    }
    if let Some(u) = completion.usage
        && let Ok(u) = serde_json::from_str::<Value>(u.get())
    {
        deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u)));
    }
    Ok(Decoded {
        deltas,
        model: completion.model.into_string(),
        envelope: super::Envelope::Body {
            protocol: PROTOCOL,
            what: "chat completion",
            body: body.clone(),
        },
    })
}

/// What the deltas read of a chat completion, borrowed from it where they
/// can be.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Completion<'a> {
    #[serde(borrow)]
    choices: First<Lenient<Choice<'a>>>,
    #[serde(borrow)]
    model: Text<'a>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct Choice<'a> {
    #[serde(borrow)]
    message: Option<Lenient<AnswerMessage<'a>>>,
    #[serde(borrow)]
    finish_reason: Text<'a>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct AnswerMessage<'a> {
    #[serde(borrow)]
    reasoning_content: Text<'a>,
    #[serde(borrow)]
    content: Text<'a>,
    #[serde(borrow)]
    tool_calls: List<Lenient<AnswerCall<'a>>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct AnswerCall<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    function: Lenient<AnswerFunction<'a>>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct AnswerFunction<'a> {
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    arguments: Text<'a>,
}

/// The decoder of a `chat.completion.chunk` stream.
#[derive(Debug, Default)]
pub struct Stream {
    done: bool,
    finished: bool,
}

impl Stream {
    pub fn event(&mut self, _name: &str, data: &str) -> Result<Step, String> {
        if data.trim() == "[DONE]" {
            self.done = true;
            return Ok(Step {
                deltas: Vec::new(),
                done: true,
            });
        }
        let mut chunk: Value =
            serde_json::from_str(data).map_err(|_| "a stream chunk is not JSON".to_owned())?;
        let mut deltas = Vec::new();
        // Taken, not copied: nothing below reads it.
        if let Some(u) = chunk
            .get_mut("usage")
            .map(Value::take)
            .filter(|u| !u.is_null())
        {
            deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u)));
        }
        if let Some(e) = chunk.get("error") {
            return Err(format!("it reported an error mid-stream: {e}"));
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(Step {
                deltas,
                done: false,
            });
        };
        let delta = &choice["delta"];
        if let Some(r) = delta["reasoning_content"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            deltas.push(Delta::Reasoning(r.to_owned()));
        }
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            deltas.push(Delta::Text(t.to_owned()));
        }
        for (i, c) in delta["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = c["index"].as_u64().unwrap_or(i as u64);
            deltas.push(Delta::Call {
                index: usize::try_from(index).unwrap_or(usize::MAX),
                id: c["id"].as_str().map(str::to_owned),
                name: c
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                arguments: c
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                opaque: None,
            });
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finished = true;
            deltas.push(Delta::Finish(FinishReason::from_openai(reason)));
        }
        Ok(Step {
            deltas,
            done: false,
        })
    }

    /// `[DONE]` came, or a finish reason.
    pub fn complete(&self) -> bool {
        self.done || self.finished
    }
}

/// The human message of an error body: `error.message` when it is
/// OpenAI-shaped, else the (cut) text.
pub fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("error").and_then(Value::as_str) {
            return m.to_owned();
        }
        if let Some(m) = v.get("message").and_then(Value::as_str) {
            return m.to_owned();
        }
    }
    let text = String::from_utf8_lossy(body);
    toolgate::truncate_chars(text.trim(), 500)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Request, Slot};
    use crate::model::protocol::Tools;

    fn chat_request(body: &str) -> Request {
        let fields: crate::conversation::RawFields = serde_json::from_str(body).unwrap();
        let mut r = Request::new(Protocol::OpenaiChat, "m");
        r.fields = fields;
        r
    }

    #[test]
    fn a_chat_request_keeps_its_fields_and_replaces_the_gateway_s() {
        let req = chat_request(
            r#"{"model":"alias","messages":[{"role":"user","content":"hi"}],"tool_choice":"required","tools":[],"temperature":0.20000000000000001}"#,
        );
        let turns = [Turn::decoded(
            Role::User,
            vec![Item::text("hi")],
            Protocol::OpenaiChat,
            Slot::Message,
            RawValue::from_string(r#"{"role":"user","content":"hi"}"#.into()).unwrap(),
        )];
        let tools = [std::sync::Arc::new(crate::model::protocol::test_tool())];
        let call = Outgoing {
            request: &req,
            model: "real",
            turns: &turns,
            tools: Tools(&tools),
            tool_choice: Some(ToolChoice::Auto),
            stream: false,
        };
        let body = encode(&call, &mut Notices::default());
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            r#"{"model":"real","messages":[{"role":"user","content":"hi"}],"tool_choice":"auto","tools":[{"function":{"description":"d","name":"t","parameters":{"type":"object"}},"type":"function"}],"temperature":0.20000000000000001}"#
        );
        // The conversation's raw field given back, the body is the same:
        // `messages` is written from the turns, in its place.
        crate::model::protocol::assert_encodes_the_same_once_released(&call, encode, &["messages"]);
        // Without tools, the tool fields go; streaming adds its options.
        let call = Outgoing {
            tools: Tools(&[]),
            stream: true,
            ..call
        };
        let v: Value = serde_json::from_slice(&encode(&call, &mut Notices::default())).unwrap();
        assert_eq!(v.get("tools"), None);
        assert_eq!(v.get("tool_choice"), None);
        assert_eq!(v["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn items_become_chat_messages() {
        let req = Request::new(Protocol::Anthropic, "m");
        let turns = [
            Turn::new(Role::System, vec![Item::text("be brief")]),
            Turn::new(
                Role::Assistant,
                vec![
                    Item::Reasoning(crate::conversation::Reasoning {
                        text: "hm".into(),
                        opaque: Some(crate::conversation::Opaque::new(Protocol::Anthropic, "sig")),
                    }),
                    Item::text("calling"),
                    Item::Call(Call::new("tu1", "t", r#"{"a":1}"#)),
                ],
            ),
            Turn::new(
                Role::User,
                vec![
                    Item::text("thanks"),
                    Item::Result(CallResult {
                        is_error: true,
                        ..CallResult::text("tu1", "42")
                    }),
                ],
            ),
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
        assert_eq!(
            v["messages"],
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "assistant", "content": "calling", "tool_calls": [
                    {"id": "tu1", "type": "function", "function": {"name": "t", "arguments": "{\"a\":1}"}}]},
                {"role": "tool", "tool_call_id": "tu1", "content": "Error: 42"},
                {"role": "user", "content": "thanks"},
            ])
        );
        // The signed reasoning of another protocol is said to be left out.
        assert_eq!(notices.iter().count(), 1, "{notices:?}");
    }

    #[test]
    fn whole_and_streamed_answers_give_the_same_deltas() {
        let whole = br#"{"id":"x","choices":[{"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#;
        let d = decode(&Bytes::from_static(whole)).unwrap();
        let mut a = super::super::Assembly::default();
        for delta in d.deltas {
            a.push(delta, 8).unwrap();
        }
        let mut s = Stream::default();
        let mut b = super::super::Assembly::default();
        for data in [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"h"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"i","tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}"#,
            "[DONE]",
        ] {
            for delta in s.event("", data).unwrap().deltas {
                b.push(delta, 8).unwrap();
            }
        }
        assert!(s.complete());
        assert_eq!(a.items(), b.items());
        assert_eq!(a.finish, b.finish);
        assert_eq!((a.usage.input, a.usage.cache_read), (3, 2));
        assert_eq!(a.usage, b.usage);
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(br#"{"error": {"message": "bad key"}}"#),
            "bad key"
        );
        assert_eq!(error_message(b"plain failure"), "plain failure");
    }
}
