//! OpenAI's "strict" function schemas, rendered from a tool's canonical
//! JSON Schema.
//!
//! With `strict: true`, OpenAI constrains the model's arguments to the
//! schema, but accepts only a subset of JSON Schema: every object has
//! `additionalProperties: false` and lists every property in `required`
//! (optional ones become nullable), `anyOf` instead of `oneOf`, no `$ref`
//! with sibling keywords, a fixed set of `format`s, and a handful of
//! validation keywords. [`to_strict`] is a pure function from any canonical
//! schema (macro, YAML or MCP tools alike) to that form; it fails, with the
//! path and the reason, when the schema cannot be expressed (an object with
//! arbitrary keys, an unsupported keyword), and the tool is then offered
//! without `strict`.
//!
//! For documents that have every property (optional ones non-null), the
//! strict schema accepts exactly what the canonical one accepts. Two
//! differences are deliberate: undeclared keys are refused, and `oneOf`
//! becomes `anyOf` (the same when the branches do not overlap, as in
//! generated enums). A model answering a strict schema sends `null` for an
//! optional property it leaves out; [`drop_optional_nulls`] turns that back
//! into an absent property before validation.

use serde_json::{Map, Value, json};

/// Why a schema has no strict rendering.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at `{path}`: {reason}")]
pub struct NotStrict {
    /// JSON pointer into the canonical schema (`` for the root).
    pub path: String,
    pub reason: String,
}

/// `format`s OpenAI accepts in strict mode; others are dropped (a format is
/// an annotation in draft 2020-12, so dropping it changes no validation).
const FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Annotations with no effect on validation that strict mode refuses or
/// ignores: dropped.
const DROPPED: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
];

/// Annotations a recursive `$ref` may lose.
const ANNOTATIONS: &[&str] = &["description", "title"];

/// Keywords kept as they are (after their sub-schemas are transformed).
const KEPT: &[&str] = &[
    "type",
    "enum",
    "const",
    "description",
    "title",
    "pattern",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "minItems",
    "maxItems",
];

/// OpenAI's limit on object nesting.
const MAX_DEPTH: usize = 10;

/// Renders `schema` (an object schema) in OpenAI's strict form.
pub fn to_strict(schema: &Value) -> Result<Value, NotStrict> {
    let Some(root) = schema.as_object() else {
        return Err(fail("", "the schema is not an object"));
    };
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return Err(fail("", "the root must be `type: object`"));
    }
    let mut t = Transform {
        root,
        inlining: Vec::new(),
    };
    t.node(schema, "", 0)
}

fn fail(path: &str, reason: impl Into<String>) -> NotStrict {
    NotStrict {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

struct Transform<'a> {
    root: &'a Map<String, Value>,
    /// `$ref`s being inlined, to stop at recursion.
    inlining: Vec<String>,
}

impl Transform<'_> {
    fn resolve(&self, reference: &str, path: &str) -> Result<Value, NotStrict> {
        let nowhere = || fail(path, format!("`$ref` {reference:?} points nowhere"));
        let pointer = reference.strip_prefix('#').ok_or_else(|| {
            fail(
                path,
                format!("`$ref` {reference:?} is not local to the schema"),
            )
        })?;
        let mut parts = pointer.split('/');
        if parts.next() != Some("") {
            return Err(nowhere());
        }
        let mut at: Option<&Value> = None;
        for part in parts {
            let part = part.replace("~1", "/").replace("~0", "~");
            let map = match at {
                None => self.root,
                Some(v) => v.as_object().ok_or_else(nowhere)?,
            };
            at = Some(map.get(&part).ok_or_else(nowhere)?);
        }
        at.cloned().ok_or_else(nowhere)
    }

    fn node(&mut self, schema: &Value, path: &str, depth: usize) -> Result<Value, NotStrict> {
        let obj = match schema {
            Value::Object(o) => o,
            Value::Bool(true) => {
                return Err(fail(path, "a schema accepting any value cannot be strict"));
            }
            Value::Bool(false) => return Err(fail(path, "a schema accepting nothing")),
            _ => return Err(fail(path, "not a schema")),
        };

        // `$ref` with siblings: inline the target, the siblings added.
        if let Some(reference) = obj.get("$ref") {
            let reference = reference
                .as_str()
                .ok_or_else(|| fail(path, "`$ref` is not a string"))?
                .to_owned();
            let siblings: Vec<&String> = obj
                .keys()
                .filter(|k| {
                    !matches!(k.as_str(), "$ref" | "$defs" | "definitions")
                        && !DROPPED.contains(&k.as_str())
                })
                .collect();
            if !siblings.is_empty() {
                if self.inlining.contains(&reference) {
                    // Recursive: only annotations can be given up.
                    if siblings.iter().all(|k| ANNOTATIONS.contains(&k.as_str())) {
                        return Ok(json!({ "$ref": reference }));
                    }
                    return Err(fail(
                        path,
                        "a recursive `$ref` with validation keywords beside it cannot be inlined",
                    ));
                }
                let target = self.resolve(&reference, path)?;
                let Value::Object(mut merged) = target else {
                    return Err(fail(path, "`$ref` does not point at an object schema"));
                };
                for (k, v) in obj {
                    if k == "$ref" {
                        continue;
                    }
                    match merged.get(k) {
                        Some(existing) if existing != v && !ANNOTATIONS.contains(&k.as_str()) => {
                            return Err(fail(
                                path,
                                format!("`{k}` beside `$ref` conflicts with the target's"),
                            ));
                        }
                        _ => {
                            merged.insert(k.clone(), v.clone());
                        }
                    }
                }
                self.inlining.push(reference);
                let out = self.node(&Value::Object(merged), path, depth);
                self.inlining.pop();
                return out;
            }
        }

        // A single-element `allOf` is merged into its parent.
        if let Some(all_of) = obj.get("allOf") {
            let Some([single]) = all_of.as_array().map(Vec::as_slice) else {
                return Err(fail(path, "`allOf` with several schemas is not supported"));
            };
            let Some(single) = single.as_object() else {
                return Err(fail(path, "`allOf` holds a non-object schema"));
            };
            let mut merged = obj.clone();
            merged.remove("allOf");
            for (k, v) in single {
                if let Some(existing) = merged.get(k)
                    && existing != v
                {
                    return Err(fail(
                        path,
                        format!("`{k}` in `allOf` conflicts with its parent's"),
                    ));
                }
                merged.insert(k.clone(), v.clone());
            }
            return self.node(&Value::Object(merged), path, depth);
        }

        let mut out = Map::new();
        let mut nullable = false;
        for (k, v) in obj {
            let at = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
            match k.as_str() {
                "nullable" => nullable = v == &Value::Bool(true),
                k if DROPPED.contains(&k) => {}
                "format" => {
                    if v.as_str().is_some_and(|f| FORMATS.contains(&f)) {
                        out.insert("format".into(), v.clone());
                    }
                }
                "anyOf" | "oneOf" => {
                    if obj.contains_key("anyOf") && obj.contains_key("oneOf") {
                        return Err(fail(path, "both `anyOf` and `oneOf`"));
                    }
                    let items = v
                        .as_array()
                        .ok_or_else(|| fail(&at, "not an array of schemas"))?;
                    let mut branches = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        branches.push(self.node(item, &format!("{at}/{i}"), depth)?);
                    }
                    out.insert("anyOf".into(), Value::Array(branches));
                }
                "items" => {
                    if !v.is_object() {
                        return Err(fail(&at, "`items` must be one schema"));
                    }
                    out.insert("items".into(), self.node(v, &at, depth)?);
                }
                "$defs" | "definitions" => {
                    let defs = v
                        .as_object()
                        .ok_or_else(|| fail(&at, "not an object of schemas"))?;
                    let mut out_defs = Map::new();
                    for (name, def) in defs {
                        out_defs.insert(name.clone(), self.node(def, &format!("{at}/{name}"), 0)?);
                    }
                    out.insert(k.to_owned(), Value::Object(out_defs));
                }
                "$ref" => {
                    out.insert("$ref".into(), v.clone());
                }
                "properties" | "required" | "additionalProperties" => {}
                k if KEPT.contains(&k) => {
                    out.insert(k.to_owned(), v.clone());
                }
                other => {
                    return Err(fail(
                        &at,
                        format!("`{other}` is not supported in strict mode"),
                    ));
                }
            }
        }

        if is_object(obj) {
            self.object(obj, &mut out, path, depth)?;
        } else if obj.contains_key("properties") || obj.contains_key("additionalProperties") {
            return Err(fail(
                path,
                "object keywords on a schema that is not an object",
            ));
        }
        Ok(if nullable {
            make_nullable(Value::Object(out))
        } else {
            Value::Object(out)
        })
    }

    fn object(
        &mut self,
        obj: &Map<String, Value>,
        out: &mut Map<String, Value>,
        path: &str,
        depth: usize,
    ) -> Result<(), NotStrict> {
        if depth >= MAX_DEPTH {
            return Err(fail(
                path,
                format!("objects nest more than {MAX_DEPTH} levels"),
            ));
        }
        let closed = match obj.get("additionalProperties") {
            None => false,
            Some(Value::Bool(false)) => true,
            Some(_) => {
                return Err(fail(
                    path,
                    "an object with arbitrary keys (`additionalProperties`) cannot be strict",
                ));
            }
        };
        let props = match obj.get("properties") {
            Some(Value::Object(p)) => p.clone(),
            Some(_) => return Err(fail(path, "`properties` is not an object")),
            None if closed => Map::new(),
            None => {
                return Err(fail(
                    path,
                    "an object without `properties` accepts arbitrary keys",
                ));
            }
        };
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out_props = Map::new();
        for (name, sub) in &props {
            let at = format!(
                "{path}/properties/{}",
                name.replace('~', "~0").replace('/', "~1")
            );
            let strict = self.node(sub, &at, depth + 1)?;
            let strict = if required.contains(&name.as_str()) {
                strict
            } else {
                make_nullable(strict)
            };
            out_props.insert(name.clone(), strict);
        }
        out.insert(
            "required".into(),
            Value::Array(props.keys().cloned().map(Value::String).collect()),
        );
        out.insert("properties".into(), Value::Object(out_props));
        out.insert("additionalProperties".into(), Value::Bool(false));
        Ok(())
    }
}

fn is_object(obj: &Map<String, Value>) -> bool {
    match obj.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => obj.contains_key("properties"),
    }
}

/// `true` when the schema obviously accepts `null`.
fn accepts_null(schema: &Value) -> bool {
    let Some(obj) = schema.as_object() else {
        return schema == &Value::Bool(true);
    };
    let type_null = match obj.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => false,
    };
    let branches_null = ["anyOf", "oneOf"].iter().any(|k| {
        obj.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|b| b.iter().any(accepts_null))
    });
    if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
        return all.iter().all(accepts_null) && (type_null || !obj.contains_key("type"));
    }
    let untyped = !obj.contains_key("type")
        && !obj.contains_key("anyOf")
        && !obj.contains_key("oneOf")
        && !obj.contains_key("$ref")
        && !obj.contains_key("enum")
        && !obj.contains_key("const")
        && !obj.contains_key("not");
    type_null || branches_null || untyped
}

/// The schema, also accepting `null`.
fn make_nullable(schema: Value) -> Value {
    if accepts_null(&schema) {
        return schema;
    }
    let Value::Object(mut obj) = schema else {
        return schema;
    };
    let simple =
        !obj.contains_key("anyOf") && !obj.contains_key("$ref") && !obj.contains_key("const");
    if simple && let Some(t) = obj.get("type").cloned() {
        let types = match t {
            Value::String(s) => vec![Value::String(s), json!("null")],
            Value::Array(mut a) => {
                a.push(json!("null"));
                a
            }
            other => vec![other],
        };
        obj.insert("type".into(), Value::Array(types));
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.push(Value::Null);
        }
        return Value::Object(obj);
    }
    if simple && let Some(Value::Array(values)) = obj.get_mut("enum") {
        values.push(Value::Null);
        return Value::Object(obj);
    }
    if !obj.contains_key("type")
        && !obj.contains_key("$ref")
        && !obj.contains_key("const")
        && let Some(Value::Array(branches)) = obj.get_mut("anyOf")
    {
        branches.push(json!({"type": "null"}));
        return Value::Object(obj);
    }
    let mut wrapper = Map::new();
    if let Some(d) = obj.remove("description") {
        wrapper.insert("description".into(), d);
    }
    wrapper.insert(
        "anyOf".into(),
        json!([Value::Object(obj), {"type": "null"}]),
    );
    Value::Object(wrapper)
}

/// Removes `null` values of optional properties that the canonical schema
/// does not allow to be `null`: a model answering a strict schema sends
/// them for properties it leaves out. Nested objects are followed through
/// `properties` and local `$ref`s.
pub fn drop_optional_nulls(canonical: &Value, args: &mut Value) {
    fn walk(schema: &Value, root: &Value, args: &mut Value, depth: usize) {
        if depth > 32 {
            return;
        }
        let schema = match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => match r.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => target,
                None => return,
            },
            None => schema,
        };
        let (Some(props), Some(obj)) = (
            schema.get("properties").and_then(Value::as_object),
            args.as_object_mut(),
        ) else {
            return;
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        obj.retain(|k, v| {
            !(v.is_null()
                && !required.contains(&k.as_str())
                && props.get(k).is_some_and(|s| !accepts_null(s)))
        });
        for (k, v) in obj.iter_mut() {
            if let Some(sub) = props.get(k) {
                walk(sub, root, v, depth + 1);
            }
        }
    }
    walk(canonical, canonical, args, 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn strict(schema: Value) -> Value {
        to_strict(&schema).unwrap_or_else(|e| panic!("{e}"))
    }

    fn refused(schema: Value) -> NotStrict {
        to_strict(&schema).expect_err("should not be strict")
    }

    #[test]
    fn optional_properties_become_required_and_nullable() {
        let out = strict(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "a": {"type": "string", "format": "uint8", "default": "x"},
                "b": {"type": "string", "enum": ["x", "y"]},
                "c": {"type": "integer", "format": "date-time"},
                "d": {"const": 3},
                "e": {"type": "object", "properties": {"f": {"type": "boolean"}}, "required": ["f"]},
            },
            "required": ["a"],
        }));
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "string"},
                    "b": {"type": ["string", "null"], "enum": ["x", "y", null]},
                    "c": {"type": ["integer", "null"], "format": "date-time"},
                    "d": {"anyOf": [{"const": 3}, {"type": "null"}]},
                    "e": {
                        "type": ["object", "null"],
                        "properties": {"f": {"type": "boolean"}},
                        "required": ["f"],
                        "additionalProperties": false,
                    },
                },
                "required": ["a", "b", "c", "d", "e"],
                "additionalProperties": false,
            })
        );
    }

    #[test]
    fn one_of_ref_siblings_all_of_and_nullable() {
        let out = strict(json!({
            "type": "object",
            "$defs": {
                "Unit": {"oneOf": [{"const": "c"}, {"const": "f"}], "description": "A unit."},
                "Point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
            },
            "properties": {
                "unit": {"$ref": "#/$defs/Unit", "description": "Which unit."},
                "where": {"allOf": [{"$ref": "#/$defs/Point"}]},
                "legacy": {"type": "string", "nullable": true},
            },
            "required": ["unit", "where", "legacy"],
        }));
        assert_eq!(
            out["properties"]["unit"],
            json!({"anyOf": [{"const": "c"}, {"const": "f"}], "description": "Which unit."})
        );
        assert_eq!(out["properties"]["where"], json!({"$ref": "#/$defs/Point"}));
        assert_eq!(
            out["properties"]["legacy"],
            json!({"type": ["string", "null"]})
        );
        assert_eq!(out["$defs"]["Point"]["additionalProperties"], json!(false));
    }

    #[test]
    fn recursive_refs_keep_the_ref() {
        let out = strict(json!({
            "type": "object",
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/Node", "description": "A child."}},
                    },
                    "required": ["name", "children"],
                }
            },
            "properties": {"root": {"$ref": "#/$defs/Node", "description": "The root."}},
            "required": ["root"],
        }));
        let root = &out["properties"]["root"];
        assert_eq!(root["description"], json!("The root."));
        assert_eq!(
            root["properties"]["children"]["items"],
            json!({"$ref": "#/$defs/Node"})
        );
    }

    #[test]
    fn what_cannot_be_strict_says_where_and_why() {
        let cases = [
            (
                json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "string"}}}}),
                "/properties/m",
                "arbitrary keys",
            ),
            (
                json!({"type": "object", "properties": {"m": {"type": "object"}}}),
                "/properties/m",
                "without `properties`",
            ),
            (json!({"type": "object"}), "", "without `properties`"),
            (
                json!({"type": "object", "properties": {"s": {"type": "string", "minLength": 1}}}),
                "/properties/s/minLength",
                "`minLength` is not supported",
            ),
            (
                json!({"type": "object", "properties": {"s": {"patternProperties": {}}}}),
                "/properties/s/patternProperties",
                "not supported",
            ),
            (
                json!({"type": "object", "properties": {"s": {"allOf": [{"type": "string"}, {"maxLength": 3}]}}}),
                "/properties/s",
                "`allOf` with several",
            ),
            (
                json!({"type": "object", "properties": {"s": true}}),
                "/properties/s",
                "any value",
            ),
            (
                json!({"type": "object", "properties": {"s": {"$ref": "other.json#/x", "description": "d"}}}),
                "/properties/s",
                "not local",
            ),
            (json!({"type": "array"}), "", "root must be `type: object`"),
        ];
        for (schema, path, reason) in cases {
            let e = refused(schema.clone());
            assert_eq!(e.path, path, "{schema}: {e}");
            assert!(e.reason.contains(reason), "{schema}: {e}");
        }
        let mut deep = json!({"type": "object", "properties": {}});
        for _ in 0..12 {
            deep = json!({"type": "object", "properties": {"x": deep}, "required": ["x"]});
        }
        assert!(refused(deep).reason.contains("nest"));
    }

    #[test]
    fn nulls_of_optional_properties_are_dropped() {
        let schema = json!({
            "type": "object",
            "$defs": {"Inner": {"type": "object", "properties": {"k": {"type": "integer"}}}},
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "integer"},
                "c": {"type": ["string", "null"]},
                "d": {"$ref": "#/$defs/Inner"},
            },
            "required": ["a"],
        });
        let mut args = json!({"a": null, "b": null, "c": null, "d": {"k": null}});
        drop_optional_nulls(&schema, &mut args);
        // `a` is required (null stays, validation reports it); `c` may be null.
        assert_eq!(args, json!({"a": null, "c": null, "d": {}}));
    }

    /// Schemas whose strict rendering must accept exactly what they accept,
    /// for documents with every property (optional ones non-null).
    fn corpus() -> Vec<Value> {
        let mut schemas = vec![
            json!({"type": "object", "properties": {}}),
            json!({
                "type": "object",
                "properties": {
                    "q": {"type": "string", "pattern": "^[a-z]+$"},
                    "n": {"type": "integer", "minimum": 1, "maximum": 10},
                    "f": {"type": "number", "exclusiveMaximum": 1.5},
                    "flag": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
                },
                "required": ["q"],
            }),
            json!({
                "type": "object",
                "additionalProperties": false,
                "$defs": {
                    "Kind": {"oneOf": [{"const": "a", "type": "string"}, {"const": "b", "type": "string"}]},
                    "Pt": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": ["integer", "null"]}}, "required": ["x"]},
                },
                "properties": {
                    "kind": {"$ref": "#/$defs/Kind", "description": "k"},
                    "maybe_kind": {"anyOf": [{"$ref": "#/$defs/Kind"}, {"type": "null"}]},
                    "pt": {"$ref": "#/$defs/Pt"},
                    "pts": {"type": "array", "items": {"$ref": "#/$defs/Pt"}, "minItems": 1},
                    "color": {"type": "string", "enum": ["red", "green"]},
                    "answer": {"const": 42},
                    "legacy": {"type": "integer", "nullable": true},
                },
                "required": ["kind", "pts"],
            }),
            json!({
                "type": "object",
                "properties": {
                    "outer": {
                        "type": "object",
                        "properties": {
                            "inner": {"type": "object", "properties": {"v": {"type": "number", "multipleOf": 0.5}}},
                            "w": {"type": "string"},
                        },
                        "required": ["w"],
                    },
                    "one": {"allOf": [{"type": "integer", "minimum": 0}]},
                },
            }),
        ];
        // The builtins' generated schemas.
        schemas.extend(toolgate_builtins::all().iter().map(|t| t.parameters()));
        schemas
    }

    /// Documents for `schema` that have every property: values drawn from
    /// the schema, mixed with scalars of the wrong kind.
    fn documents(schema: &Value, root: &Value, depth: usize) -> BoxedStrategy<Value> {
        let junk = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-300i64..300).prop_map(|n| json!(n)),
            (-3.0f64..3.0).prop_map(|f| json!(f)),
            "[a-z]{0,4}".prop_map(Value::String),
        ]
        .boxed();
        if depth > 4 {
            return junk;
        }
        let Some(obj) = schema.as_object() else {
            return junk;
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            let target = r
                .strip_prefix('#')
                .and_then(|p| root.pointer(p))
                .cloned()
                .unwrap_or(json!({}));
            return documents(&target, root, depth + 1);
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(branches) = obj.get(key).and_then(Value::as_array) {
                let options: Vec<BoxedStrategy<Value>> = branches
                    .iter()
                    .map(|b| documents(b, root, depth + 1))
                    .chain(std::iter::once(junk.clone()))
                    .collect();
                return proptest::strategy::Union::new(options).boxed();
            }
        }
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            let values = values.clone();
            return prop_oneof![
                3 => (0..values.len()).prop_map(move |i| values[i].clone()),
                1 => junk,
            ]
            .boxed();
        }
        if let Some(c) = obj.get("const") {
            return prop_oneof![3 => Just(c.clone()), 1 => junk].boxed();
        }
        let types: Vec<String> = match obj.get("type") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
            _ => vec![],
        };
        let mut options: Vec<(u32, BoxedStrategy<Value>)> = vec![(1, junk.clone())];
        for t in &types {
            options.push((
                6,
                match t.as_str() {
                    "object" => {
                        let props = obj
                            .get("properties")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default();
                        let required: Vec<String> = obj
                            .get("required")
                            .and_then(Value::as_array)
                            .map(|r| {
                                r.iter()
                                    .filter_map(|v| v.as_str().map(str::to_owned))
                                    .collect()
                            })
                            .unwrap_or_default();
                        let fields: Vec<BoxedStrategy<(String, Value)>> = props
                            .iter()
                            .map(|(k, sub)| {
                                let key = k.clone();
                                let optional_not_null = !required.contains(k) && !accepts_null(sub);
                                documents(sub, root, depth + 1)
                                    .prop_filter("optional properties are not null", move |v| {
                                        !(optional_not_null && v.is_null())
                                    })
                                    .prop_map(move |v| (key.clone(), v))
                                    .boxed()
                            })
                            .collect();
                        let closed = obj.get("additionalProperties") == Some(&json!(false));
                        (fields, any::<bool>())
                            .prop_map(move |(pairs, extra)| {
                                let mut m: Map<String, Value> = pairs.into_iter().collect();
                                if closed && extra {
                                    m.insert("zz_extra".into(), json!(1));
                                }
                                Value::Object(m)
                            })
                            .boxed()
                    }
                    "array" => {
                        let items = obj.get("items").cloned().unwrap_or(json!({}));
                        proptest::collection::vec(documents(&items, root, depth + 1), 0..3)
                            .prop_map(Value::Array)
                            .boxed()
                    }
                    "string" => "[a-z0-9]{0,6}".prop_map(Value::String).boxed(),
                    "integer" => (-20i64..20).prop_map(|n| json!(n)).boxed(),
                    "number" => prop_oneof![
                        (-20i64..20).prop_map(|n| json!(n)),
                        (-3.0f64..3.0).prop_map(|f| json!(f))
                    ]
                    .boxed(),
                    "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
                    _ => Just(Value::Null).boxed(),
                },
            ));
        }
        proptest::strategy::Union::new_weighted(options).boxed()
    }

    #[test]
    fn strict_accepts_what_the_canonical_schema_accepts() {
        for schema in corpus() {
            // A runner per schema: a runner counts its cases across runs.
            let mut runner =
                proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
                    cases: 300,
                    failure_persistence: None,
                    ..Default::default()
                });
            let strict_schema = to_strict(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
            let canonical = jsonschema::validator_for(&schema).unwrap();
            let strict_v = jsonschema::validator_for(&strict_schema).unwrap();
            let mut accepted = 0u32;
            let count = std::cell::Cell::new(0);
            let result = runner.run(&documents(&schema, &schema, 0), |doc| {
                count.set(count.get() + 1);
                let a = canonical.is_valid(&doc);
                let b = strict_v.is_valid(&doc);
                prop_assert_eq!(a, b, "document {}", doc);
                // A model leaving the optional properties out sends them as
                // null: the strict schema accepts that exactly when the
                // canonical one accepts them absent, and dropping the nulls
                // gives the document without them.
                if let Some(obj) = doc.as_object() {
                    let required: Vec<&str> = schema["required"]
                        .as_array()
                        .map(|r| r.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let mut nulled = obj.clone();
                    let mut absent = obj.clone();
                    for k in obj.keys() {
                        let Some(sub) = schema["properties"].get(k) else {
                            continue;
                        };
                        if !required.contains(&k.as_str()) && !accepts_null(sub) {
                            nulled.insert(k.clone(), Value::Null);
                            absent.remove(k);
                        }
                    }
                    let (nulled, absent) = (Value::Object(nulled), Value::Object(absent));
                    prop_assert_eq!(
                        strict_v.is_valid(&nulled),
                        canonical.is_valid(&absent),
                        "document {}",
                        nulled
                    );
                    let mut dropped = nulled.clone();
                    drop_optional_nulls(&schema, &mut dropped);
                    prop_assert_eq!(dropped, absent);
                }
                Ok(())
            });
            if let Err(e) = result {
                panic!("{schema}\n{strict_schema}\n{e}");
            }
            assert!(count.get() >= 300, "{schema}");
            // The generator is not trivially producing only invalid documents.
            for _ in 0..3000 {
                let doc = documents(&schema, &schema, 0)
                    .new_tree(&mut runner)
                    .unwrap()
                    .current();
                accepted += u32::from(canonical.is_valid(&doc));
            }
            assert!(accepted > 0, "no valid document generated for {schema}");
        }
    }
}
