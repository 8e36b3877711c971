//! OpenAPI schemas to the JSON Schema (2020-12) of tool parameters: every
//! `$ref` inlined (a recursive one cut where it repeats), OpenAPI 3.0's
//! `nullable` and Swagger's `x-nullable` as a `null` type, draft-4 boolean
//! `exclusiveMaximum`/`exclusiveMinimum` as numbers, `readOnly` properties
//! left out (a request does not send them), `allOf` of plain objects merged,
//! and what only documents (`example`, `xml`, `discriminator`,
//! `externalDocs`, `x-*`) dropped.

use serde_json::{Map, Value, json};

use crate::spec::{DocId, Documents};

/// The deepest chain of `$ref`s expanded inside one schema.
pub const MAX_REF_DEPTH: usize = 24;
/// The most schema objects one operation's parameters expand to; past it,
/// further `$ref`s are left as "any value" with a note.
pub const MAX_NODES: usize = 20_000;

/// Converts the schemas of one operation.
pub struct Converter<'a> {
    docs: &'a mut Documents,
    stack: Vec<String>,
    nodes: usize,
    /// What was cut or could not be resolved, in words.
    pub notes: Vec<String>,
}

impl<'a> Converter<'a> {
    pub fn new(docs: &'a mut Documents) -> Self {
        Converter {
            docs,
            stack: Vec::new(),
            nodes: 0,
            notes: Vec::new(),
        }
    }

    /// Follows `value`'s `$ref` (if any) to the object it names, without
    /// converting it: for parameters, request bodies and path items.
    pub fn deref(&mut self, doc: DocId, value: &Value) -> (DocId, Value) {
        let mut doc = doc;
        let mut value = value.clone();
        for _ in 0..MAX_REF_DEPTH {
            let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
                break;
            };
            match self.docs.resolve(doc, reference) {
                Ok((d, _, v)) => {
                    doc = d;
                    value = v;
                }
                Err(e) => {
                    self.notes.push(e);
                    return (doc, Value::Null);
                }
            }
        }
        (doc, value)
    }

    /// The JSON Schema of `schema` (found in document `doc`).
    pub fn convert(&mut self, doc: DocId, schema: &Value) -> Value {
        self.nodes += 1;
        let Value::Object(map) = schema else {
            return schema.clone();
        };
        if let Some(Value::String(reference)) = map.get("$ref") {
            return self.follow(doc, reference, map);
        }
        let mut out = Map::new();
        for (key, value) in map {
            let converted = match key.as_str() {
                "properties" | "patternProperties" | "$defs" | "definitions"
                | "dependentSchemas" => match value {
                    Value::Object(props) => {
                        let mut converted = Map::new();
                        for (name, s) in props {
                            let s = self.convert(doc, s);
                            if key == "properties" && s.get("readOnly") == Some(&Value::Bool(true))
                            {
                                continue;
                            }
                            converted.insert(name.clone(), s);
                        }
                        Value::Object(converted)
                    }
                    other => other.clone(),
                },
                "items" => match value {
                    // draft 4's tuple form
                    Value::Array(items) => {
                        out.insert(
                            "prefixItems".into(),
                            Value::Array(items.iter().map(|s| self.convert(doc, s)).collect()),
                        );
                        continue;
                    }
                    s => self.convert(doc, s),
                },
                "allOf" | "anyOf" | "oneOf" | "prefixItems" => match value {
                    Value::Array(items) => {
                        Value::Array(items.iter().map(|s| self.convert(doc, s)).collect())
                    }
                    other => other.clone(),
                },
                "additionalProperties"
                | "not"
                | "contains"
                | "if"
                | "then"
                | "else"
                | "propertyNames"
                | "unevaluatedProperties"
                | "unevaluatedItems"
                | "additionalItems" => self.convert(doc, value),
                "type" if value == "file" => json!("string"),
                "example" | "examples" | "xml" | "externalDocs" | "discriminator" | "nullable"
                | "x-nullable" | "$schema" | "$id" | "$comment" | "collectionFormat" => continue,
                k if k.starts_with("x-") => continue,
                _ => value.clone(),
            };
            out.insert(key.clone(), converted);
        }
        for (bound, exclusive) in [
            ("maximum", "exclusiveMaximum"),
            ("minimum", "exclusiveMinimum"),
        ] {
            if let Some(Value::Bool(b)) = out.get(exclusive).cloned() {
                out.remove(exclusive);
                if b && let Some(limit) = out.remove(bound) {
                    out.insert(exclusive.into(), limit);
                }
            }
        }
        if map.get("nullable") == Some(&Value::Bool(true))
            || map.get("x-nullable") == Some(&Value::Bool(true))
        {
            make_nullable(&mut out);
        }
        drop_missing_required(&mut out);
        merge_all_of(&mut out);
        Value::Object(out)
    }

    fn follow(&mut self, doc: DocId, reference: &str, map: &Map<String, Value>) -> Value {
        let name = reference
            .rsplit('/')
            .next()
            .unwrap_or(reference)
            .to_string();
        if self.stack.len() >= MAX_REF_DEPTH || self.nodes > MAX_NODES {
            let why = if self.nodes > MAX_NODES {
                "too large"
            } else {
                "too deep"
            };
            self.note(format!(
                "`{name}` not expanded ({why}): any value accepted there"
            ));
            return cut(&format!("{name} (not expanded here)"), map);
        }
        let (target_doc, key, target) = match self.docs.resolve(doc, reference) {
            Ok(t) => t,
            Err(e) => {
                self.note(e);
                return cut(&format!("{name} (unresolved)"), map);
            }
        };
        if self.stack.contains(&key) {
            self.note(format!(
                "`{name}` refers to itself: expanded once, any value accepted where it repeats"
            ));
            return cut(&format!("{name} (recursive, not expanded again)"), map);
        }
        self.stack.push(key);
        let mut out = self.convert(target_doc, &target);
        self.stack.pop();
        // Keywords next to `$ref` (OpenAPI 3.1, and descriptions in
        // practice) apply too.
        let siblings: Map<String, Value> = map
            .iter()
            .filter(|(k, _)| k.as_str() != "$ref")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if siblings.is_empty() {
            return out;
        }
        let siblings = self.convert(doc, &Value::Object(siblings));
        let Value::Object(siblings) = siblings else {
            return out;
        };
        if let Value::Object(target) = &mut out
            && siblings
                .keys()
                .all(|k| ANNOTATIONS.contains(&k.as_str()) || k == "type")
        {
            for (k, v) in siblings {
                target.insert(k, v);
            }
            return out;
        }
        json!({"allOf": [out, Value::Object(siblings)]})
    }

    fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }
}

const ANNOTATIONS: &[&str] = &[
    "description",
    "title",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// A schema that accepts any value, saying why.
fn cut(what: &str, map: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    let description = match map.get("description").and_then(Value::as_str) {
        Some(d) => format!("{d} ({what})"),
        None => what.to_string(),
    };
    out.insert("description".into(), Value::String(description));
    Value::Object(out)
}

fn make_nullable(out: &mut Map<String, Value>) {
    match out.get_mut("type") {
        Some(Value::String(t)) => {
            let t = std::mem::take(t);
            out.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(types)) if !types.contains(&json!("null")) => types.push(json!("null")),
        _ => {}
    }
    if let Some(Value::Array(values)) = out.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

/// `required` names of properties no longer there (`readOnly` ones) go.
fn drop_missing_required(out: &mut Map<String, Value>) {
    let Some(Value::Object(props)) = out.get("properties") else {
        return;
    };
    let props: Vec<String> = props.keys().cloned().collect();
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.retain(|r| r.as_str().is_some_and(|r| props.iter().any(|p| p == r)));
        if required.is_empty() {
            out.remove("required");
        }
    }
}

/// Merges `allOf` into its parent when every part is a plain object schema
/// (`type: object`, `properties`, `required`, annotations) and no property
/// is declared twice; anything else keeps its `allOf`.
fn merge_all_of(out: &mut Map<String, Value>) {
    let Some(Value::Array(parts)) = out.get("allOf").cloned() else {
        return;
    };
    let plain = |m: &Map<String, Value>| {
        m.iter().all(|(k, v)| match k.as_str() {
            "type" => v == "object",
            "properties" | "required" => true,
            k => ANNOTATIONS.contains(&k),
        })
    };
    if !plain(
        &out.iter()
            .filter(|(k, _)| k.as_str() != "allOf")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    ) {
        return;
    }
    let mut props = match out.get("properties") {
        Some(Value::Object(p)) => p.clone(),
        _ => Map::new(),
    };
    let mut required: Vec<Value> = match out.get("required") {
        Some(Value::Array(r)) => r.clone(),
        _ => Vec::new(),
    };
    let mut description = None;
    for part in &parts {
        let Value::Object(part) = part else { return };
        if !plain(part) {
            return;
        }
        if let Some(Value::Object(p)) = part.get("properties") {
            for (k, v) in p {
                if props.contains_key(k) {
                    return;
                }
                props.insert(k.clone(), v.clone());
            }
        }
        if let Some(Value::Array(r)) = part.get("required") {
            for name in r {
                if !required.contains(name) {
                    required.push(name.clone());
                }
            }
        }
        if description.is_none() {
            description = part.get("description").cloned();
        }
    }
    if !out.contains_key("description")
        && let Some(d) = description
    {
        out.insert("description".into(), d);
    }
    out.remove("allOf");
    out.insert("type".into(), json!("object"));
    out.insert("properties".into(), Value::Object(props));
    if !required.is_empty() {
        out.insert("required".into(), Value::Array(required));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(spec: Value, schema: Value) -> (Value, Vec<String>) {
        let mut docs = Documents::from_value(spec, None);
        let mut c = Converter::new(&mut docs);
        let out = c.convert(0, &schema);
        (out, c.notes)
    }

    #[test]
    fn refs_are_inlined_and_recursion_is_cut_where_it_repeats() {
        let spec = json!({"components": {"schemas": {
            "Node": {"type": "object", "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}
            }}
        }}});
        let (out, notes) = convert(spec, json!({"$ref": "#/components/schemas/Node"}));
        assert_eq!(out["properties"]["name"]["type"], "string");
        let inner = &out["properties"]["children"]["items"];
        assert!(inner.get("properties").is_none(), "{inner}");
        assert!(inner["description"].as_str().unwrap().contains("recursive"));
        assert_eq!(notes.len(), 1, "{notes:?}");
    }

    #[test]
    fn openapi_3_0_keywords_become_json_schema() {
        let (out, _) = convert(
            json!({}),
            json!({"type": "object", "required": ["id", "n"], "example": {"n": 1}, "x-internal": true,
            "properties": {
                "id": {"type": "integer", "readOnly": true},
                "n": {"type": "number", "maximum": 5, "exclusiveMaximum": true, "nullable": true},
                "kind": {"type": "string", "enum": ["a", "b"], "nullable": true},
                "f": {"type": "file"}
            }}),
        );
        assert_eq!(
            out,
            json!({"type": "object", "required": ["n"], "properties": {
                "n": {"type": ["number", "null"], "exclusiveMaximum": 5},
                "kind": {"type": ["string", "null"], "enum": ["a", "b", null]},
                "f": {"type": "string"}
            }})
        );
    }

    #[test]
    fn all_of_of_plain_objects_merges_and_anything_else_stays() {
        let spec = json!({"components": {"schemas": {
            "Base": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}}
        }}});
        let (out, _) = convert(
            spec.clone(),
            json!({"allOf": [{"$ref": "#/components/schemas/Base"},
                             {"type": "object", "properties": {"b": {"type": "integer"}}}]}),
        );
        assert_eq!(
            out,
            json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}})
        );
        let (out, _) = convert(
            spec,
            json!({"allOf": [{"$ref": "#/components/schemas/Base"}, {"minProperties": 1}]}),
        );
        assert!(out.get("allOf").is_some());
    }

    #[test]
    fn siblings_of_a_ref_apply() {
        let spec = json!({"components": {"schemas": {"S": {"type": "string"}}}});
        let (out, _) = convert(
            spec,
            json!({"$ref": "#/components/schemas/S", "description": "why"}),
        );
        assert_eq!(out, json!({"type": "string", "description": "why"}));
    }

    #[test]
    fn an_unresolved_ref_accepts_anything_and_says_so() {
        let (out, notes) = convert(json!({}), json!({"$ref": "#/components/schemas/Gone"}));
        assert!(out["description"].as_str().unwrap().contains("unresolved"));
        assert!(notes[0].contains("points at nothing"));
    }
}
