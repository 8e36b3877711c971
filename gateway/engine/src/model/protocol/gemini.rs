//! Google's Gemini API as a model protocol: `POST
//! {base}/models/{model}:generateContent` (`:streamGenerateContent?alt=sse`
//! streamed), a response's `candidates[0]` and its stream of partial
//! responses.
//!
//! A Gemini request keeps the client's fields as they came
//! (`generationConfig`, `safetySettings`, `cachedContent`…); `contents`,
//! `systemInstruction`, `tools` and `toolConfig` are the gateway's, and the
//! client's contents go as they came. The model's own turns go back as it
//! wrote them, each `thoughtSignature` on the part it came on. A call that
//! a model of another protocol made has no signature, which Gemini 3
//! requires in the turn being answered: it goes with the value Google
//! documents for that case (`skip_thought_signature_validator`), said in a
//! notice.

use bytes::Bytes;
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use super::written::{self, Written};
use super::{Decoded, Delta, Outgoing, Step, foreign_note};
use crate::conversation::{
    Call, CallResult, FinishReason, Item, Media, MediaKind, Native, Notices, Opaque, Protocol,
    Role, Slot, Source, ToolChoice, ToolDef, Turn, raw,
};

const PROTOCOL: Protocol = Protocol::Gemini;

/// The signature Google documents for a call whose own was lost or never
/// made (history from another model).
pub const NO_SIGNATURE: &str = "skip_thought_signature_validator";

/// The prefix of call ids the gateway gives calls that came without one
/// (they are not sent back: the model matches results by name).
pub const MADE_ID: &str = "gemini_call_";

/// The request body of one model call (the model and streaming are in
/// the URL).
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
        let p = &req.params;
        let mut config = Map::new();
        if let Some(m) = p.max_tokens {
            config.insert("maxOutputTokens".into(), json!(m));
        }
        if let Some(t) = p.temperature {
            config.insert("temperature".into(), json!(t));
        }
        if let Some(t) = p.top_p {
            config.insert("topP".into(), json!(t));
        }
        if !p.stop.is_empty() {
            config.insert("stopSequences".into(), json!(p.stop));
        }
        if let Some(f) = &p.response_format {
            config.insert("responseMimeType".into(), json!("application/json"));
            if let Some(schema) = &f.schema {
                config.insert("responseJsonSchema".into(), schema.clone());
            }
        }
        if let Some(effort) = &p.reasoning_effort {
            config.insert(
                "thinkingConfig".into(),
                json!({"thinkingLevel": thinking_level(effort)}),
            );
        }
        if !config.is_empty() {
            body.insert("generationConfig", Part::Value(Value::Object(config)));
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
    for gateway_owned in ["model", "stream"] {
        body.shift_remove(gateway_owned);
    }
    let (system, contents) = conversation(call.turns, notices);
    // Google's Python SDK may spell the fields the gateway writes in
    // snake_case: one spelling of each is sent.
    body.shift_remove("system_instruction");
    match system {
        Some(s) => body.insert("systemInstruction", s),
        None => body.shift_remove("systemInstruction"),
    };
    body.insert("contents", Part::Contents(contents));
    let hosted: Vec<&Value> = req
        .hosted
        .iter()
        .filter(|h| same && h.tool.protocol == PROTOCOL)
        .map(|h| &h.tool.value)
        .collect();
    if call.tools.is_empty() && hosted.is_empty() {
        body.shift_remove("tools");
        body.shift_remove("toolConfig");
        body.shift_remove("tool_config");
    } else {
        let declarations = (!call.tools.is_empty()).then(|| call.tools.json(PROTOCOL, declaration));
        body.insert("tools", Part::Tools(declarations, hosted));
        let choice = match (&call.tool_choice, same) {
            (Some(c), _) => Some(c),
            (None, false) => req.tool_choice.as_ref(),
            (None, true) => None,
        };
        if let Some(choice) = choice {
            body.shift_remove("tool_config");
            body.insert("toolConfig", Part::Value(tool_config(choice)));
        }
    }
    super::body(serde_json::to_vec(&body).unwrap_or_default())
}

/// A reasoning effort as Gemini 3's thinking level (`low` or `high`, the
/// two every Gemini 3 model takes).
fn thinking_level(effort: &str) -> &'static str {
    match effort {
        "none" | "minimal" | "low" => "low",
        _ => "high",
    }
}

/// A tool as a function declaration (its schema as JSON Schema).
pub fn declaration(spec: &ToolDef) -> Value {
    if let Some(n) = spec.native.as_ref().filter(|n| n.protocol == PROTOCOL) {
        return n.value.clone();
    }
    let mut d = Map::new();
    d.insert("name".into(), json!(spec.name));
    if let Some(desc) = spec.description.as_ref().filter(|d| !d.is_empty()) {
        d.insert("description".into(), json!(desc));
    }
    d.insert(
        "parametersJsonSchema".into(),
        Value::clone(&spec.parameters),
    );
    Value::Object(d)
}

pub fn tool_config(choice: &ToolChoice) -> Value {
    let config = match choice {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Tool { name } => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    };
    json!({"functionCallingConfig": config})
}

/// One field of the body.
enum Part<'a> {
    Raw(&'a RawValue),
    /// The function declarations, in one Tool, then the client's hosted
    /// tools (each a Tool of its own).
    Tools(Option<std::borrow::Cow<'a, RawValue>>, Vec<&'a Value>),
    Contents(Vec<Written<'a>>),
    Value(Value),
}

impl Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Part::Raw(v) => v.serialize(s),
            Part::Tools(declarations, hosted) => {
                let mut seq =
                    s.serialize_seq(Some(usize::from(declarations.is_some()) + hosted.len()))?;
                struct Declarations<'a>(&'a RawValue);
                impl Serialize for Declarations<'_> {
                    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                        let mut m = s.serialize_map(Some(1))?;
                        m.serialize_entry("functionDeclarations", self.0)?;
                        m.end()
                    }
                }
                if let Some(declarations) = declarations {
                    seq.serialize_element(&Declarations(declarations))?;
                }
                for h in hosted {
                    seq.serialize_element(h)?;
                }
                seq.end()
            }
            Part::Contents(v) => v.serialize(s),
            Part::Value(v) => v.serialize(s),
        }
    }
}

/// The conversation as `systemInstruction` and `contents`.
fn conversation<'a>(
    turns: &'a [Turn],
    notices: &mut Notices,
) -> (Option<Part<'a>>, Vec<Written<'a>>) {
    let mut system_raw = None;
    let mut system_texts: Vec<Value> = Vec::new();
    let mut contents: Vec<Written<'a>> = Vec::with_capacity(turns.len());
    // Call ids to names: a function response names its function.
    let mut names: std::collections::HashMap<&str, &str> = std::collections::HashMap::new();
    for turn in turns {
        for item in &turn.items {
            if let Item::Call(c) = item {
                names.insert(&c.id, &c.name);
            }
        }
    }
    // Where the turn being answered starts: after the last user turn of
    // text (calls there need a signature).
    let answering_from = turns
        .iter()
        .rposition(|t| {
            t.role == Role::User && t.items.iter().any(|i| matches!(i, Item::Text { .. }))
        })
        .unwrap_or(0);
    let mut unsigned = false;
    for (index, turn) in turns.iter().enumerate() {
        match turn.kept_for(PROTOCOL) {
            Some((o, raw)) if o.slot == Slot::System && system_raw.is_none() => {
                system_raw = Some(raw);
                continue;
            }
            Some((o, raw)) if o.slot == Slot::Message => {
                contents.push(Written::Raw(raw));
                continue;
            }
            _ => {}
        }
        match turn.role {
            Role::System => {
                for item in &turn.items {
                    match item {
                        Item::Text { text } => system_texts.push(json!({"text": text})),
                        other => {
                            if foreign_note(other, PROTOCOL, notices) {
                                notices
                                    .add("media in instructions is not carried and was left out");
                            }
                        }
                    }
                }
            }
            Role::User => user(turn, &names, &mut contents, notices),
            Role::Assistant => {
                unsigned |= model(turn, index > answering_from, &mut contents, notices);
            }
        }
    }
    if unsigned {
        notices.add(format!(
            "calls made by a model of another protocol carry no thought signature; they go to the {PROTOCOL} model with `{NO_SIGNATURE}`"
        ));
    }
    let system = match (system_raw, system_texts.is_empty()) {
        (Some(raw), true) => Some(Part::Raw(raw)),
        (Some(raw), false) => {
            let mut parts = serde_json::from_str::<Value>(raw.get())
                .ok()
                .and_then(|v| v["parts"].as_array().cloned())
                .unwrap_or_default();
            parts.extend(system_texts);
            Some(Part::Value(json!({"parts": parts})))
        }
        (None, false) => Some(Part::Value(json!({"parts": system_texts}))),
        (None, true) => None,
    };
    (system, contents)
}

/// Appends `part` to the content of `role` being written, or starts one
/// (Gemini alternates `user` and `model`).
fn push(contents: &mut Vec<Written<'_>>, role: &'static str, part: Value) {
    written::push(contents, role, "parts", part);
}

/// Media as a part (`None` when Gemini cannot hold it).
pub fn media_part(m: &Media) -> Option<Value> {
    let mime = |m: &Media| match m.kind {
        MediaKind::Image => "image/png",
        MediaKind::Document => "application/pdf",
        _ => "application/octet-stream",
    };
    match &m.source {
        Source::Base64 { mime, data } => {
            Some(json!({"inlineData": {"mimeType": mime, "data": data}}))
        }
        Source::Url { url } => Some(json!({"fileData": {"mimeType": mime(m), "fileUri": url}})),
        Source::Text { text } => Some(json!({"text": text})),
        Source::FileId { .. } => None,
    }
}

fn function_response(r: &CallResult, names: &std::collections::HashMap<&str, &str>) -> Value {
    let name = r
        .name
        .as_deref()
        .or_else(|| names.get(r.call_id.as_str()).copied())
        .unwrap_or("tool");
    let key = if r.is_error { "error" } else { "output" };
    let mut f = json!({"name": name, "response": {key: r.text}});
    if !r.call_id.is_empty() && !r.call_id.starts_with(MADE_ID) {
        f["id"] = json!(r.call_id);
    }
    let media: Vec<Value> = r
        .media
        .iter()
        .filter_map(media_part)
        .filter(|p| p.get("text").is_none())
        .collect();
    if !media.is_empty() {
        f["parts"] = Value::Array(media);
    }
    json!({"functionResponse": f})
}

/// A user's turn: its results as function responses, then its text and
/// media.
fn user<'a>(
    turn: &'a Turn,
    names: &std::collections::HashMap<&str, &str>,
    contents: &mut Vec<Written<'a>>,
    notices: &mut Notices,
) {
    let mut rest = Vec::new();
    for item in &turn.items {
        match item {
            Item::Result(r) => push(contents, "user", function_response(r, names)),
            other => rest.push(other),
        }
    }
    for item in rest {
        match item {
            Item::Text { text } => push(contents, "user", json!({"text": text})),
            Item::Media { media } => match media_part(media) {
                Some(p) => push(contents, "user", p),
                None => notices.add(format!(
                    "a {:?} given by a file id {PROTOCOL} cannot read was left out",
                    media.kind
                )),
            },
            Item::Native(n) if n.protocol == PROTOCOL => push(contents, "user", n.value.clone()),
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

/// A model's turn written from its items; in the turn being answered, the
/// first call of each model content carries a signature (its own, or the
/// documented one). A call the turn answers itself (a tool the gateway ran,
/// as a client shows it) goes first, as a model content of its own with
/// its response after it: Gemini pairs a content's calls with the next
/// content's responses, all of them. `true` when a call went with the
/// documented signature.
fn model<'a>(
    turn: &'a Turn,
    answering: bool,
    contents: &mut Vec<Written<'a>>,
    notices: &mut Notices,
) -> bool {
    let answered: std::collections::HashMap<&str, &CallResult> = turn
        .items
        .iter()
        .filter_map(|i| match i {
            Item::Result(r) => Some((r.call_id.as_str(), r)),
            _ => None,
        })
        .collect();
    let mut unsigned = false;
    let mut names = std::collections::HashMap::new();
    // A model content starts: its first call is the one to sign.
    let mut first_call = true;
    let call_part = |c: &Call, first: &mut bool, unsigned: &mut bool| {
        let mut f = json!({"name": c.name, "args": c.arguments_value()});
        if !c.id.is_empty() && !c.id.starts_with(MADE_ID) {
            f["id"] = json!(c.id);
        }
        let mut part = json!({"functionCall": f});
        match &c.opaque {
            Some(o) if o.protocol == PROTOCOL => part["thoughtSignature"] = json!(o.data),
            _ if answering && *first => {
                part["thoughtSignature"] = json!(NO_SIGNATURE);
                *unsigned = true;
            }
            _ => {}
        }
        *first = false;
        part
    };
    for item in &turn.items {
        if let Item::Call(c) = item
            && let Some(r) = answered.get(c.id.as_str())
        {
            names.insert(c.id.as_str(), c.name.as_str());
            let mut first = true;
            let part = call_part(c, &mut first, &mut unsigned);
            contents.push(Written::Built {
                role: "model",
                key: "parts",
                items: vec![part],
            });
            push(contents, "user", function_response(r, &names));
        }
    }
    for item in &turn.items {
        match item {
            Item::Text { text } => push(contents, "model", json!({"text": text})),
            Item::Call(c) if answered.contains_key(c.id.as_str()) => {}
            Item::Call(c) => {
                names.insert(c.id.as_str(), c.name.as_str());
                let part = call_part(c, &mut first_call, &mut unsigned);
                push(contents, "model", part);
            }
            Item::Result(_) => {}
            // A thought's words are not sent back; a signature made on a
            // text part goes back on an empty one.
            Item::Reasoning(r) => match &r.opaque {
                Some(o) if o.protocol == PROTOCOL => {
                    push(
                        contents,
                        "model",
                        json!({"text": "", "thoughtSignature": o.data}),
                    );
                }
                _ => {
                    foreign_note(item, PROTOCOL, notices);
                }
            },
            Item::Native(n) if n.protocol == PROTOCOL => push(contents, "model", n.value.clone()),
            Item::Media { .. } => {
                notices.add("media in an assistant's turn is not carried and was left out")
            }
            other => {
                foreign_note(other, PROTOCOL, notices);
            }
        }
    }
    unsigned
}

/// Gemini's `finishReason` read (`called`: the answer has calls).
pub fn finish(reason: &str, called: bool) -> FinishReason {
    match reason {
        "STOP" if called => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// The calls of one answer so far, and what makes the ids the gateway
/// gives those without one unique (a client keeps every turn's calls by
/// id: two answers' `gemini_call_0` would be one call to it).
#[derive(Debug, Default)]
struct Calls {
    count: usize,
    tag: Option<String>,
}

impl Calls {
    fn made_id(&mut self) -> String {
        let tag = self
            .tag
            .get_or_insert_with(|| uuid::Uuid::new_v4().simple().to_string());
        format!("{MADE_ID}{tag}_{}", self.count)
    }
}

/// The deltas of one part.
fn part_deltas(p: &Value, calls: &mut Calls, deltas: &mut Vec<Delta>) {
    let signature = p["thoughtSignature"]
        .as_str()
        .or_else(|| p["thought_signature"].as_str())
        .map(|s| Opaque::new(PROTOCOL, s));
    if let Some(f) = p.get("functionCall").filter(|f| f.is_object()) {
        let id = match f["id"].as_str() {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => calls.made_id(),
        };
        deltas.push(Delta::Call {
            index: calls.count,
            id: Some(id),
            name: f["name"].as_str().map(str::to_owned),
            arguments: Some(
                f.get("args")
                    .map_or_else(|| "{}".to_owned(), Value::to_string),
            ),
            opaque: signature,
        });
        calls.count += 1;
        return;
    }
    if let Some(t) = p["text"].as_str() {
        if p["thought"] == json!(true) {
            if !t.is_empty() {
                deltas.push(Delta::Reasoning(t.to_owned()));
            }
        } else if !t.is_empty() {
            deltas.push(Delta::Text(t.to_owned()));
        }
        if let Some(s) = signature {
            deltas.push(Delta::ReasoningOpaque(s));
        }
        return;
    }
    deltas.push(Delta::Native(Native {
        protocol: PROTOCOL,
        what: "parts of a kind the gateway does not read".into(),
        value: p.clone(),
    }));
}

/// Why a response has no candidate (a blocked prompt).
fn blocked(response: &Value) -> Option<String> {
    response["promptFeedback"]["blockReason"]
        .as_str()
        .map(str::to_owned)
}

/// Parts as the model reads them back: consecutive unsigned text parts of
/// the same kind joined, every signed part kept apart.
fn replay_parts(parts: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for p in parts {
        let plain_text = |v: &Value| {
            v.get("text").is_some_and(Value::is_string)
                && v.get("thoughtSignature").is_none()
                && v.get("functionCall").is_none()
        };
        if let Some(last) = out.last_mut()
            && plain_text(last)
            && plain_text(p)
            && last["thought"] == p["thought"]
        {
            let joined = format!(
                "{}{}",
                last["text"].as_str().unwrap_or_default(),
                p["text"].as_str().unwrap_or_default()
            );
            last["text"] = Value::String(joined);
            continue;
        }
        out.push(p.clone());
    }
    out
}

/// A whole response as deltas; the response is its envelope.
pub fn decode(body: &[u8]) -> Result<Decoded, String> {
    let response: Value =
        serde_json::from_slice(body).map_err(|e| format!("not a JSON response: {e}"))?;
    let candidate = response.get("candidates").and_then(|c| c.get(0));
    let mut deltas = Vec::new();
    let mut calls = Calls::default();
    let parts: Vec<Value> = candidate
        .and_then(|c| c["content"]["parts"].as_array())
        .cloned()
        .unwrap_or_default();
    for p in &parts {
        part_deltas(p, &mut calls, &mut deltas);
    }
    match (
        candidate.and_then(|c| c["finishReason"].as_str()),
        blocked(&response),
    ) {
        (Some(reason), _) => deltas.push(Delta::Finish(finish(reason, calls.count > 0))),
        (None, Some(_)) => deltas.push(Delta::Finish(FinishReason::ContentFilter)),
        (None, None) if candidate.is_none() => {
            return Err("the response has no candidate".into());
        }
        (None, None) => {}
    }
    if let Some(u) = response.get("usageMetadata").filter(|u| u.is_object()) {
        deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u.clone())));
    }
    deltas.push(Delta::Replay(raw(
        &json!({"role": "model", "parts": replay_parts(&parts)}),
    )));
    Ok(Decoded {
        deltas,
        model: response
            .get("modelVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
        envelope: super::Envelope::Read(Native {
            protocol: PROTOCOL,
            what: "response".into(),
            value: response,
        }),
    })
}

/// The decoder of a `streamGenerateContent?alt=sse` stream: each event a
/// partial response whose parts are new; the usage a running total (the
/// last one counts); the answer complete with its `finishReason` (the
/// stream has no end marker of its own).
#[derive(Debug, Default)]
pub struct Stream {
    calls: Calls,
    parts: Vec<Value>,
    usage: Option<Value>,
    done: bool,
}

/// The most parts one streamed answer may have.
const MAX_PARTS: usize = 65_536;

impl Stream {
    pub fn event(&mut self, _name: &str, data: &str) -> Result<Step, String> {
        let data = data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Step::default());
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|_| "a stream chunk is not JSON".to_owned())?;
        if let Some(e) = chunk.get("error") {
            return Err(format!(
                "it reported an error mid-stream: {}",
                e["message"].as_str().unwrap_or("no message")
            ));
        }
        let mut deltas = Vec::new();
        let candidate = chunk.get("candidates").and_then(|c| c.get(0));
        for p in candidate
            .and_then(|c| c["content"]["parts"].as_array())
            .into_iter()
            .flatten()
        {
            if self.parts.len() >= MAX_PARTS {
                return Err(format!("the answer has more than {MAX_PARTS} parts"));
            }
            part_deltas(p, &mut self.calls, &mut deltas);
            self.parts.push(p.clone());
        }
        if let Some(u) = chunk.get("usageMetadata").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let finished = match (
            candidate.and_then(|c| c["finishReason"].as_str()),
            blocked(&chunk),
        ) {
            (Some(reason), _) => Some(finish(reason, self.calls.count > 0)),
            (None, Some(_)) => Some(FinishReason::ContentFilter),
            _ => None,
        };
        if let Some(f) = finished {
            self.done = true;
            deltas.push(Delta::Finish(f));
            if let Some(u) = &self.usage {
                deltas.push(Delta::Usage(super::usage::of_value(PROTOCOL, u.clone())));
            }
            deltas.push(Delta::Replay(raw(
                &json!({"role": "model", "parts": replay_parts(&self.parts)}),
            )));
            return Ok(Step { deltas, done: true });
        }
        Ok(Step {
            deltas,
            done: false,
        })
    }

    /// A `finishReason` came.
    pub fn complete(&self) -> bool {
        self.done
    }
}

/// The human message of an error body (Google's `{"error": {"code",
/// "message", "status"}}`, sometimes in an array).
pub fn error_message(body: &[u8]) -> String {
    if let Ok(Value::Array(a)) = serde_json::from_slice::<Value>(body)
        && let Some(first) = a.first()
    {
        return super::openai_chat::error_message(first.to_string().as_bytes());
    }
    super::openai_chat::error_message(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Origin, Request};
    use crate::model::protocol::{Assembly, Tools};

    /// A Gemini request with `body`'s fields.
    fn request_of(body: &Value) -> Request {
        let mut req = Request::new(PROTOCOL, "m");
        req.fields = body
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), raw(v)))
            .collect();
        req
    }

    #[test]
    fn a_snake_case_system_instruction_or_tool_config_is_sent_once() {
        // As Google's Python SDK may write them; the gateway writes its own
        // in lowerCamelCase, from the turns and the tool choice.
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "system_instruction": {"parts": [{"text": "be brief"}]},
            "tool_config": {"function_calling_config": {"mode": "ANY"}}});
        let req = request_of(&body);
        let turns = [
            Turn::new(Role::System, vec![Item::text("be brief")]),
            Turn::new(Role::User, vec![Item::text("hi")]),
        ];
        let tools = [std::sync::Arc::new(crate::model::protocol::test_tool())];
        let call = Outgoing {
            request: &req,
            model: "gemini-x",
            turns: &turns,
            tools: Tools(&tools),
            tool_choice: Some(ToolChoice::Required),
            stream: false,
        };
        let v: Value = serde_json::from_slice(&encode(&call, &mut Notices::default())).unwrap();
        assert_eq!(v.get("system_instruction"), None);
        assert_eq!(v.get("tool_config"), None);
        assert_eq!(v["systemInstruction"]["parts"][0]["text"], "be brief");
        assert_eq!(v["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
        // Without tools, neither spelling of the tool choice is sent.
        let call = Outgoing {
            tools: Tools(&[]),
            ..call
        };
        let v: Value = serde_json::from_slice(&encode(&call, &mut Notices::default())).unwrap();
        assert_eq!(v.get("tool_config"), None);
        assert_eq!(v.get("toolConfig"), None);
        crate::model::protocol::assert_encodes_the_same_once_released(
            &call,
            encode,
            &["system_instruction", "contents"],
        );
    }

    #[test]
    fn a_gemini_request_keeps_its_fields_and_the_model_s_signed_parts() {
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"thinkingConfig": {"includeThoughts": true}},
            "safetySettings": [{"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_NONE"}]});
        let req = request_of(&body);
        let turns = [
            Turn::decoded(
                Role::User,
                vec![Item::text("hi")],
                PROTOCOL,
                Slot::Message,
                raw(&body["contents"][0]),
            ),
            Turn {
                role: Role::Assistant,
                items: vec![Item::Call(Call::new("gemini_call_0", "t", "{}"))],
                origin: Some(Origin {
                    protocol: PROTOCOL,
                    slot: Slot::Message,
                    raw: raw(
                        &json!({"role": "model", "parts": [{"functionCall": {"name": "t", "args": {}}, "thoughtSignature": "c2ln"}]}),
                    ).into(),
                    untyped: Vec::new(),
                    made_by: Some("g".into()),
                }),
            },
            Turn::new(
                Role::User,
                vec![Item::Result(CallResult::text("gemini_call_0", "42"))],
            ),
        ];
        let tools = [std::sync::Arc::new(crate::model::protocol::test_tool())];
        let call = Outgoing {
            request: &req,
            model: "gemini-x",
            turns: &turns,
            tools: Tools(&tools),
            tool_choice: None,
            stream: true,
        };
        let encoded = encode(&call, &mut Notices::default());
        // The conversation's raw fields given back, the body is the same:
        // they are written from the turns, in place.
        crate::model::protocol::assert_encodes_the_same_once_released(&call, encode, &["contents"]);
        let v: Value = serde_json::from_slice(&encoded).unwrap();
        assert_eq!(v["generationConfig"], body["generationConfig"]);
        assert_eq!(v["safetySettings"], body["safetySettings"]);
        assert!(v.get("model").is_none());
        assert_eq!(
            v["tools"],
            json!([{"functionDeclarations": [{"name": "t", "description": "d", "parametersJsonSchema": {"type": "object"}}]}])
        );
        assert_eq!(v["contents"][1]["parts"][0]["thoughtSignature"], "c2ln");
        assert_eq!(
            v["contents"][2],
            json!({"role": "user", "parts": [{"functionResponse": {"name": "t", "response": {"output": "42"}}}]})
        );
    }

    #[test]
    fn another_model_s_calls_go_with_the_documented_signature_in_the_turn_answered() {
        let req = Request::new(Protocol::OpenaiChat, "m");
        let turns = [
            Turn::new(Role::User, vec![Item::text("go")]),
            Turn::new(
                Role::Assistant,
                vec![
                    Item::Call(Call::new("c1", "t", "{}")),
                    Item::Call(Call::new("c2", "t", "{}")),
                ],
            ),
            Turn::new(
                Role::User,
                vec![
                    Item::Result(CallResult::text("c1", "1")),
                    Item::Result(CallResult::text("c2", "2")),
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
        let parts = &v["contents"][1]["parts"];
        assert_eq!(parts[0]["thoughtSignature"], NO_SIGNATURE);
        assert!(
            parts[1].get("thoughtSignature").is_none(),
            "only the first call"
        );
        assert_eq!(v["contents"][2]["parts"][1]["functionResponse"]["id"], "c2");
        assert_eq!(notices.iter().count(), 1);
    }

    #[test]
    fn whole_and_streamed_responses_give_the_same_turn() {
        let whole = json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "pondering", "thought": true},
                {"text": "Checking."},
                {"functionCall": {"name": "t", "args": {"a": 1}}, "thoughtSignature": "c2ln"}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 3, "cachedContentTokenCount": 4},
            "modelVersion": "gemini-x"});
        let d = decode(whole.to_string().as_bytes()).unwrap();
        let mut a = Assembly::default();
        for delta in d.deltas {
            a.push(delta, 8).unwrap();
        }
        let chunks = [
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ponder", "thought": true}]}}], "usageMetadata": {"promptTokenCount": 10}}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ing", "thought": true}, {"text": "Checking."}]}}]}),
            json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "t", "args": {"a": 1}}, "thoughtSignature": "c2ln"}]}, "finishReason": "STOP"}],
                   "usageMetadata": whole["usageMetadata"]}),
        ];
        let mut s = Stream::default();
        let mut b = Assembly::default();
        for c in chunks {
            for delta in s.event("", &c.to_string()).unwrap().deltas {
                b.push(delta, 8).unwrap();
            }
        }
        assert!(s.complete());
        // The same, but for the ids the gateway made (unique per answer).
        let without_ids = |a: &Assembly| {
            let mut items = a.items();
            for i in &mut items {
                if let Item::Call(c) = i {
                    assert!(c.id.starts_with(MADE_ID), "{}", c.id);
                    c.id.clear();
                }
            }
            items
        };
        assert_eq!(without_ids(&a), without_ids(&b));
        assert_eq!(a.finish, Some(FinishReason::ToolCalls));
        assert_eq!(a.calls[0].opaque.as_ref().unwrap().data, "c2ln");
        assert_eq!(
            (
                a.usage.input,
                a.usage.output,
                a.usage.reasoning,
                a.usage.cache_read
            ),
            (10, 8, 3, 4)
        );
        assert_eq!(a.usage.input, b.usage.input);
        let ra: Value = serde_json::from_str(a.replay.as_ref().unwrap().get()).unwrap();
        let rb: Value = serde_json::from_str(b.replay.as_ref().unwrap().get()).unwrap();
        assert_eq!(ra, rb);
        assert_eq!(ra["parts"][2]["thoughtSignature"], "c2ln");
    }

    #[test]
    fn errors_and_blocked_prompts() {
        let mut s = Stream::default();
        assert!(
            s.event(
                "",
                r#"{"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}"#
            )
            .unwrap_err()
            .contains("boom")
        );
        let d = decode(br#"{"promptFeedback": {"blockReason": "SAFETY"}}"#).unwrap();
        assert!(
            d.deltas
                .iter()
                .any(|d| matches!(d, Delta::Finish(FinishReason::ContentFilter)))
        );
        assert_eq!(error_message(br#"[{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}]"#), "quota");
    }
}
