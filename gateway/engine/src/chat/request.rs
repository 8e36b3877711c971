//! A client's chat-completions request: the fields the gateway reads, the
//! extension fields it removes, and the raw rest it forwards untouched.

use bytes::Bytes;
use indexmap::IndexMap;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::openai::{RawRequest, raw};

/// A parsed request.
#[derive(Debug)]
pub struct ChatRequest {
    /// Every field but the gateway's own, as raw JSON in the client's order.
    pub raw: RawRequest,
    pub model: String,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// The `tool_set` extension field.
    pub tool_set: Option<String>,
    /// The `max_tool_iterations` extension field.
    pub max_tool_iterations: Option<u32>,
    /// The `tool_mode` extension field (`direct` or `code`): how the model
    /// uses the set's tools for this request, whatever the set's `mode`.
    pub tool_mode: Option<toolgate_config::format::SetMode>,
    /// Tools the client sent itself (OpenAI format).
    pub client_tools: Vec<Value>,
    /// `true` when extension fields were removed (the raw body differs).
    pub modified: bool,
    /// The client's deferred tools and the search over them the gateway
    /// runs (set by a face whose API defers tools).
    pub deferred: Option<Box<DeferredTools>>,
    /// How many entries `messages` has.
    message_count: usize,
}

/// Tools a client offers only once a search finds them (OpenAI's and
/// Anthropic's `defer_loading`), with the search the gateway runs for a
/// model that has no search of its own: a tool named `search` offered in
/// their place, whose call makes its best matches callable.
#[derive(Debug, Clone)]
pub struct DeferredTools {
    /// The search tool's name, as the client declared it.
    pub search: String,
    /// The deferred tools, in chat-completions form.
    pub tools: Vec<Value>,
}

impl DeferredTools {
    /// The name of a deferred tool (chat-completions form).
    pub fn name_of(tool: &Value) -> &str {
        tool.pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// The length of a JSON array, read without building its elements (a
/// proxied request's history is never parsed into values).
struct ArrayLen(usize);

impl<'de> serde::Deserialize<'de> for ArrayLen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ArrayLen, D::Error> {
        struct Count;
        impl<'de> serde::de::Visitor<'de> for Count {
            type Value = ArrayLen;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ArrayLen, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(ArrayLen(n))
            }
        }
        d.deserialize_seq(Count)
    }
}

/// Why a request is not a usable chat request.
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

/// Extension fields: read by the gateway, never sent upstream.
const TOOL_SET: &str = "tool_set";
const MAX_TOOL_ITERATIONS: &str = "max_tool_iterations";
const TOOL_MODE: &str = "tool_mode";

impl ChatRequest {
    /// Parses a request body, saying exactly what is wrong when it is not a
    /// usable request.
    pub fn parse(body: &[u8]) -> Result<ChatRequest, RequestError> {
        let raw: RawRequest = serde_json::from_slice(body).map_err(|e| {
            RequestError::new(format!("the request body is not a JSON object: {e}"))
        })?;
        Self::from_raw(raw)
    }

    /// A request built by a face that translated another format: its fields
    /// as values, checked like a parsed body's (no body to parse again).
    pub fn from_fields(
        fields: serde_json::Map<String, Value>,
    ) -> Result<ChatRequest, RequestError> {
        Self::from_raw(fields.into_iter().map(|(k, v)| (k, raw(&v))).collect())
    }

    fn from_raw(mut raw: RawRequest) -> Result<ChatRequest, RequestError> {
        let model = match field::<Value>(&raw, "model")? {
            Some(Value::String(m)) if !m.is_empty() => m,
            _ => {
                return Err(
                    RequestError::new("`model` is required and must be a string").param("model"),
                );
            }
        };
        let message_count = match raw
            .get("messages")
            .map(|m| serde_json::from_str::<ArrayLen>(m.get()))
        {
            Some(Ok(ArrayLen(n))) if n > 0 => n,
            _ => {
                return Err(RequestError::new(
                    "`messages` is required and must be a non-empty array",
                )
                .param("messages"));
            }
        };
        let stream = match field::<Value>(&raw, "stream")? {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                return Err(RequestError::new("`stream` must be a boolean").param("stream"));
            }
        };
        let include_usage = field::<Value>(&raw, "stream_options")?
            .and_then(|v| v.get("include_usage").and_then(Value::as_bool))
            .unwrap_or(false);
        let client_tools = match field::<Value>(&raw, "tools")? {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(t)) => t,
            Some(_) => return Err(RequestError::new("`tools` must be an array").param("tools")),
        };

        let mut modified = false;
        let tool_set = match raw.shift_remove(TOOL_SET) {
            None => None,
            Some(v) => {
                modified = true;
                match serde_json::from_str::<Value>(v.get()) {
                    Ok(Value::String(s)) => Some(s),
                    Ok(Value::Null) => None,
                    _ => {
                        return Err(
                            RequestError::new("`tool_set` must be the name of a tool set")
                                .param(TOOL_SET),
                        );
                    }
                }
            }
        };
        let max_tool_iterations = match raw.shift_remove(MAX_TOOL_ITERATIONS) {
            None => None,
            Some(v) => {
                modified = true;
                match serde_json::from_str::<Value>(v.get()) {
                    Ok(Value::Null) => None,
                    Ok(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => {
                        Some(u32::try_from(n.as_u64().unwrap_or(1)).unwrap_or(u32::MAX))
                    }
                    _ => {
                        return Err(RequestError::new(
                            "`max_tool_iterations` must be a whole number of at least 1",
                        )
                        .param(MAX_TOOL_ITERATIONS));
                    }
                }
            }
        };
        let tool_mode = match raw.shift_remove(TOOL_MODE) {
            None => None,
            Some(v) => {
                modified = true;
                match serde_json::from_str::<Option<toolgate_config::format::SetMode>>(v.get()) {
                    Ok(mode) => mode,
                    Err(_) => {
                        return Err(RequestError::new("`tool_mode` must be `direct` or `code`")
                            .param(TOOL_MODE));
                    }
                }
            }
        };
        Ok(ChatRequest {
            raw,
            model,
            stream,
            include_usage,
            tool_set,
            max_tool_iterations,
            tool_mode,
            client_tools,
            modified,
            deferred: None,
            message_count,
        })
    }

    /// A new non-streaming request with the same model and sampling fields
    /// but its own `messages` and none of the client's tools (a sub-agent's).
    pub fn derived(&self, messages: &[Value]) -> ChatRequest {
        let mut raw = self.raw.clone();
        for field in [
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "stream",
            "stream_options",
            "n",
        ] {
            raw.shift_remove(field);
        }
        raw.insert("messages".into(), crate::openai::raw(&messages));
        ChatRequest {
            message_count: messages.len(),
            raw,
            model: self.model.clone(),
            stream: false,
            include_usage: false,
            tool_set: None,
            max_tool_iterations: None,
            tool_mode: None,
            client_tools: Vec::new(),
            modified: true,
            deferred: None,
        }
    }

    /// How many messages the request carries (counted when it was parsed,
    /// without building them).
    pub fn message_count(&self) -> usize {
        self.message_count
    }

    /// The messages of the request.
    pub fn messages(&self) -> Vec<Value> {
        field::<Vec<Value>>(&self.raw, "messages")
            .ok()
            .flatten()
            .unwrap_or_default()
    }

    /// A field of the raw request, parsed.
    pub fn get(&self, name: &str) -> Option<Value> {
        field(&self.raw, name).ok().flatten()
    }

    /// The body to send upstream for one model call: the client's fields
    /// with `model`, `messages`, `tools` (and streaming options) replaced.
    pub fn upstream_body(
        &self,
        model: &str,
        messages: &[impl serde::Serialize],
        tools: UpstreamTools<'_>,
        overrides: &[(&str, Value)],
    ) -> Bytes {
        // Which value each field takes, in the order of the map the same
        // inserts and removals would give on a copy of `raw`; the values are
        // then written once, straight into the body (no copy of the raw
        // fields, no intermediate string per field).
        let mut parts: IndexMap<&str, Part<'_, _>> = self
            .raw
            .iter()
            .map(|(k, v)| (k.as_str(), Part::Raw(v.as_ref())))
            .collect();
        parts.insert("model", Part::Model(model));
        parts.insert("messages", Part::Messages(messages));
        if tools.is_empty() {
            parts.shift_remove("tools");
            parts.shift_remove("tool_choice");
            parts.shift_remove("parallel_tool_calls");
        } else {
            parts.insert("tools", Part::Tools(tools));
        }
        for (k, v) in overrides {
            if v.is_null() {
                parts.shift_remove(*k);
            } else {
                parts.insert(k, Part::Value(v));
            }
        }
        Bytes::from(serde_json::to_vec(&parts).unwrap_or_default())
    }

    /// The body for a transparent proxy call: the original bytes when
    /// nothing changed, else the raw fields with the upstream's model name.
    pub fn proxy_body(&self, original: Bytes, upstream_model: &str) -> Bytes {
        if !self.modified && upstream_model == self.model {
            return original;
        }
        let mut body = self.raw.clone();
        body.insert("model".into(), raw(&upstream_model));
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }
}

/// The tools of an upstream body.
#[derive(Debug, Clone, Copy)]
pub enum UpstreamTools<'a> {
    Values(&'a [Value]),
    /// The same, already written as one JSON array.
    Json(&'a RawValue),
}

impl UpstreamTools<'_> {
    fn is_empty(&self) -> bool {
        match self {
            UpstreamTools::Values(v) => v.is_empty(),
            // `[`, then nothing but `]` (and white space) before it closes.
            UpstreamTools::Json(j) => j
                .get()
                .trim_start()
                .strip_prefix('[')
                .is_none_or(|rest| rest.trim_start().starts_with(']')),
        }
    }
}

/// One field of an upstream body: the client's raw JSON or what the
/// gateway puts in its place.
enum Part<'a, M> {
    Raw(&'a RawValue),
    Model(&'a str),
    Messages(&'a [M]),
    Tools(UpstreamTools<'a>),
    Value(&'a Value),
}

impl<M: serde::Serialize> serde::Serialize for Part<'_, M> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Raw(v) => v.serialize(s),
            Part::Model(v) => v.serialize(s),
            Part::Messages(v) => v.serialize(s),
            Part::Tools(UpstreamTools::Values(v)) => v.serialize(s),
            Part::Tools(UpstreamTools::Json(v)) => v.serialize(s),
            Part::Value(v) => v.serialize(s),
        }
    }
}

fn field<T: serde::de::DeserializeOwned>(
    raw: &RawRequest,
    name: &str,
) -> Result<Option<T>, RequestError> {
    match raw.get(name) {
        None => Ok(None),
        Some(v) => serde_json::from_str(v.get())
            .map(Some)
            .map_err(|e| RequestError::new(format!("`{name}` is malformed: {e}")).param(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn extension_fields_are_removed_and_the_rest_kept_raw() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_set":"research","max_tool_iterations":3,"temperature":0.20000000000000001,"z":{"b":1,"a":2}}"#;
        let req = ChatRequest::parse(body).unwrap();
        assert_eq!(req.tool_set.as_deref(), Some("research"));
        assert_eq!(req.max_tool_iterations, Some(3));
        assert!(req.modified);
        let out = req.proxy_body(Bytes::from_static(body), "m");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.20000000000000001,"z":{"b":1,"a":2}}"#
        );
    }

    #[test]
    fn unmodified_requests_are_forwarded_byte_for_byte() {
        let body = Bytes::from_static(
            b"{ \"model\" : \"m\", \"messages\": [{\"role\":\"user\",\"content\":\"hi\"}] }",
        );
        let req = ChatRequest::parse(&body).unwrap();
        assert!(!req.modified);
        assert_eq!(req.proxy_body(body.clone(), "m"), body);
        assert_eq!(
            &req.proxy_body(body.clone(), "other")[..20],
            b"{\"model\":\"other\",\"me"
        );
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (body, needle) in [
            (&b"nope"[..], "not a JSON object"),
            (b"{\"messages\": [{}]}", "`model` is required"),
            (b"{\"model\": \"m\"}", "`messages` is required"),
            (b"{\"model\": \"m\", \"messages\": []}", "non-empty array"),
            (b"{\"model\": \"m\", \"messages\": {}}", "non-empty array"),
            (
                b"{\"model\": \"m\", \"messages\": \"hi\"}",
                "non-empty array",
            ),
            (
                b"{\"model\": \"m\", \"messages\": [{}], \"tool_set\": 3}",
                "`tool_set` must be",
            ),
            (
                b"{\"model\": \"m\", \"messages\": [{}], \"max_tool_iterations\": 0}",
                "at least 1",
            ),
            (
                b"{\"model\": \"m\", \"messages\": [{}], \"stream\": \"yes\"}",
                "`stream` must be",
            ),
        ] {
            let err = ChatRequest::parse(body).unwrap_err();
            assert!(
                err.message.contains(needle),
                "{}: {}",
                String::from_utf8_lossy(body),
                err.message
            );
        }
    }

    #[test]
    fn messages_are_counted_not_built() {
        let req = ChatRequest::parse(
            br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b"}]},{}]}"#,
        )
        .unwrap();
        assert_eq!(req.message_count(), 3);
        assert_eq!(req.derived(&[json!({"role": "user"})]).message_count(), 1);
    }

    #[test]
    fn upstream_body_replaces_fields() {
        let req = ChatRequest::parse(br#"{"model":"alias","messages":[{"role":"user","content":"hi"}],"tool_choice":"required","tools":[]}"#).unwrap();
        let body = req.upstream_body(
            "real",
            &[json!({"role": "user", "content": "x"})],
            UpstreamTools::Values(&[json!({"type": "function"})]),
            &[("tool_choice", json!("auto")), ("stream", Value::Null)],
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"model": "real", "messages": [{"role": "user", "content": "x"}], "tool_choice": "auto", "tools": [{"type": "function"}]})
        );
    }

    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(|b| json!(b)),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,12}".prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "model",
                        "messages",
                        "stream",
                        "tools",
                        "tool_set",
                        "max_tool_iterations",
                        "role",
                        "content",
                        "function",
                        "name",
                        "x"
                    ]),
                    inner,
                    0..6,
                )
                .prop_map(|m| serde_json::Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    proptest! {
        /// Any JSON body, and any bytes: a request or a 400, never a panic.
        #[test]
        fn any_body_is_parsed_or_refused(v in json_value(), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = ChatRequest::parse(v.to_string().as_bytes());
            let _ = ChatRequest::parse(&bytes);
            let deep = format!("{{\"model\": \"m\", \"messages\": {}{}", "[".repeat(200_000), "]".repeat(200_000));
            prop_assert!(ChatRequest::parse(deep.as_bytes()).is_err());
        }

        /// The body written in one pass is the one a copy of the raw
        /// fields, changed field by field, would give: same fields, same
        /// order, same values.
        #[test]
        fn upstream_body_is_the_raw_fields_changed_in_place(
            fields in prop::collection::vec((prop::sample::select(vec![
                "model", "messages", "tools", "tool_choice", "parallel_tool_calls",
                "stream", "stream_options", "temperature", "x",
            ]), json_value()), 0..9),
            with_tools in any::<bool>(),
            overrides in prop::collection::vec((prop::sample::select(vec![
                "stream", "stream_options", "tool_choice", "temperature", "y",
            ]), json_value()), 0..4),
        ) {
            let fields: RawRequest = fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), raw(v)))
                .collect();
            let req = ChatRequest { raw: fields, ..ChatRequest::parse(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#).unwrap() };
            let messages = [json!({"role": "user", "content": "hi"})];
            let tools = if with_tools { vec![json!({"type": "function"})] } else { Vec::new() };
            let overrides: Vec<(&str, Value)> = overrides.iter().map(|(k, v)| (*k, v.clone())).collect();
            let mut expected = req.raw.clone();
            expected.insert("model".into(), raw(&"real"));
            expected.insert("messages".into(), raw(&messages));
            if tools.is_empty() {
                expected.shift_remove("tools");
                expected.shift_remove("tool_choice");
                expected.shift_remove("parallel_tool_calls");
            } else {
                expected.insert("tools".into(), raw(&tools));
            }
            for (k, v) in &overrides {
                if v.is_null() {
                    expected.shift_remove(*k);
                } else {
                    expected.insert((*k).to_owned(), raw(v));
                }
            }
            let expected = serde_json::to_string(&expected).unwrap();
            let body = req.upstream_body("real", &messages, UpstreamTools::Values(&tools), &overrides);
            prop_assert_eq!(String::from_utf8(body.to_vec()).unwrap(), expected.clone());
            // The same tools written once beforehand give the same body.
            let json = serde_json::value::to_raw_value(&tools).unwrap();
            let body = req.upstream_body("real", &messages, UpstreamTools::Json(&json), &overrides);
            prop_assert_eq!(String::from_utf8(body.to_vec()).unwrap(), expected.clone());
        }
    }
}
