//! The structured-prompt template: one minijinja file renders, for a model
//! without function calling, the tools into the system prompt, earlier
//! calls and their results (`templates/structured_prompt.jinja`, or a
//! route's own). Compiled and tried on sample data at load.

use std::sync::{Arc, LazyLock};

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Value, json};

/// The shipped structured-prompt template.
pub const DEFAULT_TEMPLATE: &str = include_str!("../../templates/structured_prompt.jinja");

/// A compiled structured-prompt template.
#[derive(Debug)]
pub struct PromptTemplate {
    env: Environment<'static>,
}

static DEFAULT: LazyLock<Result<Arc<PromptTemplate>, String>> =
    LazyLock::new(|| PromptTemplate::new(DEFAULT_TEMPLATE.to_owned()).map(Arc::new));

impl PromptTemplate {
    /// Compiles a template source.
    pub fn new(source: String) -> Result<PromptTemplate, String> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.add_template_owned("prompt", source)
            .map_err(|e| crate::support::template::describe(&e))?;
        let tpl = PromptTemplate { env };
        // Render once with sample data so mistakes show at load time.
        tpl.render(json!({"part": "system", "system": "s", "tools": [{"name": "t", "description": "d", "parameters": {"type": "object"}}], "tool_choice": "auto"}))?;
        tpl.render(json!({"part": "tool_calls", "content": "c", "calls": [{"name": "t", "arguments": {}}]}))?;
        tpl.render(json!({"part": "tool_results", "results": [{"name": "t", "content": "r"}]}))?;
        Ok(tpl)
    }

    /// The shipped default.
    pub fn default_template() -> Result<Arc<PromptTemplate>, String> {
        DEFAULT.clone()
    }

    /// Renders one part of the prompt.
    pub(crate) fn render(&self, ctx: Value) -> Result<String, String> {
        crate::support::template::render(
            &self.env,
            "prompt",
            minijinja::Value::from_serialize(&ctx),
        )
    }
}
