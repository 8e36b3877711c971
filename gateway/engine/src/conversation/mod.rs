//! The one conversation the engine works on, whatever protocol a client
//! spoke and whatever protocol the model speaks.
//!
//! A face decodes its request into a [`Request`]: the conversation so far
//! as [`Turn`]s of typed [`Item`]s (text, media, the model's calls, tools'
//! results, reasoning), the client's tools, its tool choice and sampling
//! [`Params`]. A model protocol (`crate::model::protocol`) encodes it for an
//! upstream and decodes the model's answer back into items; the face
//! encodes the loop's answer in its own shape.
//!
//! Nothing is lost on the way: a turn remembers the JSON it was decoded
//! from and the protocol that wrote it ([`Origin`]), and goes back to that
//! protocol as it came (every field the engine has no type for included:
//! `cache_control`, citations, thinking signatures, encrypted reasoning).
//! To another protocol it goes as its typed items, and what those cannot
//! hold is left out with a notice ([`Notices`]), never silently.

mod finish;
mod items;
mod notices;
mod request;
mod usage;

pub use finish::FinishReason;
pub use items::{Call, CallResult, Media, MediaKind, Native, Opaque, Reasoning, Role, Source};
pub use items::{Item, Schema, ToolChoice, ToolDef, ToolJson};
pub use notices::Notices;
pub use request::{DecodeRest, DeferredTools, Hosted, RawFields, Request, RequestError, raw};
pub use usage::{Usage, add_json};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The wire protocols the gateway speaks: each is a face for clients and
/// a protocol for models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// OpenAI's chat completions.
    #[default]
    OpenaiChat,
    /// OpenAI's Responses.
    OpenaiResponses,
    /// Anthropic's Messages.
    Anthropic,
    /// Google's Gemini (`generateContent`).
    Gemini,
}

impl Protocol {
    /// The name the configuration and notices use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::OpenaiChat => "openai_chat",
            Protocol::OpenaiResponses => "openai_responses",
            Protocol::Anthropic => "anthropic",
            Protocol::Gemini => "gemini",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a turn's JSON stood in its protocol's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Slot {
    /// One message (an item of Responses, a content of Gemini).
    Message,
    /// The request's system prompt field (Anthropic's `system`, Gemini's
    /// `systemInstruction`, Responses' `instructions`).
    System,
}

/// A turn's JSON as it came. Stored (a Responses conversation kept for
/// `previous_response_id`) as the JSON itself.
#[derive(Debug, Clone)]
pub enum Raw {
    /// Kept byte for byte.
    Kept(Box<RawValue>),
    /// A chat message of its role and text alone, written compactly
    /// (`{"role":"user","content":"…"}`, or `content` first): written
    /// again from the turn, byte for byte, rather than kept beside it (a
    /// long conversation would be held twice). The decoder checks that it
    /// comes out the same ([`crate::model::protocol::openai_chat::plain`]).
    Plain { role_first: bool },
}

impl Serialize for Raw {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Raw::Kept(raw) => raw.serialize(s),
            // Only the chat face writes plain turns, and chat conversations
            // are not stored.
            Raw::Plain { .. } => Err(serde::ser::Error::custom(
                "a plain chat message is written again from its turn, not stored",
            )),
        }
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
        Box::<RawValue>::deserialize(d).map(Raw::Kept)
    }
}

impl From<Box<RawValue>> for Raw {
    fn from(raw: Box<RawValue>) -> Raw {
        Raw::Kept(raw)
    }
}

impl PartialEq for Raw {
    fn eq(&self, other: &Raw) -> bool {
        match (self, other) {
            (Raw::Kept(a), Raw::Kept(b)) => a.get() == b.get(),
            (Raw::Plain { role_first: a }, Raw::Plain { role_first: b }) => a == b,
            _ => false,
        }
    }
}

/// The JSON a turn was decoded from, for the protocol that wrote it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Origin {
    pub protocol: Protocol,
    pub slot: Slot,
    /// The turn as it came, byte for byte: kept, or written again.
    pub raw: Raw,
    /// What a translation of this turn to another protocol leaves out
    /// (field or block names, said in a notice when it happens).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub untyped: Vec<String>,
    /// The upstream (route target) whose answer this turn is, when the
    /// gateway's loop made it: its opaque state goes back to it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_by: Option<String>,
}

impl PartialEq for Origin {
    fn eq(&self, other: &Origin) -> bool {
        self.protocol == other.protocol
            && self.slot == other.slot
            && self.raw == other.raw
            && self.untyped == other.untyped
            && self.made_by == other.made_by
    }
}

impl Origin {
    /// The turn's JSON, when it is kept as it came.
    pub fn kept(&self) -> Option<&RawValue> {
        match &self.raw {
            Raw::Kept(raw) => Some(raw),
            Raw::Plain { .. } => None,
        }
    }
}

/// One turn of the conversation: what one wire message said, as items,
/// and the message itself when a client or a model wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// Who speaks: a turn of tool results is the user's (as Anthropic and
    /// Gemini have it), one of calls the assistant's.
    pub role: Role,
    pub items: Vec<Item>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

impl Turn {
    /// A turn the gateway made (no wire message behind it).
    pub fn new(role: Role, items: Vec<Item>) -> Turn {
        Turn {
            role,
            items,
            origin: None,
        }
    }

    /// A turn decoded from `raw`, a message of `protocol`.
    pub fn decoded(
        role: Role,
        items: Vec<Item>,
        protocol: Protocol,
        slot: Slot,
        raw: impl Into<Raw>,
    ) -> Turn {
        Turn {
            role,
            items,
            origin: Some(Origin {
                protocol,
                slot,
                raw: raw.into(),
                untyped: Vec::new(),
                made_by: None,
            }),
        }
    }

    /// The turn as it came, when it came in `protocol`.
    pub fn raw_for(&self, protocol: Protocol) -> Option<&Origin> {
        self.origin.as_ref().filter(|o| o.protocol == protocol)
    }

    /// The turn's JSON as it came, byte for byte, when it came in
    /// `protocol` and is kept (see [`Raw`]).
    pub fn kept_for(&self, protocol: Protocol) -> Option<(&Origin, &RawValue)> {
        let origin = self.raw_for(protocol)?;
        Some((origin, origin.kept()?))
    }

    /// Its text items, joined by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }
}

/// Sampling and output settings every protocol has in some form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Params {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Structured output: a JSON Schema the answer follows (`name`,
    /// `schema`, `strict`), or JSON of any shape (`schema` null). Boxed:
    /// rare, and the parameters live as long as a request's stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Box<ResponseFormat>>,
    /// How hard a reasoning model thinks (`low`, `medium`, `high`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Whether the model may make several calls in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// A structured-output request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    pub name: Option<String>,
    /// `None`: any JSON object.
    pub schema: Option<serde_json::Value>,
    pub strict: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept turn is stored as its JSON itself (as before there were
    /// plain turns: replicas of either build read each other's), and a
    /// plain one is refused rather than stored as something else.
    #[test]
    fn a_kept_raw_is_stored_as_its_json() {
        let json = r#"{"role":"user","content":[{"type":"input_text","text":"hi"}]}"#;
        let kept = Raw::Kept(RawValue::from_string(json.to_owned()).unwrap_or_default());
        let stored = serde_json::to_string(&kept).unwrap_or_default();
        assert_eq!(stored, json);
        let back: Raw = serde_json::from_str(&stored).unwrap_or(Raw::Plain { role_first: true });
        assert_eq!(back, kept);
        assert!(serde_json::to_string(&Raw::Plain { role_first: true }).is_err());
    }
}
