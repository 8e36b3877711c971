//! Model protocols: how the conversation is written for a model and how
//! its answer is read back. Each protocol has its own module with three
//! functions — `encode` (a [`Outgoing`] call as the request body),
//! `decode` (a whole answer as [`Delta`]s) and a stream decoder (each
//! server-sent event as [`Delta`]s) — and one line in each `match` below.
//! Whole and streamed answers are read the same way: both are deltas,
//! folded into one turn by [`Assembly`].

pub mod anthropic;
pub mod gemini;
mod lenient;
pub mod metered;
pub mod openai_chat;
pub mod openai_responses;
mod tools;
pub mod usage;
mod written;

use bytes::Bytes;
use serde_json::value::RawValue;

pub use tools::{OfferedTools, with_hosted};

use crate::conversation::{
    Call, FinishReason, Item, Native, Notices, Opaque, Protocol, Reasoning, Request, Role,
    ToolChoice, ToolDef, Turn, Usage,
};

/// A test's tool: `t`, described `d`, of any object.
#[cfg(test)]
pub(crate) fn test_tool() -> ToolDef {
    ToolDef {
        json: Default::default(),
        name: "t".into(),
        description: Some("d".into()),
        parameters: serde_json::json!({"type": "object"}).into(),
        strict: None,
        native: None,
    }
}

/// A test's check: the body `encode` writes for `call` is the same from a
/// request whose conversation fields were given back
/// ([`Request::release_conversation_fields`]), and `released` are `null`
/// in it.
#[cfg(test)]
pub(crate) fn assert_encodes_the_same_once_released(
    call: &Outgoing<'_>,
    encode: fn(&Outgoing<'_>, &mut Notices) -> Bytes,
    released: &[&str],
) {
    let mut request = Request::new(call.request.face, call.request.model.clone());
    request.fields = call.request.fields.clone();
    request.release_conversation_fields();
    for name in released {
        assert_eq!(request.fields[*name].get(), "null", "{name}");
    }
    let again = Outgoing {
        request: &request,
        tool_choice: call.tool_choice.clone(),
        ..*call
    };
    assert_eq!(
        encode(&again, &mut Notices::default()),
        encode(call, &mut Notices::default())
    );
}

/// One model call, as a protocol encodes it.
#[derive(Debug)]
pub struct Outgoing<'a> {
    /// The client's request (its fields, sampling and tool choice).
    pub request: &'a Request,
    /// The model name the upstream knows.
    pub model: &'a str,
    /// The conversation so far: the client's turns, then the loop's.
    pub turns: &'a [Turn],
    pub tools: Tools<'a>,
    /// The tool choice in place of the request's, if another.
    pub tool_choice: Option<ToolChoice>,
    pub stream: bool,
}

/// The tools a call offers (each keeps its JSON once written, where its
/// spec has a place for it: see `OfferedTools`).
#[derive(Debug, Clone, Copy)]
pub struct Tools<'a>(pub &'a [std::sync::Arc<ToolDef>]);

impl Tools<'_> {
    pub fn specs(&self) -> &[std::sync::Arc<ToolDef>] {
        self.0
    }

    pub fn is_empty(&self) -> bool {
        self.specs().is_empty()
    }

    /// The tools as `protocol` writes them, with `write` (one spec to its
    /// JSON).
    fn json(
        &self,
        protocol: Protocol,
        write: fn(&ToolDef) -> serde_json::Value,
    ) -> std::borrow::Cow<'_, RawValue> {
        std::borrow::Cow::Owned(tools::write_all(self.0, protocol, write))
    }
}

/// The request body of `call` in `protocol`; what it cannot carry to that
/// protocol is said in `notices`.
pub fn encode(protocol: Protocol, call: &Outgoing<'_>, notices: &mut Notices) -> Bytes {
    if protocol != Protocol::OpenaiChat
        && let Some(turns) = results_as_text(call.turns, protocol, notices)
    {
        let call = Outgoing {
            turns: &turns,
            tools: call.tools,
            tool_choice: call.tool_choice.clone(),
            ..*call
        };
        return encode(protocol, &call, notices);
    }
    match protocol {
        Protocol::OpenaiChat => openai_chat::encode(call, notices),
        Protocol::Anthropic => anthropic::encode(call, notices),
        Protocol::OpenaiResponses => openai_responses::encode(call, notices),
        Protocol::Gemini => gemini::encode(call, notices),
    }
}

/// A written request body as it is sent, without the spare capacity its
/// writing left: the body is held until the answer's head arrives (a
/// retry sends it again), which for a slow model is most of a call.
fn body(written: Vec<u8>) -> Bytes {
    Bytes::from(written.into_boxed_slice())
}

/// The turns with each result that answers no call of the assistant turn
/// right before it (a history cut short, a client's own record) as the
/// user's words: Anthropic, Gemini and Responses refuse a result without
/// its call. `None` when every result has its call. Turns that go to
/// `protocol` as they came are the client's own, and left as they are.
fn results_as_text(turns: &[Turn], protocol: Protocol, notices: &mut Notices) -> Option<Vec<Turn>> {
    let orphan = |i: usize, id: &str| {
        // The assistant's turn before (or the one holding the result: a
        // client shows a call the gateway ran with its result).
        let before = turns[..=i].iter().rev().find(|t| t.role == Role::Assistant);
        !before.is_some_and(|t| {
            t.items
                .iter()
                .any(|it| matches!(it, Item::Call(c) if c.id == id))
        })
    };
    let has_orphan = |i: usize, t: &Turn| {
        t.raw_for(protocol).is_none()
            && t.items
                .iter()
                .any(|it| matches!(it, Item::Result(r) if orphan(i, &r.call_id)))
    };
    if !turns.iter().enumerate().any(|(i, t)| has_orphan(i, t)) {
        return None;
    }
    notices.add(format!(
        "tool results that answer no call of the turn before them went to the model of {protocol} as text (it takes a result only with its call)"
    ));
    Some(
        turns
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if !has_orphan(i, t) {
                    return t.clone();
                }
                let items = t
                    .items
                    .iter()
                    .map(|it| match it {
                        Item::Result(r) if orphan(i, &r.call_id) => Item::text(format!(
                            "[result of {}{}]\n{}",
                            r.name.as_deref().unwrap_or("a tool call"),
                            if r.call_id.is_empty() {
                                String::new()
                            } else {
                                format!(" ({})", r.call_id)
                            },
                            r.text
                        )),
                        other => other.clone(),
                    })
                    .collect();
                Turn {
                    role: t.role,
                    items,
                    origin: None,
                }
            })
            .collect(),
    )
}

/// A whole answer in `protocol` as deltas, and its envelope (the fields
/// around the turn: ids, times, fingerprints) for a face of the same
/// protocol.
pub fn decode(protocol: Protocol, body: &Bytes) -> Result<Decoded, String> {
    match protocol {
        Protocol::Anthropic => anthropic::decode(body),
        Protocol::OpenaiResponses => openai_responses::decode(body),
        Protocol::Gemini => gemini::decode(body),
        Protocol::OpenaiChat => openai_chat::decode(body),
    }
}

/// A whole answer, read.
#[derive(Debug)]
pub struct Decoded {
    pub deltas: Vec<Delta>,
    pub envelope: Envelope,
    /// The model that answered, as the answer names it.
    pub model: Option<String>,
}

/// A whole answer's envelope (the fields its deltas do not hold): read
/// as a value, or kept as the body for the face that shows the loop's
/// last answer to copy or read ([`Envelope::read`]).
#[derive(Debug)]
pub enum Envelope {
    Read(Native),
    Body {
        protocol: Protocol,
        what: &'static str,
        body: Bytes,
    },
}

impl Envelope {
    /// The envelope as a value (the body read now if it was kept).
    pub fn read(self) -> Option<Native> {
        match self {
            Envelope::Read(native) => Some(native),
            Envelope::Body {
                protocol,
                what,
                body,
            } => serde_json::from_slice(&body).ok().map(|value| Native {
                protocol,
                what: what.into(),
                value,
            }),
        }
    }
}

/// A streamed answer's decoder, for each of its server-sent events.
#[derive(Debug)]
pub enum StreamDecoder {
    OpenaiChat(openai_chat::Stream),
    Anthropic(anthropic::Stream),
    OpenaiResponses(openai_responses::Stream),
    Gemini(gemini::Stream),
}

/// What one event of a stream says.
#[derive(Debug, Default)]
pub struct Step {
    pub deltas: Vec<Delta>,
    /// The answer is complete.
    pub done: bool,
}

impl StreamDecoder {
    pub fn new(protocol: Protocol) -> StreamDecoder {
        match protocol {
            Protocol::Anthropic => StreamDecoder::Anthropic(anthropic::Stream::default()),
            Protocol::OpenaiResponses => {
                StreamDecoder::OpenaiResponses(openai_responses::Stream::default())
            }
            Protocol::Gemini => StreamDecoder::Gemini(gemini::Stream::default()),
            Protocol::OpenaiChat => StreamDecoder::OpenaiChat(openai_chat::Stream::default()),
        }
    }

    /// One event: its name (`event:`, empty when none) and its data.
    pub fn event(&mut self, name: &str, data: &str) -> Result<Step, String> {
        match self {
            StreamDecoder::OpenaiChat(s) => s.event(name, data),
            StreamDecoder::Anthropic(s) => s.event(name, data),
            StreamDecoder::OpenaiResponses(s) => s.event(name, data),
            StreamDecoder::Gemini(s) => s.event(name, data),
        }
    }

    /// Whether the stream said its answer is complete.
    pub fn complete(&self) -> bool {
        match self {
            StreamDecoder::OpenaiChat(s) => s.complete(),
            StreamDecoder::Anthropic(s) => s.complete(),
            StreamDecoder::OpenaiResponses(s) => s.complete(),
            StreamDecoder::Gemini(s) => s.complete(),
        }
    }
}

/// The human message of an upstream's error body in `protocol`.
pub fn error_message(protocol: Protocol, body: &[u8]) -> String {
    match protocol {
        Protocol::Anthropic => anthropic::error_message(body),
        Protocol::Gemini => gemini::error_message(body),
        Protocol::OpenaiChat | Protocol::OpenaiResponses => openai_chat::error_message(body),
    }
}

/// A piece of a model's answer.
#[derive(Debug, Clone)]
pub enum Delta {
    Text(String),
    Reasoning(String),
    /// The state that ends the reasoning just given (a signature,
    /// encrypted reasoning).
    ReasoningOpaque(Opaque),
    /// A piece of call number `index`: each part present is appended
    /// (an id or a name may come in pieces too).
    Call {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: Option<String>,
        opaque: Option<Opaque>,
    },
    Usage(Usage),
    Finish(FinishReason),
    /// Something of the answer the engine has no type for.
    Native(Native),
    /// The model's turn as its protocol writes it back in a later
    /// request (for a protocol whose opaque state must return verbatim).
    Replay(Box<RawValue>),
}

/// A model's turn, assembled from its deltas.
#[derive(Debug, Default)]
pub struct Assembly {
    pub reasoning: Vec<Reasoning>,
    pub text: Option<String>,
    pub calls: Vec<Call>,
    pub natives: Vec<Native>,
    pub finish: Option<FinishReason>,
    pub usage: Usage,
    pub replay: Option<Box<RawValue>>,
    /// The reasoning being streamed is complete (its next piece starts
    /// another).
    reasoning_closed: bool,
}

impl Assembly {
    /// Folds `delta` in. A call whose index is `max` or more is refused
    /// before anything is allocated for it.
    pub fn push(&mut self, delta: Delta, max_calls: usize) -> Result<(), String> {
        match delta {
            Delta::Text(t) => self.text.get_or_insert_with(String::new).push_str(&t),
            Delta::Reasoning(t) => match self.reasoning.last_mut() {
                Some(r) if !self.reasoning_closed => r.text.push_str(&t),
                _ => {
                    self.reasoning.push(Reasoning {
                        text: t,
                        opaque: None,
                    });
                    self.reasoning_closed = false;
                }
            },
            Delta::ReasoningOpaque(o) => {
                match self.reasoning.last_mut() {
                    Some(r) if !self.reasoning_closed => r.opaque = Some(o),
                    _ => self.reasoning.push(Reasoning {
                        text: String::new(),
                        opaque: Some(o),
                    }),
                }
                self.reasoning_closed = true;
            }
            Delta::Call {
                index,
                id,
                name,
                arguments,
                opaque,
            } => {
                if index >= max_calls {
                    return Err(format!(
                        "a tool call has index {index}, beyond {max_calls} calls in one turn (limits.max_tool_calls_per_turn)"
                    ));
                }
                while self.calls.len() <= index {
                    self.calls.push(Call::new("", "", ""));
                }
                let call = &mut self.calls[index];
                if let Some(id) = id {
                    call.id.push_str(&id);
                }
                if let Some(name) = name {
                    call.name.push_str(&name);
                }
                if let Some(a) = arguments {
                    call.arguments.push_str(&a);
                }
                if opaque.is_some() {
                    call.opaque = opaque;
                }
            }
            Delta::Usage(u) => self.usage.add(u),
            Delta::Finish(f) => self.finish = Some(f),
            Delta::Native(n) => self.natives.push(n),
            Delta::Replay(r) => self.replay = Some(r),
        }
        Ok(())
    }

    /// The turn's items in order: reasoning, text, calls, the untyped.
    pub fn items(&self) -> Vec<Item> {
        let mut items: Vec<Item> = self
            .reasoning
            .iter()
            .cloned()
            .map(Item::Reasoning)
            .collect();
        if let Some(t) = &self.text {
            items.push(Item::text(t.clone()));
        }
        items.extend(self.calls.iter().cloned().map(Item::Call));
        items.extend(self.natives.iter().cloned().map(Item::Native));
        items
    }

    /// The reasoning's words, joined.
    pub fn reasoning_text(&self) -> Option<String> {
        let texts: Vec<&str> = self
            .reasoning
            .iter()
            .map(|r| r.text.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        (!texts.is_empty()).then(|| texts.concat())
    }
}

/// The items of `turn` said to a model of another protocol than the one
/// that wrote them: opaque state of another protocol is left out (with a
/// notice); `keep` says whether an item of `protocol`'s own is kept.
pub fn foreign_note(item: &Item, protocol: Protocol, notices: &mut Notices) -> bool {
    match item {
        Item::Native(n) if n.protocol != protocol => {
            notices.add(format!(
                "{} ({}) are not carried to a model of {protocol} and were left out",
                n.what, n.protocol
            ));
            false
        }
        Item::Reasoning(Reasoning {
            opaque: Some(o), ..
        }) if o.protocol != protocol => {
            notices.add(format!(
                "reasoning made by a model of {} (its signed or encrypted state) is not carried to a model of {protocol} and was left out",
                o.protocol
            ));
            false
        }
        _ => true,
    }
}

/// Whether a turn is the assistant's.
pub fn is_assistant(turn: &Turn) -> bool {
    turn.role == Role::Assistant
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn call_delta() -> impl Strategy<Value = Delta> {
        (
            prop_oneof![any::<usize>(), 0usize..8],
            proptest::option::of("[a-z_]{0,8}"),
            proptest::option::of(".{0,16}"),
        )
            .prop_map(|(index, name, arguments)| Delta::Call {
                index,
                id: None,
                name,
                arguments,
                opaque: None,
            })
    }

    const PROTOCOLS: [Protocol; 4] = [
        Protocol::OpenaiChat,
        Protocol::Anthropic,
        Protocol::OpenaiResponses,
        Protocol::Gemini,
    ];

    /// An upstream's event: a name each protocol uses (or none, or any),
    /// and data that is JSON of the shapes the decoders read, or any text.
    fn upstream_event() -> impl Strategy<Value = (String, String)> {
        let name = prop_oneof![
            Just(String::new()),
            prop::sample::select(vec![
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "error",
                "response.output_item.added",
                "response.output_text.delta",
                "response.function_call_arguments.delta",
                "response.completed",
                "response.failed",
            ])
            .prop_map(str::to_owned),
            ".{0,24}",
        ];
        let data = prop_oneof![
            ".{0,200}",
            Just("[DONE]".to_owned()),
            "\\{\"(choices|delta|type|index|content_block|candidates|usage|item|response)\":(\\[\\]|\\{\\}|null|1|\"x\")\\}",
            r#"\{"choices":\[\{"index":[0-9]{1,3},"delta":\{"tool_calls":\[\{"index":[0-9]{1,10},"function":\{"arguments":"[a-z{}]{0,8}"\}\}\]\}\}\]\}"#,
            r#"\{"type":"content_block_delta","index":[0-9]{1,10},"delta":\{"type":"(text_delta|input_json_delta|thinking_delta|signature_delta)","(text|partial_json|thinking|signature)":"[a-z]{0,8}"\}\}"#,
            r#"\{"candidates":\[\{"content":\{"parts":\[\{"(text|functionCall|thoughtSignature)":("[a-z]{0,5}"|\{\})\}\]\}\}\]\}"#,
        ];
        (name, data)
    }

    proptest! {
        /// Whatever an upstream streams — events of any name, JSON of the
        /// shapes read or not, huge indices — every protocol's decoder
        /// answers an error or deltas, never panics, and the assembly stays
        /// within its call cap.
        #[test]
        fn any_upstream_stream_is_decoded_or_refused(events in prop::collection::vec(upstream_event(), 0..24)) {
            for protocol in PROTOCOLS {
                let mut decoder = StreamDecoder::new(protocol);
                let mut a = Assembly::default();
                for (name, data) in &events {
                    let Ok(step) = decoder.event(name, data) else { continue };
                    for d in step.deltas {
                        let _ = a.push(d, 16);
                    }
                    prop_assert!(a.calls.len() <= 16);
                }
                let _ = decoder.complete();
            }
        }

        /// Any bytes as a whole answer: decoded or refused, never a panic.
        #[test]
        fn any_whole_answer_is_decoded_or_refused(body in prop::collection::vec(any::<u8>(), 0..512), json in "\\{\"(choices|content|output|candidates|usage|usageMetadata)\":(\\[\\{\\}\\]|\\[\\]|\\{\\}|null|\"x\")\\}") {
            for protocol in PROTOCOLS {
                let _ = decode(protocol, &Bytes::from(body.clone()));
                let _ = decode(protocol, &Bytes::from(json.clone()));
            }
        }

        /// Any sequence of streamed call pieces: no panic, never more calls
        /// than the cap, and an index beyond it is an error.
        #[test]
        fn streamed_call_deltas_are_bounded(deltas in prop::collection::vec(call_delta(), 0..32)) {
            let mut a = Assembly::default();
            for d in deltas {
                let index = match &d { Delta::Call { index, .. } => *index, _ => 0 };
                let r = a.push(d, 16);
                prop_assert!(a.calls.len() <= 16);
                prop_assert_eq!(r.is_err(), index >= 16);
            }
        }
    }

    #[test]
    fn a_huge_index_allocates_nothing() {
        let mut a = Assembly::default();
        let e = a
            .push(
                Delta::Call {
                    index: 1_000_000_000,
                    id: None,
                    name: None,
                    arguments: None,
                    opaque: None,
                },
                128,
            )
            .unwrap_err();
        assert!(e.contains("1000000000"), "{e}");
        assert!(a.calls.is_empty());
    }

    #[test]
    fn reasoning_pieces_join_until_their_opaque_state_ends_them() {
        let mut a = Assembly::default();
        let opaque = |d: &str| Opaque::new(Protocol::Anthropic, d);
        for d in [
            Delta::Reasoning("a".into()),
            Delta::Reasoning("b".into()),
            Delta::ReasoningOpaque(opaque("s1")),
            Delta::ReasoningOpaque(opaque("redacted")),
            Delta::Reasoning("c".into()),
        ] {
            a.push(d, 1).unwrap();
        }
        assert_eq!(
            a.reasoning,
            vec![
                Reasoning {
                    text: "ab".into(),
                    opaque: Some(opaque("s1"))
                },
                Reasoning {
                    text: String::new(),
                    opaque: Some(opaque("redacted"))
                },
                Reasoning {
                    text: "c".into(),
                    opaque: None
                },
            ]
        );
        assert_eq!(a.reasoning_text().as_deref(), Some("abc"));
    }
}
