//! Formatters: how tools reach a model and how its calls come back.
//!
//! - **Function calling**: tools go into the request's `tools`, calls come
//!   back as `tool_calls`. Nothing to convert.
//! - **Structured prompt**, for models without function calling: a minijinja
//!   template renders the tools into the system prompt and earlier calls and
//!   results into plain messages; calls are parsed back out of the model's
//!   text by [`toolgate_toolcall`].
//! - **Auto** starts with function calling and falls back to the structured
//!   prompt when the upstream rejects `tools`, remembering the choice per
//!   model until restart ([`Learned`]).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use toolgate_config::format::FormatterKind;
use toolgate_toolcall::OfferedTool;

pub use crate::prompt::{DEFAULT_TEMPLATE, PromptTemplate};

/// What one turn of a model said, in OpenAI terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub calls: Vec<Call>,
    pub finish_reason: Option<String>,
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text, as in OpenAI's format.
    pub arguments: String,
    /// Why a call parsed out of text could not be read: it is not run, and
    /// the model is told (see `toolgate_toolcall::ParsedCall::unreadable`).
    pub unreadable: Option<String>,
}

impl Call {
    pub fn from_openai(v: &Value) -> Call {
        let function = &v["function"];
        Call {
            id: v["id"].as_str().unwrap_or_default().to_owned(),
            name: function["name"].as_str().unwrap_or_default().to_owned(),
            arguments: function["arguments"].as_str().unwrap_or("{}").to_owned(),
            unreadable: None,
        }
    }

    pub fn to_openai(&self) -> Value {
        json!({"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}})
    }

    /// A call parsed out of text gets a fresh id.
    pub fn from_parsed(p: toolgate_toolcall::ParsedCall) -> Call {
        Call {
            id: format!("call_{}", uuid::Uuid::new_v4().simple()),
            name: p.name,
            arguments: p.arguments.to_string(),
            unreadable: p.unreadable,
        }
    }
}

/// One message of the loop's conversation, as the model reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A message of the client's request, carried as it came: fields the
    /// gateway does not know reach the model unchanged.
    Client(Value),
    /// The model's turn that called gateway tools: its text, and the calls.
    Calls {
        content: Option<String>,
        calls: Vec<Call>,
    },
    /// A gateway tool's result, as the model reads it.
    Result { call_id: String, content: String },
}

impl Message {
    /// The message in OpenAI's chat shape.
    pub fn to_openai(&self) -> Cow<'_, Value> {
        match self {
            Message::Client(v) => Cow::Borrowed(v),
            Message::Calls { content, calls } => {
                // Built by hand: `json!` would copy the calls by
                // serializing them.
                let mut m = serde_json::Map::new();
                m.insert("role".into(), Value::String("assistant".into()));
                m.insert(
                    "content".into(),
                    content.clone().map_or(Value::Null, Value::String),
                );
                m.insert(
                    "tool_calls".into(),
                    Value::Array(calls.iter().map(Call::to_openai).collect()),
                );
                Cow::Owned(Value::Object(m))
            }
            Message::Result { call_id, content } => {
                Cow::Owned(json!({"role": "tool", "tool_call_id": call_id, "content": content}))
            }
        }
    }
}

/// Written straight into the upstream body, with the same bytes as
/// [`Message::to_openai`]'s value (its keys in the same, sorted, order)
/// but without building it: the loop writes its whole conversation on
/// every model call.
impl serde::Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Message::Client(v) => v.serialize(s),
            Message::Calls { content, calls } => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "assistant")?;
                m.serialize_entry("tool_calls", &OpenAiCalls(calls))?;
                m.end()
            }
            Message::Result { call_id, content } => {
                let mut m = s.serialize_map(Some(3))?;
                m.serialize_entry("content", content)?;
                m.serialize_entry("role", "tool")?;
                m.serialize_entry("tool_call_id", call_id)?;
                m.end()
            }
        }
    }
}

/// An assistant turn's calls as [`Call::to_openai`] gives them, written
/// without building them.
struct OpenAiCalls<'a>(&'a [Call]);

impl serde::Serialize for OpenAiCalls<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(OpenAiCall))
    }
}

struct OpenAiCall<'a>(&'a Call);

impl serde::Serialize for OpenAiCall<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Function<'a>(&'a Call);
        impl serde::Serialize for Function<'_> {
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

/// The tools offered in a request, as the parser wants them.
pub fn offered(tools: &[Value]) -> Vec<OfferedTool> {
    tools
        .iter()
        .filter_map(|t| {
            let f = t.get("function")?;
            Some(OfferedTool {
                name: f.get("name")?.as_str()?.to_owned(),
                parameters: f
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
            })
        })
        .collect()
}

/// Parses a structured-prompt model's whole answer into a turn.
pub fn parse_text(text: &str, tools: &[OfferedTool]) -> Turn {
    let parsed = toolgate_toolcall::parse(text, tools);
    Turn {
        content: (!parsed.content.is_empty()).then_some(parsed.content),
        reasoning: parsed.reasoning,
        calls: parsed.calls.into_iter().map(Call::from_parsed).collect(),
        finish_reason: None,
    }
}

/// Converts an OpenAI conversation for an upstream that takes no `tools`
/// and may not know the `tool` role: the tools go into the system prompt
/// (unless `tool_choice` is `none`), earlier assistant calls become text,
/// and tool results become user messages.
pub fn to_plain_messages(
    template: &PromptTemplate,
    messages: &[Message],
    tools: &[Value],
    tool_choice: &Value,
) -> Result<Vec<Value>, String> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut rest = messages;
    let show_tools = !tools.is_empty() && tool_choice != &json!("none");
    if show_tools {
        let (system, tail) = match messages.first() {
            Some(Message::Client(m)) if m["role"] == "system" || m["role"] == "developer" => {
                (Some(text_of(m)), &messages[1..])
            }
            _ => (None, messages),
        };
        rest = tail;
        let tools: Vec<Value> = tools
            .iter()
            .filter_map(|t| t.get("function"))
            .map(|f| json!({"name": f["name"], "description": f.get("description").cloned().unwrap_or(json!("")), "parameters": f.get("parameters").cloned().unwrap_or(json!({"type": "object"}))}))
            .collect();
        let prompt = template.render(
            json!({"part": "system", "system": system, "tools": tools, "tool_choice": tool_choice}),
        )?;
        out.push(json!({"role": "system", "content": prompt}));
    }
    let mut names: HashMap<String, String> = HashMap::new();
    let mut pending_results: Vec<Value> = Vec::new();
    let flush = |pending: &mut Vec<Value>, out: &mut Vec<Value>| -> Result<(), String> {
        if !pending.is_empty() {
            let text = template.render(json!({"part": "tool_results", "results": pending}))?;
            out.push(json!({"role": "user", "content": text}));
            pending.clear();
        }
        Ok(())
    };
    for m in rest {
        let (id, text) = match Seen::of(m) {
            Seen::Result(id, text) => (id, text),
            Seen::Calls(content, calls) => {
                flush(&mut pending_results, &mut out)?;
                for c in calls.iter() {
                    names.insert(c.id.clone(), c.name.clone());
                }
                let rendered: Vec<Value> = calls
                    .iter()
                    .map(|c| json!({"name": c.name, "arguments": serde_json::from_str::<Value>(&c.arguments).unwrap_or(json!({}))}))
                    .collect();
                let content = content.filter(|c| !c.is_empty());
                let text = template
                    .render(json!({"part": "tool_calls", "content": content, "calls": rendered}))?;
                out.push(json!({"role": "assistant", "content": text.trim_end()}));
                continue;
            }
            Seen::Other => {
                flush(&mut pending_results, &mut out)?;
                out.push(m.to_openai().into_owned());
                continue;
            }
        };
        let name = names.get(id).cloned().unwrap_or_else(|| "tool".into());
        pending_results.push(json!({"name": name, "content": text}));
    }
    flush(&mut pending_results, &mut out)?;
    Ok(out)
}

/// A message as the structured prompt sees it. The client's history carries
/// earlier calls and results in OpenAI's shape; the loop's own are typed.
enum Seen<'a> {
    /// A tool's result: the call's id and the text.
    Result(&'a str, String),
    /// A turn's text and its calls.
    Calls(Option<&'a str>, Cow<'a, [Call]>),
    Other,
}

impl<'a> Seen<'a> {
    fn of(m: &'a Message) -> Seen<'a> {
        match m {
            Message::Result { call_id, content } => Seen::Result(call_id, content.clone()),
            Message::Calls { content, calls } => {
                Seen::Calls(content.as_deref(), Cow::Borrowed(calls.as_slice()))
            }
            Message::Client(m) if m["role"] == "tool" => {
                Seen::Result(m["tool_call_id"].as_str().unwrap_or_default(), text_of(m))
            }
            Message::Client(m) => match m["tool_calls"].as_array() {
                Some(calls) if m["role"] == "assistant" && !calls.is_empty() => Seen::Calls(
                    m["content"].as_str(),
                    Cow::Owned(calls.iter().map(Call::from_openai).collect()),
                ),
                _ => Seen::Other,
            },
        }
    }
}

/// A message's text content (strings, or the text parts of an array).
pub(crate) fn text_of(m: &Value) -> String {
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Models found not to take `tools`, by `upstream/model`, until restart;
/// with shared state, what any replica learned.
#[derive(Debug, Default)]
pub struct Learned {
    structured: RwLock<HashSet<String>>,
    shared: Option<Shared>,
}

/// What the other replicas learned, and which routes were found not
/// learned lately (asked again after a few seconds, so a chat request
/// costs a Redis round trip at most that often per route).
#[derive(Debug)]
struct Shared {
    redis: Arc<crate::shared::Redis>,
    not_learned: moka::sync::Cache<String, ()>,
}

impl Learned {
    /// Learned choices shared with the other replicas through `redis`.
    pub fn shared(redis: Arc<crate::shared::Redis>) -> Learned {
        Learned {
            structured: RwLock::default(),
            shared: Some(Shared {
                redis,
                not_learned: moka::sync::Cache::builder()
                    .max_capacity(10_000)
                    .time_to_live(std::time::Duration::from_secs(5))
                    .build(),
            }),
        }
    }

    fn key(upstream: &str, model: &str) -> String {
        format!("{upstream}/{model}")
    }

    fn known(&self, key: &str) -> bool {
        self.structured.read().is_ok_and(|s| s.contains(key))
    }

    fn note(&self, key: String) {
        if let Ok(mut s) = self.structured.write() {
            s.insert(key);
        }
    }

    /// The formatter to start with for a route configured as `kind`: for
    /// `auto`, the structured prompt once this replica (or, with shared
    /// state, any replica: seen here within seconds) found the model
    /// rejects `tools`.
    pub async fn effective(
        &self,
        kind: FormatterKind,
        upstream: &str,
        model: &str,
    ) -> FormatterKind {
        if kind != FormatterKind::Auto {
            return kind;
        }
        let key = Self::key(upstream, model);
        if self.known(&key) {
            return FormatterKind::StructuredPrompt;
        }
        let Some(shared) = &self.shared else {
            return kind;
        };
        if shared.not_learned.contains_key(&key) {
            return kind;
        }
        match shared.redis.learned_structured(&key).await {
            Ok(true) => {
                self.note(key);
                FormatterKind::StructuredPrompt
            }
            Ok(false) => {
                shared.not_learned.insert(key, ());
                kind
            }
            Err(_) => {
                crate::shared::fell_back("formatter", "local");
                kind
            }
        }
    }

    /// Remembers (and shares) that the model rejects `tools`.
    pub async fn remember_structured(&self, upstream: &str, model: &str) {
        let key = Self::key(upstream, model);
        if let Some(shared) = &self.shared
            && shared.redis.learn_structured(&key).await.is_err()
        {
            crate::shared::fell_back("formatter", "local");
        }
        self.note(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Arc<PromptTemplate> {
        PromptTemplate::default_template().unwrap()
    }

    fn tool(name: &str) -> Value {
        json!({"type": "function", "function": {"name": name, "description": "Does things.", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}})
    }

    fn client(messages: &[Value]) -> Vec<Message> {
        messages.iter().cloned().map(Message::Client).collect()
    }

    proptest::proptest! {
        /// A message is written into the upstream body with the bytes its
        /// OpenAI value has, without building that value.
        #[test]
        fn a_message_is_written_as_its_openai_value_is(
            content in proptest::option::of(".{0,12}"),
            calls in proptest::collection::vec((".{0,6}", ".{0,6}", ".{0,12}"), 0..3),
            call_id in ".{0,6}",
            text in ".{0,12}",
        ) {
            let calls = calls
                .into_iter()
                .map(|(id, name, arguments)| Call { id, name, arguments, unreadable: None })
                .collect();
            for m in [
                Message::Calls { content: content.clone(), calls },
                Message::Result { call_id: call_id.clone(), content: text.clone() },
                Message::Client(json!({"role": "user", "content": text, "z": [1, {"b": call_id}]})),
            ] {
                proptest::prop_assert_eq!(
                    serde_json::to_string(&m).unwrap(),
                    serde_json::to_string(&m.to_openai()).unwrap()
                );
            }
        }
    }

    #[test]
    fn the_loop_s_typed_messages_read_as_their_openai_shape() {
        let call = |id: &str, name: &str, x: u32| Call {
            id: id.into(),
            name: name.into(),
            arguments: format!("{{\"x\": {x}}}"),
            unreadable: None,
        };
        let typed = vec![
            Message::Client(json!({"role": "user", "content": "sum"})),
            Message::Calls {
                content: None,
                calls: vec![call("a", "add", 1), call("b", "mul", 2)],
            },
            Message::Result {
                call_id: "a".into(),
                content: "1".into(),
            },
            Message::Result {
                call_id: "b".into(),
                content: "4".into(),
            },
        ];
        let wire: Vec<Value> = typed.iter().map(|m| m.to_openai().into_owned()).collect();
        assert_eq!(
            wire[1],
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "add", "arguments": "{\"x\": 1}"}},
                {"id": "b", "type": "function", "function": {"name": "mul", "arguments": "{\"x\": 2}"}},
            ]})
        );
        assert_eq!(
            serde_json::to_value(&typed[2]).unwrap(),
            json!({"role": "tool", "tool_call_id": "a", "content": "1"})
        );
        // The structured prompt renders them as it renders the same
        // conversation coming from a client.
        let tools = [tool("add"), tool("mul")];
        assert_eq!(
            to_plain_messages(&template(), &typed, &tools, &json!("auto")).unwrap(),
            to_plain_messages(&template(), &client(&wire), &tools, &json!("auto")).unwrap()
        );
    }

    #[test]
    fn the_system_prompt_lists_tools_and_one_format() {
        let msgs = to_plain_messages(
            &template(),
            &client(&[
                json!({"role": "system", "content": "Be brief."}),
                json!({"role": "user", "content": "hi"}),
            ]),
            &[tool("add"), tool("mul")],
            &json!("auto"),
        )
        .unwrap();
        assert_eq!(msgs.len(), 2);
        let system = msgs[0]["content"].as_str().unwrap();
        assert!(system.starts_with("Be brief.\n\n# Tools"), "{system}");
        assert!(
            system.contains(r#"{"description":"Does things.","name":"add","parameters":"#),
            "{system}"
        );
        assert!(
            system.contains("<tool_call>\n{\"name\": \"add\""),
            "{system}"
        );
        assert!(system.contains("answer normally"), "{system}");
        assert_eq!(msgs[1], json!({"role": "user", "content": "hi"}));
    }

    #[test]
    fn tool_choice_is_rendered() {
        let render = |choice: Value| {
            to_plain_messages(
                &template(),
                &client(&[json!({"role": "user", "content": "hi"})]),
                &[tool("add")],
                &choice,
            )
            .unwrap()
        };
        assert!(
            render(json!("required"))[0]["content"]
                .as_str()
                .unwrap()
                .contains("must call at least one tool")
        );
        let named = render(json!({"type": "function", "function": {"name": "add"}}));
        assert!(
            named[0]["content"]
                .as_str()
                .unwrap()
                .contains("must call the tool \"add\"")
        );
        // `none`: no tools in the prompt at all.
        assert_eq!(
            render(json!("none")),
            vec![json!({"role": "user", "content": "hi"})]
        );
    }

    #[test]
    fn history_becomes_plain_messages() {
        let msgs = to_plain_messages(
            &template(),
            &client(&[
                json!({"role": "user", "content": "sum"}),
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "add", "arguments": "{\"x\": 1}"}},
                    {"id": "b", "type": "function", "function": {"name": "mul", "arguments": "{\"x\": 2}"}},
                ]}),
                json!({"role": "tool", "tool_call_id": "a", "content": "1"}),
                json!({"role": "tool", "tool_call_id": "b", "content": "4"}),
            ]),
            &[tool("add"), tool("mul")],
            &json!("auto"),
        )
        .unwrap();
        assert_eq!(msgs.len(), 4);
        assert_eq!(msgs[0]["role"], "system");
        assert_eq!(msgs[1], json!({"role": "user", "content": "sum"}));
        assert_eq!(
            msgs[2],
            json!({"role": "assistant", "content": "<tool_call>\n{\"arguments\":{\"x\":1},\"name\":\"add\"}\n</tool_call>\n<tool_call>\n{\"arguments\":{\"x\":2},\"name\":\"mul\"}\n</tool_call>"})
        );
        assert_eq!(msgs[3]["role"], "user");
        let results = msgs[3]["content"].as_str().unwrap();
        assert!(
            results.contains(
                "<tool_response>\n{\"content\":\"1\",\"name\":\"add\"}\n</tool_response>"
            ),
            "{results}"
        );
        assert!(results.contains("\"name\":\"mul\""), "{results}");
    }

    #[test]
    fn rendered_calls_parse_back() {
        // What the template teaches is what the parser reads.
        let msgs = to_plain_messages(
            &template(),
            &client(&[json!({"role": "assistant", "content": "Let me add.", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "add", "arguments": "{\"x\":1}"}}]})]),
            &[],
            &json!("auto"),
        )
        .unwrap();
        let turn = parse_text(
            msgs[0]["content"].as_str().unwrap(),
            &offered(&[tool("add")]),
        );
        assert_eq!(turn.content.as_deref(), Some("Let me add."));
        assert_eq!(turn.calls.len(), 1);
        assert_eq!(turn.calls[0].name, "add");
        assert_eq!(
            serde_json::from_str::<Value>(&turn.calls[0].arguments).unwrap(),
            json!({"x": 1})
        );
    }

    #[tokio::test]
    async fn learned_formatters_apply_to_auto_only() {
        let l = Learned::default();
        assert_eq!(
            l.effective(FormatterKind::Auto, "u", "m").await,
            FormatterKind::Auto
        );
        l.remember_structured("u", "m").await;
        assert_eq!(
            l.effective(FormatterKind::Auto, "u", "m").await,
            FormatterKind::StructuredPrompt
        );
        assert_eq!(
            l.effective(FormatterKind::FunctionCalling, "u", "m").await,
            FormatterKind::FunctionCalling
        );
        assert_eq!(
            l.effective(FormatterKind::Auto, "u", "other").await,
            FormatterKind::Auto
        );
    }

    #[test]
    fn bad_templates_are_refused() {
        assert!(PromptTemplate::new("{% if %}".into()).is_err());
        assert!(PromptTemplate::new("{{ tools | nosuchfilter }}".into()).is_err());
    }
}
