//! A client's request as the engine runs it, decoded by its face.

use indexmap::IndexMap;
use serde_json::value::RawValue;

use super::{Params, Protocol, ToolChoice, ToolDef, Turn};

/// Top-level fields of a request body as raw JSON, in the client's order:
/// fields the gateway does not touch go to a model of the same protocol
/// byte for byte. Hashed with foldhash, seeded at random per map (the
/// keys are the client's).
pub type RawFields = IndexMap<String, Box<RawValue>, foldhash::fast::RandomState>;

/// Serializes `value` as a raw JSON value.
pub fn raw(value: &impl serde::Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| {
        // Serializing a `serde_json::Value` or plain data cannot fail; keep
        // the request well-formed if it ever did.
        RawValue::from_string("null".to_owned()).unwrap_or_default()
    })
}

/// Decodes the rest of a request from its raw fields: its conversation,
/// typed sampling and tool choice (a face that decodes them only once the
/// request turns out to need them: a transparent proxy never does).
pub type DecodeRest = fn(&mut Request) -> Result<(), RequestError>;

/// A client's request, decoded by its face.
#[derive(Debug)]
pub struct Request {
    /// The protocol the client spoke.
    pub face: Protocol,
    pub model: String,
    /// The conversation so far.
    turns: Vec<Turn>,
    /// What decodes the rest of the request, when the face decodes it
    /// only for a tool loop.
    pending: Option<DecodeRest>,
    /// The client's body, when [`Request::fields`] is read from it only
    /// once needed (a request the gateway changes nothing in: a proxied
    /// one never needs them).
    source: Option<bytes::Bytes>,
    /// How many messages the conversation has, counted without building
    /// them.
    pub message_count: usize,
    /// The tools the client offers.
    pub tools: Vec<ToolDef>,
    pub tool_choice: Option<ToolChoice>,
    pub params: Params,
    pub stream: bool,
    /// Whether a streamed answer ends with its usage.
    pub include_usage: bool,
    /// The face's top-level fields the typed view does not replace, raw
    /// and in order, for a model of the face's protocol (the typed fields
    /// are among them when that model takes them as they are). Empty
    /// until [`Request::decode_rest`] when the face deferred them
    /// ([`Request::defer_fields`]); once a loop's turns are decoded, the
    /// fields they came from are `null`
    /// ([`Request::release_conversation_fields`]).
    pub fields: RawFields,
    /// Fields of the client's request a model of another protocol does
    /// not get (said in a notice when it happens).
    pub untyped: Vec<String>,
    /// The `tool_set` extension field (or the face's own way to name one).
    pub tool_set: Option<String>,
    /// The `max_tool_iterations` extension field.
    pub max_tool_iterations: Option<u32>,
    /// The `tool_mode` extension field (`direct` or `code`): how the model
    /// uses the set's tools for this request, whatever the set's `mode`.
    pub tool_mode: Option<toolgate_config::format::SetMode>,
    /// The client's deferred tools and the search over them the gateway
    /// runs (set by a face whose API defers tools).
    pub deferred: Option<Box<DeferredTools>>,
    /// `true` when extension fields were removed (the raw body differs).
    pub modified: bool,
    /// The number of answers asked for (`n`), when more than one.
    pub choices: Option<u64>,
    /// Headers of the face's protocol the client sent that a model of the
    /// same protocol takes (`anthropic-beta`, `anthropic-version`).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Tools the client's provider runs itself (Anthropic's web search,
    /// Google's `googleSearch`…): offered as they came to a model of the
    /// face's protocol, unless a gateway tool of the same name serves them.
    pub hosted: Vec<Hosted>,
    /// What the face's deferred decoding ([`Request::decode_rest`]) left
    /// out, for the face to say with its own notices.
    pub notices: super::Notices,
}

/// A tool the provider runs, as the client declared it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hosted {
    /// The name a gateway tool serving it has (`web_search`).
    pub name: String,
    pub tool: super::Native,
}

impl Hosted {
    /// `tool` (of `kind`, as `protocol` declares it), served by a gateway
    /// tool named `name`.
    pub fn new(
        name: &str,
        protocol: super::Protocol,
        kind: &str,
        tool: serde_json::Value,
    ) -> Hosted {
        Hosted {
            name: name.to_owned(),
            tool: super::Native {
                protocol,
                what: format!("`{kind}` tools"),
                value: tool,
            },
        }
    }
}

impl Request {
    /// A request of `face` for `model`, with nothing else yet.
    pub fn new(face: Protocol, model: impl Into<String>) -> Request {
        Request {
            face,
            model: model.into(),
            turns: Vec::new(),
            pending: None,
            source: None,
            message_count: 0,
            tools: Vec::new(),
            tool_choice: None,
            params: Params::default(),
            stream: false,
            include_usage: false,
            fields: RawFields::default(),
            untyped: Vec::new(),
            tool_set: None,
            max_tool_iterations: None,
            tool_mode: None,
            deferred: None,
            modified: false,
            choices: None,
            headers: Vec::new(),
            hosted: Vec::new(),
            notices: super::Notices::default(),
        }
    }

    /// Sets the decoded conversation.
    pub fn set_turns(&mut self, turns: Vec<Turn>) {
        self.message_count = self.message_count.max(turns.len());
        self.turns = turns;
        self.pending = None;
    }

    /// The rest will be decoded by `decode` when a loop needs it.
    pub fn defer_rest(&mut self, decode: DecodeRest) {
        self.pending = Some(decode);
    }

    /// The raw fields are those of `body`, every one of them, read when
    /// the rest is decoded.
    pub fn defer_fields(&mut self, body: bytes::Bytes) {
        self.source = Some(body);
    }

    /// Decodes the rest if the face left it for later.
    pub fn decode_rest(&mut self) -> Result<(), RequestError> {
        if let Some(body) = self.source.take() {
            self.fields = fields_of(&body)?;
        }
        match self.pending.take() {
            Some(decode) => decode(self),
            None => Ok(()),
        }
    }

    /// Gives back the raw text of the fields the conversation was decoded
    /// from (a chat request's `messages`, a Messages request's `system` and
    /// `messages`, a Responses request's `instructions` and `input`, a
    /// Gemini request's `systemInstruction` and `contents`), once its turns
    /// are decoded: every protocol's encoder writes or removes these from
    /// the turns, so a loop need not hold the conversation twice. Each
    /// keeps its place among the fields, as `null`.
    pub fn release_conversation_fields(&mut self) {
        let names: &[&str] = match self.face {
            super::Protocol::OpenaiChat => &["messages"],
            super::Protocol::Anthropic => &["system", "messages"],
            super::Protocol::OpenaiResponses => &["instructions", "input"],
            super::Protocol::Gemini => &["systemInstruction", "system_instruction", "contents"],
        };
        for name in names {
            if let Some(v) = self.fields.get_mut(*name) {
                *v = Box::default();
            }
        }
    }

    /// The conversation (empty until decoded).
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }

    pub fn take_turns(&mut self) -> Vec<Turn> {
        std::mem::take(&mut self.turns)
    }

    /// The raw fields, read from the body if they are still deferred.
    fn raw_fields(&self) -> std::borrow::Cow<'_, RawFields> {
        match &self.source {
            Some(source) => std::borrow::Cow::Owned(fields_of(source).unwrap_or_default()),
            None => std::borrow::Cow::Borrowed(&self.fields),
        }
    }

    /// A field of the face's raw request, parsed.
    pub fn field(&self, name: &str) -> Option<serde_json::Value> {
        self.raw_fields()
            .get(name)
            .and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// A new non-streaming request with the same model and sampling but
    /// its own conversation and none of the client's tools (a
    /// sub-agent's).
    pub fn derived(&self, turns: Vec<Turn>) -> Request {
        let mut fields = self.raw_fields().into_owned();
        for field in [
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "stream",
            "stream_options",
            "n",
            "messages",
        ] {
            fields.shift_remove(field);
        }
        let mut derived = Request::new(self.face, self.model.clone());
        derived.message_count = turns.len();
        derived.turns = turns;
        derived.params = self.params.clone();
        derived.fields = fields;
        derived.untyped = self.untyped.clone();
        derived.headers = self.headers.clone();
        derived.modified = true;
        derived
    }

    /// The body of a transparent proxy call: the original bytes when
    /// nothing changed, else the raw fields with the upstream's model name.
    pub fn proxy_body(&self, original: bytes::Bytes, upstream_model: &str) -> bytes::Bytes {
        if !self.modified && upstream_model == self.model {
            return original;
        }
        let mut body = self.raw_fields().into_owned();
        // Gemini's model is in the URL.
        if self.face != super::Protocol::Gemini {
            body.insert("model".into(), raw(&upstream_model));
        }
        bytes::Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }
}

/// The top-level fields of a JSON object body.
fn fields_of(body: &[u8]) -> Result<RawFields, RequestError> {
    serde_json::from_slice(body)
        .map_err(|e| RequestError::new(format!("the request body is not a JSON object: {e}")))
}

/// Tools a client offers only once a search finds them (OpenAI's and
/// Anthropic's `defer_loading`), with the search the gateway runs for a
/// model that has no search of its own: a tool named `search` offered in
/// their place, whose call makes its best matches callable.
#[derive(Debug, Clone)]
pub struct DeferredTools {
    /// The search tool's name, as the client declared it.
    pub search: String,
    pub tools: Vec<ToolDef>,
}

/// Why a request is not a usable request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<String>,
}

impl RequestError {
    pub fn new(message: impl Into<String>) -> RequestError {
        RequestError {
            message: message.into(),
            param: None,
        }
    }

    /// Names the field at fault.
    pub fn param(mut self, param: &str) -> RequestError {
        self.param = Some(param.to_owned());
        self
    }
}
