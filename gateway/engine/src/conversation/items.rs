//! The typed items of a conversation, and the client's tools.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::Protocol;

/// Who says an item of text or media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions (`system` and `developer` alike).
    System,
    User,
    Assistant,
}

/// One thing said in a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    Text {
        text: String,
    },
    /// An image, a document, audio or another file.
    Media {
        media: Media,
    },
    /// The model's call of a tool.
    Call(Call),
    /// A tool's answer to a call.
    Result(CallResult),
    /// The model's reasoning.
    Reasoning(Reasoning),
    /// Something of one protocol the engine has no type for: it goes back
    /// to that protocol only.
    Native(Native),
}

impl Item {
    pub fn text(text: impl Into<String>) -> Item {
        Item::Text { text: text.into() }
    }
}

/// A protocol's own JSON, kept for that protocol alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Native {
    pub protocol: Protocol,
    /// What it is, in the plural, for a notice where it is left out
    /// (`` `web_fetch_tool_result` blocks ``).
    pub what: String,
    pub value: Value,
}

/// Media given in a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Media {
    pub kind: MediaKind,
    pub source: Source,
    /// A file name or a document's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An image's detail (`low`, `high`, `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    Image,
    /// A PDF or another document.
    Document,
    Audio,
    Video,
    /// Any other file.
    File,
}

/// Where media's bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Source {
    Url {
        url: String,
    },
    Base64 {
        mime: String,
        data: String,
    },
    /// A file a provider stores, by its id there.
    FileId {
        id: String,
    },
    /// A document given as plain text.
    Text {
        text: String,
    },
}

impl Source {
    /// A `data:` URL, or the URL itself.
    pub fn url(&self) -> Option<String> {
        match self {
            Source::Url { url } => Some(url.clone()),
            Source::Base64 { mime, data } => Some(format!("data:{mime};base64,{data}")),
            _ => None,
        }
    }

    /// A source from a URL, a `data:` URL becoming base64.
    pub fn from_url(url: &str) -> Source {
        if let Some(rest) = url.strip_prefix("data:")
            && let Some((mime, data)) = rest.split_once(";base64,")
        {
            return Source::Base64 {
                mime: mime.to_owned(),
                data: data.to_owned(),
            };
        }
        Source::Url {
            url: url.to_owned(),
        }
    }
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
    /// Why a call parsed out of text could not be read: it is not run, and
    /// the model is told (see `toolgate_toolcall::ParsedCall::unreadable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
    /// State the model attached to the call that only it can read
    /// (Gemini's `thoughtSignature`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque: Option<Opaque>,
}

impl Call {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Call {
        Call {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            unreadable: None,
            opaque: None,
        }
    }

    /// A call parsed out of text gets a fresh id.
    pub fn from_parsed(p: toolgate_toolcall::ParsedCall) -> Call {
        Call {
            id: format!("call_{}", uuid::Uuid::new_v4().simple()),
            name: p.name,
            arguments: p.arguments.to_string(),
            unreadable: p.unreadable,
            opaque: None,
        }
    }

    /// The arguments as a JSON value (`{}` when they are not JSON).
    pub fn arguments_value(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or_else(|_| Value::Object(Default::default()))
    }
}

/// A tool's answer to a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    pub call_id: String,
    /// The tool's name, where the protocol that wrote it says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub text: String,
    /// Images and documents the result holds (after its text).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<Media>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl CallResult {
    pub fn text(call_id: impl Into<String>, text: impl Into<String>) -> CallResult {
        CallResult {
            call_id: call_id.into(),
            name: None,
            text: text.into(),
            media: Vec::new(),
            is_error: false,
        }
    }
}

/// The model's reasoning: its words (or their summary) and the state only
/// the model that made it can read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reasoning {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque: Option<Opaque>,
}

/// State a model made that only it can read: a thinking block's
/// signature, redacted thinking, encrypted reasoning, a thought signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Opaque {
    pub protocol: Protocol,
    pub data: String,
    /// The reasoning itself is withheld: `data` holds it, encrypted
    /// (Anthropic's `redacted_thinking`), rather than signing words given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

impl Opaque {
    /// A signature or encrypted state of `protocol`.
    pub fn new(protocol: Protocol, data: impl Into<String>) -> Opaque {
        Opaque {
            protocol,
            data: data.into(),
            redacted: false,
        }
    }
}

/// A tool the client offers the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    /// Shared by its copies: a gateway tool's is copied into every loop
    /// that offers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<std::sync::Arc<str>>,
    /// The JSON Schema of its arguments.
    pub parameters: Schema,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// The tool as the client's protocol wrote it (with what the typed
    /// view does not hold: `cache_control`, `defer_loading`…), for that
    /// protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<Box<Native>>,
    /// Its JSON in each protocol, once written (a gateway tool's: shared
    /// by every copy of its spec).
    #[serde(skip)]
    pub json: ToolJson,
}

/// A JSON Schema, shared by its copies: a gateway tool's is copied into
/// every loop that offers it, and a copy costs a count, not every node of
/// the schema again.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema(std::sync::Arc<Value>);

impl std::ops::Deref for Schema {
    type Target = Value;

    fn deref(&self) -> &Value {
        &self.0
    }
}

impl Schema {
    /// The schema itself, shared.
    pub fn shared(&self) -> std::sync::Arc<Value> {
        std::sync::Arc::clone(&self.0)
    }
}

impl From<Value> for Schema {
    fn from(v: Value) -> Schema {
        Schema(std::sync::Arc::new(v))
    }
}

impl PartialEq<Value> for Schema {
    fn eq(&self, other: &Value) -> bool {
        *self.0 == *other
    }
}

impl Serialize for Schema {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Schema, D::Error> {
        Value::deserialize(d).map(Schema::from)
    }
}

/// A tool's JSON in each model protocol, written on first use and shared
/// by the copies of its spec: a gateway tool's spec is copied into every
/// loop that offers it, its JSON written once. A client's tool gets one
/// for its loop (`OfferedTools::new`); one outside a loop has none.
#[derive(Debug, Clone, Default)]
pub struct ToolJson(Option<std::sync::Arc<[std::sync::OnceLock<Box<RawValue>>; 4]>>);

/// Where each protocol's JSON is kept in a [`ToolJson`] (a new protocol
/// needs a place here and one more in its array).
fn slot(protocol: Protocol) -> usize {
    match protocol {
        Protocol::OpenaiChat => 0,
        Protocol::OpenaiResponses => 1,
        Protocol::Anthropic => 2,
        Protocol::Gemini => 3,
    }
}

impl ToolJson {
    /// A store to share between a tool's copies.
    pub fn shared() -> ToolJson {
        ToolJson(Some(std::sync::Arc::default()))
    }

    /// Keeps the JSON once written from now on (a client's tool, for the
    /// rest of its loop), unless it is kept already.
    pub fn share(&mut self) {
        if self.0.is_none() {
            *self = ToolJson::shared();
        }
    }

    /// The tool's JSON in `protocol`, written by `write` unless it was.
    pub fn written(
        &self,
        protocol: Protocol,
        write: impl FnOnce() -> Box<RawValue>,
    ) -> std::borrow::Cow<'_, RawValue> {
        match &self.0 {
            Some(written) => {
                std::borrow::Cow::Borrowed(&**written[slot(protocol)].get_or_init(write))
            }
            None => std::borrow::Cow::Owned(write()),
        }
    }
}

/// Copies of a spec are equal whatever each has written.
impl PartialEq for ToolJson {
    fn eq(&self, _: &ToolJson) -> bool {
        true
    }
}

/// How the model must use the tools.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    /// Some tool.
    Required,
    /// This tool.
    Tool {
        name: String,
    },
}

impl ToolChoice {
    /// Whether it forces a call.
    pub fn forces(&self) -> bool {
        matches!(self, ToolChoice::Required | ToolChoice::Tool { .. })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schema_is_shared_by_its_copies_and_written_as_its_json() {
        let schema =
            Schema::from(json!({"type": "object", "properties": {"q": {"type": "string"}}}));
        let copy = schema.clone();
        assert!(std::sync::Arc::ptr_eq(&schema.0, &copy.0));
        let written = serde_json::to_value(&copy).unwrap();
        assert_eq!(written, *schema);
        let read: Schema = serde_json::from_value(written).unwrap();
        assert_eq!(read, schema);
        assert!(read == json!({"type": "object", "properties": {"q": {"type": "string"}}}));
    }
}
