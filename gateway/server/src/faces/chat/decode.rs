//! A chat-completions request decoded: the fields the gateway reads, the
//! extension fields it removes, the raw rest it forwards untouched, and
//! the messages as the conversation's turns (decoded only when a tool loop
//! needs them: a proxied request's history is never parsed).

use serde_json::value::RawValue;
use serde_json::{Value, json};
use toolgate_engine::conversation::{
    Call, CallResult, Item, Media, MediaKind, Native, Params, Protocol, RawFields, Reasoning,
    Request, RequestError, ResponseFormat, Role, Slot, Source, ToolChoice, ToolDef, Turn,
};

use super::super::top::{Top, array_len, parsed};

const PROTOCOL: Protocol = Protocol::OpenaiChat;

/// Extension fields: read by the gateway, never sent upstream.
const TOOL_SET: &str = "tool_set";
const MAX_TOOL_ITERATIONS: &str = "max_tool_iterations";
const TOOL_MODE: &str = "tool_mode";

/// The fields the typed view reads (every other one is untyped: a model of
/// another protocol does not get it).
const TYPED: [&str; 15] = [
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "response_format",
    "reasoning_effort",
    "n",
];

/// Parses a request body, saying exactly what is wrong when it is not a
/// usable request. The typed fields are read borrowed from the body in
/// one pass; the raw fields are kept only when an extension field was
/// removed, else read from the body once a loop needs them.
pub fn decode(body: &bytes::Bytes) -> Result<Request, RequestError> {
    let top: Top = serde_json::from_slice(body)
        .map_err(|e| RequestError::new(format!("the request body is not a JSON object: {e}")))?;
    let model = match top
        .get("model")
        .map(|m| serde_json::from_str::<String>(m.get()))
    {
        Some(Ok(m)) if !m.is_empty() => m,
        _ => {
            return Err(
                RequestError::new("`model` is required and must be a string").param("model"),
            );
        }
    };
    let message_count = match top.get("messages").and_then(array_len) {
        Some(n) if n > 0 => n,
        _ => {
            return Err(
                RequestError::new("`messages` is required and must be a non-empty array")
                    .param("messages"),
            );
        }
    };
    let stream = match top
        .get("stream")
        .map(|s| serde_json::from_str::<Option<bool>>(s.get()))
    {
        None | Some(Ok(None)) => false,
        Some(Ok(Some(b))) => b,
        Some(Err(_)) => {
            return Err(RequestError::new("`stream` must be a boolean").param("stream"));
        }
    };
    let include_usage = top
        .field::<Value>("stream_options")?
        .and_then(|v| v.get("include_usage").and_then(Value::as_bool))
        .unwrap_or(false);
    let tools = match top.field::<Value>("tools")? {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => t.into_iter().map(tool).collect(),
        Some(_) => return Err(RequestError::new("`tools` must be an array").param("tools")),
    };
    let mut request = Request::new(PROTOCOL, model);
    request.tool_set = match top.field::<Value>(TOOL_SET) {
        Ok(None | Some(Value::Null)) => None,
        Ok(Some(Value::String(s))) => Some(s),
        _ => {
            return Err(
                RequestError::new("`tool_set` must be the name of a tool set").param(TOOL_SET),
            );
        }
    };
    request.max_tool_iterations = match top.field::<Value>(MAX_TOOL_ITERATIONS) {
        Ok(None | Some(Value::Null)) => None,
        Ok(Some(Value::Number(n))) if n.as_u64().is_some_and(|n| n >= 1) => {
            Some(u32::try_from(n.as_u64().unwrap_or(1)).unwrap_or(u32::MAX))
        }
        _ => {
            return Err(RequestError::new(
                "`max_tool_iterations` must be a whole number of at least 1",
            )
            .param(MAX_TOOL_ITERATIONS));
        }
    };
    request.tool_mode = match top.field::<Option<toolgate_config::format::SetMode>>(TOOL_MODE) {
        Ok(mode) => mode.flatten(),
        Err(_) => {
            return Err(
                RequestError::new("`tool_mode` must be `direct` or `code`").param(TOOL_MODE)
            );
        }
    };
    // Extension fields are never sent upstream: a body that has one is
    // changed, and its raw fields are kept without them.
    request.modified = top.0.iter().any(|(k, _)| is_extension(k));
    if request.modified {
        request.fields = top
            .0
            .into_iter()
            .filter(|(k, _)| !is_extension(k))
            .map(|(k, v)| (k.into_owned(), v.to_owned()))
            .collect();
    } else {
        request.defer_fields(body.clone());
    }
    request.message_count = message_count;
    request.stream = stream;
    request.include_usage = include_usage;
    request.tools = tools;
    request.defer_rest(rest);
    Ok(request)
}

fn is_extension(field: &str) -> bool {
    matches!(field, TOOL_SET | MAX_TOOL_ITERATIONS | TOOL_MODE)
}

fn field<T: serde::de::DeserializeOwned>(
    raw: &RawFields,
    name: &str,
) -> Result<Option<T>, RequestError> {
    parsed(name, raw.get(name).map(|v| &**v))
}

/// What a tool loop needs besides: the messages as turns, the typed
/// sampling and tool choice, `n`, and the fields a model of another
/// protocol does not get.
fn rest(request: &mut Request) -> Result<(), RequestError> {
    let raw = &request.fields;
    let turns = match raw.get("messages") {
        Some(messages) => turns(messages)?,
        None => Vec::new(),
    };
    request.tool_choice = field::<Value>(raw, "tool_choice")
        .ok()
        .flatten()
        .and_then(|c| tool_choice(&c));
    request.params = params(raw);
    request.choices = field::<Value>(raw, "n")
        .ok()
        .flatten()
        .and_then(|n| n.as_u64());
    request.untyped = raw
        .keys()
        .filter(|k| !TYPED.contains(&k.as_str()))
        .cloned()
        .collect();
    request.set_turns(turns);
    Ok(())
}

/// The sampling fields, typed for a model of another protocol.
fn params(raw: &RawFields) -> Params {
    let get = |name: &str| field::<Value>(raw, name).ok().flatten();
    let response_format = get("response_format").and_then(|f| match f["type"].as_str() {
        Some("json_schema") => Some(Box::new(ResponseFormat {
            name: f["json_schema"]["name"].as_str().map(str::to_owned),
            schema: Some(f["json_schema"]["schema"].clone()),
            strict: f["json_schema"]["strict"].as_bool(),
        })),
        Some("json_object") => Some(Box::new(ResponseFormat {
            name: None,
            schema: None,
            strict: None,
        })),
        _ => None,
    });
    Params {
        max_tokens: get("max_completion_tokens")
            .or_else(|| get("max_tokens"))
            .and_then(|v| v.as_u64()),
        temperature: get("temperature").and_then(|v| v.as_f64()),
        top_p: get("top_p").and_then(|v| v.as_f64()),
        stop: match get("stop") {
            Some(Value::String(s)) => vec![s],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        },
        response_format,
        reasoning_effort: get("reasoning_effort").and_then(|v| v.as_str().map(str::to_owned)),
        parallel_tool_calls: get("parallel_tool_calls").and_then(|v| v.as_bool()),
    }
}

/// A client's tool: its function, and the tool as it came (sent as it is
/// to a chat-completions model).
fn tool(t: Value) -> ToolDef {
    let f = if t["type"] == "custom" {
        &t["custom"]
    } else {
        &t["function"]
    };
    ToolDef {
        json: Default::default(),
        name: f["name"].as_str().unwrap_or_default().to_owned(),
        description: f["description"].as_str().map(Into::into),
        parameters: f
            .get("parameters")
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}))
            .into(),
        strict: f["strict"].as_bool(),
        native: Some(Box::new(Native {
            protocol: PROTOCOL,
            what: "tools".into(),
            value: t,
        })),
    }
}

/// `tool_choice` typed (`None` when it says nothing the gateway reads).
pub fn tool_choice(c: &Value) -> Option<ToolChoice> {
    match c {
        Value::String(s) => match s.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::None),
            "required" => Some(ToolChoice::Required),
            _ => None,
        },
        Value::Object(_) => match c["type"].as_str() {
            Some("function") => Some(ToolChoice::Tool {
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            }),
            Some("custom") => Some(ToolChoice::Tool {
                name: c["custom"]["name"].as_str().unwrap_or_default().to_owned(),
            }),
            Some("allowed_tools") => match c["allowed_tools"]["mode"].as_str() {
                Some("required") => Some(ToolChoice::Required),
                _ => Some(ToolChoice::Auto),
            },
            _ => Some(ToolChoice::Required),
        },
        _ => None,
    }
}

/// The messages as turns, each with the message as it came.
fn turns(messages: &RawValue) -> Result<Vec<Turn>, RequestError> {
    let messages: Vec<Box<RawValue>> = serde_json::from_str(messages.get()).map_err(|e| {
        RequestError::new(format!("`messages` is malformed: {e}")).param("messages")
    })?;
    // Sized at once (a collected `Result` starts with room for four).
    let mut turns = Vec::with_capacity(messages.len());
    for raw in messages {
        let m: Value = serde_json::from_str(raw.get()).unwrap_or(Value::Null);
        let (role, items) = message(&m);
        // A plain message's text is held once (written again for a chat
        // model byte for byte); any other as it came.
        let raw = toolgate_engine::model::protocol::openai_chat::plain(role, &items, raw);
        turns.push(Turn::decoded(role, items, PROTOCOL, Slot::Message, raw));
    }
    Ok(turns)
}

/// A message's text content (strings, or the text parts of an array).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A content part as an item.
fn part(p: &Value) -> Item {
    let media = |kind, source, name: Option<&str>, detail: Option<&str>| Item::Media {
        media: Media {
            kind,
            source,
            name: name.map(str::to_owned),
            detail: detail.map(str::to_owned),
        },
    };
    match p["type"].as_str() {
        Some("text") => Item::text(p["text"].as_str().unwrap_or_default()),
        Some("refusal") => Item::text(p["refusal"].as_str().unwrap_or_default()),
        Some("image_url") => media(
            MediaKind::Image,
            Source::from_url(p["image_url"]["url"].as_str().unwrap_or_default()),
            None,
            p["image_url"]["detail"].as_str(),
        ),
        Some("input_audio") => media(
            MediaKind::Audio,
            Source::Base64 {
                mime: format!(
                    "audio/{}",
                    p["input_audio"]["format"].as_str().unwrap_or("wav")
                ),
                data: p["input_audio"]["data"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            },
            None,
            None,
        ),
        Some("file") => {
            let f = &p["file"];
            let source = match (f["file_data"].as_str(), f["file_id"].as_str()) {
                (Some(data), _) => Source::from_url(data),
                (None, Some(id)) => Source::FileId { id: id.to_owned() },
                (None, None) => Source::Text {
                    text: String::new(),
                },
            };
            media(MediaKind::File, source, f["filename"].as_str(), None)
        }
        other => Item::Native(Native {
            protocol: PROTOCOL,
            what: format!("`{}` content parts", other.unwrap_or("untyped")),
            value: p.clone(),
        }),
    }
}

fn content_items(content: &Value) -> Vec<Item> {
    match content {
        Value::String(s) => vec![Item::text(s.clone())],
        Value::Array(parts) => parts.iter().map(part).collect(),
        _ => Vec::new(),
    }
}

/// One message's role and items.
fn message(m: &Value) -> (Role, Vec<Item>) {
    match m["role"].as_str() {
        Some("system" | "developer") => (Role::System, content_items(&m["content"])),
        Some("assistant") => {
            let mut items = Vec::new();
            if let Some(r) = m["reasoning_content"].as_str() {
                items.push(Item::Reasoning(Reasoning {
                    text: r.to_owned(),
                    opaque: None,
                }));
            }
            items.extend(content_items(&m["content"]));
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                let (name, arguments) = match c["type"].as_str() {
                    Some("custom") => (&c["custom"]["name"], &c["custom"]["input"]),
                    _ => (&c["function"]["name"], &c["function"]["arguments"]),
                };
                items.push(Item::Call(Call::new(
                    c["id"].as_str().unwrap_or_default(),
                    name.as_str().unwrap_or_default(),
                    arguments.as_str().unwrap_or("{}"),
                )));
            }
            if let Some(f) = m.get("function_call").filter(|f| f.is_object()) {
                items.push(Item::Call(Call::new(
                    "",
                    f["name"].as_str().unwrap_or_default(),
                    f["arguments"].as_str().unwrap_or("{}"),
                )));
            }
            (Role::Assistant, items)
        }
        Some("tool") => (
            Role::User,
            vec![Item::Result(CallResult::text(
                m["tool_call_id"].as_str().unwrap_or_default(),
                text_of(&m["content"]),
            ))],
        ),
        Some("function") => (
            Role::User,
            vec![Item::Result(CallResult {
                name: m["name"].as_str().map(str::to_owned),
                ..CallResult::text(
                    m["name"].as_str().unwrap_or_default(),
                    text_of(&m["content"]),
                )
            })],
        ),
        Some("user") => (Role::User, content_items(&m["content"])),
        _ => (
            Role::User,
            vec![Item::Native(Native {
                protocol: PROTOCOL,
                what: "messages of an unknown role".into(),
                value: m.clone(),
            })],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(body: &[u8]) -> Result<Request, RequestError> {
        decode(&bytes::Bytes::copy_from_slice(body))
    }

    #[test]
    fn extension_fields_are_removed_and_the_rest_kept_raw() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_set":"research","max_tool_iterations":3,"temperature":0.20000000000000001,"z":{"b":1,"a":2}}"#;
        let req = dec(body).unwrap();
        assert_eq!(req.tool_set.as_deref(), Some("research"));
        assert_eq!(req.max_tool_iterations, Some(3));
        assert!(req.modified);
        let out = req.proxy_body(bytes::Bytes::from_static(body), "m");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.20000000000000001,"z":{"b":1,"a":2}}"#
        );
    }

    #[test]
    fn unmodified_requests_are_forwarded_byte_for_byte() {
        let body = bytes::Bytes::from_static(
            b"{ \"model\" : \"m\", \"messages\": [{\"role\":\"user\",\"content\":\"hi\"}] }",
        );
        let req = dec(&body).unwrap();
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
            let err = dec(body).unwrap_err();
            assert!(
                err.message.contains(needle),
                "{}: {}",
                String::from_utf8_lossy(body),
                err.message
            );
        }
    }

    #[test]
    fn messages_are_counted_not_built_until_a_loop_needs_them() {
        let mut req = dec(
            br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text","text":"b"}],"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}"#,
        )
        .unwrap();
        assert_eq!(req.message_count, 3);
        assert!(req.turns().is_empty());
        req.decode_rest().unwrap();
        let turns = req.turns();
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[1].role, Role::Assistant);
        assert_eq!(
            turns[1].items,
            vec![Item::text("b"), Item::Call(Call::new("c", "f", "{}"))]
        );
        assert_eq!(
            turns[2].items,
            vec![Item::Result(CallResult::text("c", "r"))]
        );
        // Each turn keeps its message as it came (a long plain one is
        // written again from its text: see below).
        let raw = |i: usize| turns[i].raw_for(Protocol::OpenaiChat).unwrap();
        assert_eq!(
            raw(0).kept().unwrap().get(),
            r#"{"role":"user","content":"a"}"#
        );
        assert!(raw(1).kept().unwrap().get().contains("tool_calls"));
        assert!(raw(2).kept().is_some());
    }

    /// A plain message (a role and its text, compact, long enough) is
    /// held once, as its turn's text, and a chat model gets it byte for
    /// byte as the client wrote it; any other form is kept as it came.
    #[test]
    fn plain_messages_are_held_once_and_written_again_byte_for_byte() {
        use toolgate_engine::model::protocol::openai_chat::PLAIN_AT_LEAST;
        let long = "x".repeat(PLAIN_AT_LEAST);
        let messages = [
            (
                format!(r#"{{"role":"system","content":"Be \"brief\".\n{long}"}}"#),
                true,
            ),
            (
                format!(r#"{{"content":"héllo ✓ \u0007{long}","role":"user"}}"#),
                true,
            ),
            (
                format!(r#"{{"role":"assistant","content":"{long}"}}"#),
                true,
            ),
            (r#"{"role":"user","content":"short"}"#.to_owned(), false),
            (format!(r#"{{"role": "user", "content": "{long}"}}"#), false),
            (
                format!(r#"{{"role":"user","content":"h\u00e9{long}"}}"#),
                false,
            ),
            (
                format!(r#"{{"role":"developer","content":"{long}"}}"#),
                false,
            ),
            (
                format!(r#"{{"role":"user","content":"{long}","name":"ann"}}"#),
                false,
            ),
            (
                format!(r#"{{"role":"user","content":[{{"type":"text","text":"{long}"}}]}}"#),
                false,
            ),
        ];
        let body = format!(
            r#"{{"model":"m","messages":[{}]}}"#,
            messages
                .iter()
                .map(|(m, _)| m.as_str())
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut req = dec(body.as_bytes()).unwrap();
        req.decode_rest().unwrap();
        for (turn, (message, plain)) in req.turns().iter().zip(&messages) {
            let origin = turn.raw_for(Protocol::OpenaiChat).unwrap();
            assert_eq!(origin.kept().is_none(), *plain, "{message}");
        }
        let call = toolgate_engine::model::protocol::Outgoing {
            request: &req,
            model: "m",
            turns: req.turns(),
            tools: toolgate_engine::model::protocol::Tools(&[]),
            tool_choice: None,
            stream: false,
        };
        let written = toolgate_engine::model::protocol::encode(
            Protocol::OpenaiChat,
            &call,
            &mut Default::default(),
        );
        #[derive(serde::Deserialize)]
        struct Body<'a> {
            #[serde(borrow)]
            messages: Vec<&'a RawValue>,
        }
        let body: Body<'_> = serde_json::from_slice(&written).unwrap();
        let sent: Vec<&str> = body.messages.iter().map(|m| m.get()).collect();
        let want: Vec<&str> = messages.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(sent, want);
    }

    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(|b| json!(b)),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,12}".prop_map(|s| json!(s)),
            "[\\[\\]{},\"\\\\ a]{0,8}".prop_map(|s| json!(s)),
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
                        "x",
                        "a\\\"],[{,"
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
        /// The messages are counted as serde_json counts them, whatever
        /// their strings hold (brackets, commas, escaped quotes).
        #[test]
        fn arrays_are_counted_as_parsed(v in prop::collection::vec(json_value(), 0..8), pretty in any::<bool>()) {
            let text = match pretty {
                true => serde_json::to_string_pretty(&v).unwrap(),
                false => serde_json::to_string(&v).unwrap(),
            };
            let raw: Box<RawValue> = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(array_len(&raw), Some(v.len()));
        }

        /// Any JSON body, and any bytes: a request or a 400, never a
        /// panic; its conversation decoded or refused alike.
        #[test]
        fn any_body_is_parsed_or_refused(v in json_value(), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(mut r) = dec(v.to_string().as_bytes()) {
                let _ = r.decode_rest();
            }
            let _ = dec(&bytes);
            let deep = format!("{{\"model\": \"m\", \"messages\": {}{}", "[".repeat(200_000), "]".repeat(200_000));
            prop_assert!(dec(deep.as_bytes()).is_err());
        }
    }
}
