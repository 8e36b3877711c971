//! What every parser reads and writes: the tools the model was offered
//! (only their names are accepted as calls, their schemas coerce values)
//! and the calls found.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

/// A tool the model was offered: only these names may be accepted as calls.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    pub name: String,
    /// JSON Schema of the arguments (`"type": "object"`); used to coerce
    /// values written as text or Python literals. Shared, not copied, by
    /// the copies of a tool (every stream a loop parses holds one).
    pub parameters: Arc<Value>,
}

/// A tool call found in the text.
///
/// Two calls are equal when their name, arguments and
/// [`unreadable`](Self::unreadable) are: [`repaired`](Self::repaired) is a
/// diagnostic about how the text was read, not part of the call.
#[derive(Debug, Clone)]
pub struct ParsedCall {
    pub name: String,
    /// Always a JSON object.
    pub arguments: Value,
    /// Why the call could not be read, when a value held the format's own
    /// markup (a closer the model forgot, an item inside another): the
    /// call is not run, and the model is told (its arguments are empty).
    pub unreadable: Option<String>,
    /// The call's text was broken or cut short and was repaired before it
    /// was read: a JSON closer that skipped an open container, brackets the
    /// block's closer left open, or a last string the model never closed
    /// (see the crate's policies). Counted in [`Parsed::repaired`](crate::Parsed::repaired).
    pub repaired: bool,
}

impl PartialEq for ParsedCall {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.arguments == other.arguments
            && self.unreadable == other.unreadable
    }
}

impl ParsedCall {
    pub fn new(name: String, arguments: Value) -> ParsedCall {
        ParsedCall {
            name,
            arguments,
            unreadable: None,
            repaired: false,
        }
    }

    /// A call of `name` that could not be read, and why.
    pub fn unreadable(name: String, why: String) -> ParsedCall {
        ParsedCall {
            name,
            arguments: Value::Object(serde_json::Map::new()),
            unreadable: Some(why),
            repaired: false,
        }
    }

    /// The same call, marked as read from repaired text.
    pub(super) fn mark_repaired(mut self) -> ParsedCall {
        self.repaired = true;
        self
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
                .or_insert_with(|| inline_refs(&t.parameters));
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

/// How many `$ref`s deep a schema is inlined; a deeper (or circular)
/// reference is left as written.
const MAX_REF_DEPTH: usize = 16;
/// How many schema nodes inlining may produce in all; past that, the
/// remaining references are left as written.
const MAX_REF_NODES: usize = 10_000;

/// The schema with its local references (`{"$ref": "#/$defs/Location"}`,
/// any JSON pointer into the schema itself) replaced by what they point at,
/// so that coercion sees the types they declare. Keys beside a `$ref` are
/// kept. Remote references stay as written; inlining is bounded in depth
/// and in size, so a circular or exploding schema costs little.
fn inline_refs(root: &Value) -> Value {
    let mut budget = MAX_REF_NODES;
    inline_at(root, root, 0, &mut budget)
}

fn inline_at(root: &Value, v: &Value, depth: usize, budget: &mut usize) -> Value {
    *budget = budget.saturating_sub(1);
    match v {
        Value::Object(m) => {
            let target = m
                .get("$ref")
                .and_then(Value::as_str)
                .filter(|_| depth < MAX_REF_DEPTH && *budget > 0)
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|ptr| root.pointer(ptr))
                .filter(|t| t.is_object());
            if let Some(t) = target {
                let mut out = match inline_at(root, t, depth + 1, budget) {
                    Value::Object(o) => o,
                    _ => serde_json::Map::new(),
                };
                for (k, x) in m {
                    if k != "$ref" && !out.contains_key(k) {
                        out.insert(k.clone(), inline_at(root, x, depth, budget));
                    }
                }
                return Value::Object(out);
            }
            Value::Object(
                m.iter()
                    .map(|(k, x)| {
                        // Definitions are read where they are referred to.
                        if k == "$defs" || k == "definitions" {
                            (k.clone(), x.clone())
                        } else {
                            (k.clone(), inline_at(root, x, depth, budget))
                        }
                    })
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(
            a.iter()
                .map(|x| inline_at(root, x, depth, budget))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn local_refs_are_inlined_and_bounded() {
        let schema = json!({
            "type": "object",
            "properties": {"loc": {"$ref": "#/$defs/Loc", "description": "where"}},
            "$defs": {"Loc": {"type": "object", "properties": {"city": {"type": "string"}}}}
        });
        let t = Tools::new(&[OfferedTool {
            name: "f".into(),
            parameters: (schema).into(),
        }]);
        let s = t.schema("f").cloned().unwrap_or_default();
        assert_eq!(s["properties"]["loc"]["type"], json!("object"));
        assert_eq!(s["properties"]["loc"]["description"], json!("where"));
        // A reference to itself, and one that doubles at every level:
        // inlining stops, the schema stays usable.
        let cyclic = json!({"$defs": {"A": {"type": "object", "properties": {
            "x": {"$ref": "#/$defs/A"}, "y": {"$ref": "#/$defs/A"}}}},
            "properties": {"a": {"$ref": "#/$defs/A"}}});
        let out = inline_refs(&cyclic);
        assert!(out.to_string().len() < 10_000_000);
        assert_eq!(out["properties"]["a"]["type"], json!("object"));
    }
}
