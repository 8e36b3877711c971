//! Formatters: how tools reach a model and how its calls come back.
//!
//! - **Function calling**: tools go into the request's `tools`, calls come
//!   back as `tool_calls`. Nothing to convert.
//! - **Structured prompt**, for models without function calling: a minijinja
//!   template renders the tools into the system prompt and earlier calls and
//!   results into plain turns, on top of any model protocol; calls are
//!   parsed back out of the model's text by [`toolgate_toolcall`].
//! - **Auto** starts with function calling and falls back to the structured
//!   prompt when the upstream rejects `tools`, remembering the choice per
//!   model until restart ([`Learned`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use serde_json::{Value, json};

use toolgate_config::format::FormatterKind;
use toolgate_toolcall::OfferedTool;

use crate::conversation::{Call, CallResult, Item, Role, ToolDef, Turn};
pub use crate::model::prompt::{DEFAULT_TEMPLATE, PromptTemplate};

/// The tools offered in a request, as the parser wants them.
pub fn offered(tools: &[Arc<ToolDef>]) -> Vec<OfferedTool> {
    tools
        .iter()
        .map(|t| OfferedTool {
            name: t.name.clone(),
            parameters: t.parameters.shared(),
        })
        .collect()
}

/// What a structured-prompt model's text says: its content, its
/// reasoning, and the calls in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub calls: Vec<Call>,
}

/// Counts the calls read from repaired text (`toolgate_parsed_calls_repaired_total`).
pub fn count_repaired(calls: usize) {
    if calls > 0 {
        crate::support::metrics::record(|m| m.parsed_calls_repaired.inc_by(calls as u64));
    }
}

/// Parses a structured-prompt model's whole answer.
pub fn parse_text(text: &str, tools: &[OfferedTool]) -> Parsed {
    let parsed = toolgate_toolcall::parse(text, tools);
    count_repaired(parsed.repaired);
    Parsed {
        content: (!parsed.content.is_empty()).then_some(parsed.content),
        reasoning: parsed.reasoning,
        calls: parsed.calls.into_iter().map(Call::from_parsed).collect(),
    }
}

/// A tool result as the model reads it (an error said as one).
pub fn result_text(r: &CallResult) -> String {
    if r.is_error {
        format!("Error: {}", r.text)
    } else {
        r.text.clone()
    }
}

/// The conversation for an upstream that takes no `tools` and may not
/// know tool calls: the tools go into the system prompt (unless
/// `tool_choice` is `none`; `tool_choice` as chat completions writes it),
/// earlier calls become the assistant's text, and tool results the
/// user's. Turns without calls or results stay as they are.
pub fn to_plain(
    template: &PromptTemplate,
    turns: &[Turn],
    tools: &[Arc<ToolDef>],
    tool_choice: &Value,
) -> Result<Vec<Turn>, String> {
    let mut out = Vec::with_capacity(turns.len() + 1);
    let mut rest = turns;
    let show_tools = !tools.is_empty() && tool_choice != &json!("none");
    if show_tools {
        let (system, tail) = match turns.first() {
            Some(t) if t.role == Role::System => (Some(t.text()), &turns[1..]),
            _ => (None, turns),
        };
        rest = tail;
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description.clone().unwrap_or_default(), "parameters": t.parameters}))
            .collect();
        let prompt = template.render(
            json!({"part": "system", "system": system, "tools": tools, "tool_choice": tool_choice}),
        )?;
        out.push(Turn::new(Role::System, vec![Item::text(prompt)]));
    }
    let mut plain = Plain {
        template,
        names: HashMap::new(),
        results: Vec::new(),
        media: Vec::new(),
        out,
    };
    for turn in rest {
        if !turn
            .items
            .iter()
            .any(|i| matches!(i, Item::Call(_) | Item::Result(_)))
        {
            plain.flush()?;
            plain.out.push(turn.clone());
            continue;
        }
        // A turn with calls or results, item by item (a user's results
        // first, as they answer the calls before): its results wait to be
        // said together; its text and calls become the assistant's text.
        let mut items: Vec<&Item> = turn.items.iter().collect();
        if turn.role == Role::User {
            items.sort_by_key(|i| !matches!(i, Item::Result(_)));
        }
        let mut current: Vec<Item> = Vec::new();
        for item in items {
            match item {
                Item::Result(r) => {
                    plain.said(turn.role, std::mem::take(&mut current))?;
                    let name = plain
                        .names
                        .get(&r.call_id)
                        .cloned()
                        .or_else(|| r.name.clone())
                        .unwrap_or_else(|| "tool".into());
                    plain
                        .results
                        .push(json!({"name": name, "content": result_text(r)}));
                    plain
                        .media
                        .extend(r.media.iter().cloned().map(|media| Item::Media { media }));
                }
                other => current.push(other.clone()),
            }
        }
        plain.said(turn.role, current)?;
    }
    plain.flush()?;
    Ok(plain.out)
}

/// The structured prompt being written.
struct Plain<'a> {
    template: &'a PromptTemplate,
    /// Call ids to tool names.
    names: HashMap<String, String>,
    /// Results waiting to be said (as the user's one message).
    results: Vec<Value>,
    /// Media the results held, said after them.
    media: Vec<Item>,
    out: Vec<Turn>,
}

impl Plain<'_> {
    /// Says the waiting results.
    fn flush(&mut self) -> Result<(), String> {
        if !self.results.is_empty() {
            let text = self
                .template
                .render(json!({"part": "tool_results", "results": self.results}))?;
            self.out.push(Turn::new(Role::User, vec![Item::text(text)]));
            self.results.clear();
        }
        if !self.media.is_empty() {
            self.out
                .push(Turn::new(Role::User, std::mem::take(&mut self.media)));
        }
        Ok(())
    }

    /// Items of a turn with calls or results: with calls, the assistant's
    /// text that writes them; else a turn of their own.
    fn said(&mut self, role: Role, items: Vec<Item>) -> Result<(), String> {
        if items.is_empty() {
            return Ok(());
        }
        self.flush()?;
        let calls: Vec<&Call> = items
            .iter()
            .filter_map(|i| match i {
                Item::Call(c) => Some(c),
                _ => None,
            })
            .collect();
        if calls.is_empty() {
            self.out.push(Turn::new(role, items));
            return Ok(());
        }
        for c in &calls {
            self.names.insert(c.id.clone(), c.name.clone());
        }
        let rendered: Vec<Value> = calls
            .iter()
            .map(|c| json!({"name": c.name, "arguments": serde_json::from_str::<Value>(&c.arguments).unwrap_or(json!({}))}))
            .collect();
        let content: String = items
            .iter()
            .filter_map(|i| match i {
                Item::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        let content = (!content.is_empty()).then_some(content);
        let text = self
            .template
            .render(json!({"part": "tool_calls", "content": content, "calls": rendered}))?;
        self.out.push(Turn::new(
            Role::Assistant,
            vec![Item::text(text.trim_end())],
        ));
        Ok(())
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
    redis: Arc<crate::support::shared::Redis>,
    not_learned: moka::sync::Cache<String, ()>,
}

impl Learned {
    /// Learned choices shared with the other replicas through `redis`.
    pub fn shared(redis: Arc<crate::support::shared::Redis>) -> Learned {
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
                crate::support::shared::fell_back("formatter", "local");
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
            crate::support::shared::fell_back("formatter", "local");
        }
        self.note(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::{Protocol, Slot, raw};

    fn template() -> Arc<PromptTemplate> {
        PromptTemplate::default_template().unwrap()
    }

    fn tool(name: &str) -> Arc<ToolDef> {
        Arc::new(ToolDef {
            json: Default::default(),
            name: name.into(),
            description: Some("Does things.".into()),
            parameters: json!({"type": "object", "properties": {"x": {"type": "integer"}}}).into(),
            strict: None,
            native: None,
        })
    }

    /// A structured loop's parser holds each offered tool's schema, and
    /// so does each stream's parser: shared with the spec, not copied.
    #[test]
    fn the_parser_s_tools_share_their_schemas() {
        let spec = tool("add");
        let offered = offered(std::slice::from_ref(&spec));
        assert!(Arc::ptr_eq(
            &offered[0].parameters,
            &spec.parameters.shared()
        ));
        let copy = offered.clone();
        assert!(Arc::ptr_eq(&copy[0].parameters, &offered[0].parameters));
    }

    fn text(role: Role, t: &str) -> Turn {
        Turn::new(role, vec![Item::text(t)])
    }

    fn texts(turns: &[Turn]) -> Vec<(Role, String)> {
        turns.iter().map(|t| (t.role, t.text())).collect()
    }

    #[test]
    fn the_system_prompt_lists_tools_and_one_format() {
        let turns = to_plain(
            &template(),
            &[text(Role::System, "Be brief."), text(Role::User, "hi")],
            &[tool("add"), tool("mul")],
            &json!("auto"),
        )
        .unwrap();
        assert_eq!(turns.len(), 2);
        let system = turns[0].text();
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
        assert_eq!(turns[1], text(Role::User, "hi"));
    }

    #[test]
    fn tool_choice_is_rendered() {
        let render = |choice: Value| {
            to_plain(
                &template(),
                &[text(Role::User, "hi")],
                &[tool("add")],
                &choice,
            )
            .unwrap()
        };
        assert!(
            render(json!("required"))[0]
                .text()
                .contains("must call at least one tool")
        );
        let named = render(json!({"type": "function", "function": {"name": "add"}}));
        assert!(named[0].text().contains("must call the tool \"add\""));
        // `none`: no tools in the prompt at all.
        assert_eq!(render(json!("none")), vec![text(Role::User, "hi")]);
    }

    #[test]
    fn history_becomes_plain_turns() {
        let user = Turn::decoded(
            Role::User,
            vec![Item::text("sum")],
            Protocol::OpenaiChat,
            Slot::Message,
            raw(&json!({"role": "user", "content": "sum"})),
        );
        let turns = to_plain(
            &template(),
            &[
                user.clone(),
                Turn::new(
                    Role::Assistant,
                    vec![
                        Item::Call(Call::new("a", "add", "{\"x\": 1}")),
                        Item::Call(Call::new("b", "mul", "{\"x\": 2}")),
                    ],
                ),
                Turn::new(Role::User, vec![Item::Result(CallResult::text("a", "1"))]),
                Turn::new(
                    Role::User,
                    vec![Item::Result(CallResult {
                        is_error: true,
                        ..CallResult::text("b", "4")
                    })],
                ),
            ],
            &[tool("add"), tool("mul")],
            &json!("auto"),
        )
        .unwrap();
        assert_eq!(turns.len(), 4);
        assert_eq!(turns[0].role, Role::System);
        // A turn without calls or results stays as it came.
        assert_eq!(turns[1], user);
        assert_eq!(
            texts(&turns[2..3]),
            [(Role::Assistant, "<tool_call>\n{\"arguments\":{\"x\":1},\"name\":\"add\"}\n</tool_call>\n<tool_call>\n{\"arguments\":{\"x\":2},\"name\":\"mul\"}\n</tool_call>".to_owned())]
        );
        assert_eq!(turns[3].role, Role::User);
        let results = turns[3].text();
        assert!(
            results.contains(
                "<tool_response>\n{\"content\":\"1\",\"name\":\"add\"}\n</tool_response>"
            ),
            "{results}"
        );
        assert!(
            results.contains("\"content\":\"Error: 4\",\"name\":\"mul\""),
            "{results}"
        );
    }

    #[test]
    fn rendered_calls_parse_back() {
        // What the template teaches is what the parser reads.
        let turns = to_plain(
            &template(),
            &[Turn::new(
                Role::Assistant,
                vec![
                    Item::text("Let me add."),
                    Item::Call(Call::new("a", "add", "{\"x\":1}")),
                ],
            )],
            &[],
            &json!("auto"),
        )
        .unwrap();
        let parsed = parse_text(&turns[0].text(), &offered(&[tool("add")]));
        assert_eq!(parsed.content.as_deref(), Some("Let me add."));
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.calls[0].name, "add");
        assert_eq!(
            serde_json::from_str::<Value>(&parsed.calls[0].arguments).unwrap(),
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
