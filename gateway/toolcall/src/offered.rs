//! What every parser reads and writes: the tools the model was offered
//! (only their names are accepted as calls, their schemas coerce values)
//! and the calls found.

use std::collections::HashMap;

use serde_json::Value;

/// A tool the model was offered: only these names may be accepted as calls.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    pub name: String,
    /// JSON Schema of the arguments (`"type": "object"`); used to coerce
    /// values written as text or Python literals.
    pub parameters: Value,
}

/// A tool call found in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub name: String,
    /// Always a JSON object.
    pub arguments: Value,
    /// Why the call could not be read, when a value held the format's own
    /// markup (a closer the model forgot, an item inside another): the
    /// call is not run, and the model is told (its arguments are empty).
    pub unreadable: Option<String>,
}

impl ParsedCall {
    pub fn new(name: String, arguments: Value) -> ParsedCall {
        ParsedCall {
            name,
            arguments,
            unreadable: None,
        }
    }

    /// A call of `name` that could not be read, and why.
    pub fn unreadable(name: String, why: String) -> ParsedCall {
        ParsedCall {
            name,
            arguments: Value::Object(serde_json::Map::new()),
            unreadable: Some(why),
        }
    }
}

/// The offered tools, indexed by name.
#[derive(Debug, Clone, Default)]
pub(super) struct Tools {
    schemas: HashMap<String, Value>,
}

impl Tools {
    pub fn new(tools: &[OfferedTool]) -> Self {
        let mut schemas = HashMap::new();
        for t in tools {
            schemas
                .entry(t.name.clone())
                .or_insert_with(|| t.parameters.clone());
        }
        Tools { schemas }
    }

    /// The offered name a model-written name refers to: the name itself, or
    /// the name without a `functions.` prefix or a `.call` suffix (Llama's
    /// `<|python_tag|>tool.call(...)`).
    pub fn resolve(&self, name: &str) -> Option<String> {
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        if self.schemas.contains_key(name) {
            return Some(name.to_string());
        }
        let mut n = name;
        if let Some(rest) = n.strip_prefix("functions.") {
            n = rest;
        }
        if self.schemas.contains_key(n) {
            return Some(n.to_string());
        }
        if let Some(rest) = n.strip_suffix(".call")
            && self.schemas.contains_key(rest)
        {
            return Some(rest.to_string());
        }
        None
    }

    pub fn schema(&self, name: &str) -> Option<&Value> {
        self.schemas.get(name)
    }
}
