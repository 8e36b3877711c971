//! Schema-driven coercion of argument values written as text (XML-style
//! parameters) or as Python literals.
//!
//! Only the tool's JSON Schema decides: a value is converted when the
//! property declares a type the value can be read as (`"5"` for an
//! `integer`, `"true"` for a `boolean`, JSON text for an `object`/`array`,
//! a number for a `string`), and left exactly as written otherwise —
//! including when the schema says nothing about the property.

use serde_json::{Map, Number, Value};

use super::python_literal;

/// The schema of property `key` in an object schema: its own, else the
/// schema of the object's other properties (`additionalProperties`).
pub(super) fn prop_schema<'a>(schema: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    let schema = schema?;
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// Types a schema allows, in order: `type` (string or list), else the types
/// of `anyOf`/`oneOf` alternatives.
fn schema_types(schema: Option<&Value>) -> Vec<&str> {
    let Some(s) = schema else { return Vec::new() };
    match s.get("type") {
        Some(Value::String(t)) => return vec![t.as_str()],
        Some(Value::Array(ts)) => return ts.iter().filter_map(Value::as_str).collect(),
        _ => {}
    }
    let mut out = Vec::new();
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = s.get(key) {
            for alt in alts {
                if let Some(Value::String(t)) = alt.get("type") {
                    out.push(t.as_str());
                }
            }
        }
    }
    out
}

/// Whether a schema says what type its value has.
pub(super) fn declares_type(schema: Option<&Value>) -> bool {
    !schema_types(schema).is_empty()
}

/// Map a type hint written by the model (`<param type="int">`) to a JSON
/// Schema type.
fn hint_type(hint: &str) -> Option<&'static str> {
    Some(match hint.trim().to_ascii_lowercase().as_str() {
        "string" | "str" | "text" => "string",
        "integer" | "int" | "long" => "integer",
        "number" | "float" | "double" => "number",
        "boolean" | "bool" => "boolean",
        "object" | "dict" => "object",
        "array" | "list" | "tuple" => "array",
        "null" | "none" => "null",
        // Any JSON literal (DSML's `string="false"`, Kimi K3's typed values).
        "json" => "json",
        _ => return None,
    })
}

/// Coerce a raw text value for a property with schema `ps`. `hint` is a type
/// the model declared itself, used only when the schema declares none.
pub(super) fn coerce_text(raw: &str, ps: Option<&Value>, hint: Option<&str>) -> Value {
    let mut types = schema_types(ps);
    if types.is_empty()
        && let Some(t) = hint.and_then(hint_type)
    {
        types.push(t);
    }
    // `null` written for a property that may be null is null, even where
    // a string is allowed too (`anyOf: [string, null]`).
    if types.contains(&"null") && raw.trim() == "null" {
        return Value::Null;
    }
    for t in &types {
        if let Some(v) = text_as(raw, t, ps) {
            return v;
        }
    }
    Value::String(raw.to_string())
}

fn text_as(raw: &str, ty: &str, ps: Option<&Value>) -> Option<Value> {
    let s = raw.trim();
    match ty {
        "string" => Some(Value::String(raw.to_string())),
        "integer" => {
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok()?;
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                Some(Value::from(f as i64))
            } else {
                None
            }
        }
        "number" => {
            if let Ok(i) = s.parse::<i64>() {
                return Some(Value::from(i));
            }
            let f = s.parse::<f64>().ok()?;
            Number::from_f64(f).map(Value::Number)
        }
        "boolean" => match s.to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        "null" => match s {
            "null" | "None" | "" => Some(Value::Null),
            _ => None,
        },
        "json" => serde_json::from_str::<Value>(s).ok(),
        // An empty element for an object or array (MiniMax-M3 writes `{}` so).
        "object" if s.is_empty() => Some(Value::Object(Map::new())),
        "array" if s.is_empty() => Some(Value::Array(Vec::new())),
        "object" | "array" => {
            let v = serde_json::from_str::<Value>(s)
                .ok()
                .or_else(|| python_literal::literal_str(s))?;
            let ok = if ty == "object" {
                v.is_object()
            } else {
                v.is_array()
            };
            ok.then(|| coerce_value(v, ps))
        }
        _ => None,
    }
}

fn matches_type(v: &Value, ty: &str) -> bool {
    match ty {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => false,
    }
}

/// Coerce an already-typed value (a Python literal) to schema `ps`,
/// recursing into object properties and array items.
pub(super) fn coerce_value(v: Value, ps: Option<&Value>) -> Value {
    let types = schema_types(ps);
    if types.is_empty() || types.iter().any(|t| matches_type(&v, t)) {
        return recurse(v, ps);
    }
    for t in &types {
        let converted = match (&v, *t) {
            (Value::String(s), _) => text_as(s, t, ps).filter(|c| matches_type(c, t)),
            (Value::Number(n), "string") => Some(Value::String(n.to_string())),
            (Value::Bool(b), "string") => Some(Value::String(b.to_string())),
            (Value::Number(n), "integer") => n
                .as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| Value::from(f as i64)),
            _ => None,
        };
        if let Some(c) = converted {
            return c;
        }
    }
    v
}

fn recurse(v: Value, ps: Option<&Value>) -> Value {
    match v {
        Value::Object(m)
            if ps.is_some_and(|s| {
                s.get("properties").is_some()
                    || s.get("additionalProperties").is_some_and(Value::is_object)
            }) =>
        {
            Value::Object(coerce_map(m, ps))
        }
        Value::Array(items) => match ps.and_then(|s| s.get("items")) {
            Some(is) if is.is_object() => Value::Array(
                items
                    .into_iter()
                    .map(|x| coerce_value(x, Some(is)))
                    .collect(),
            ),
            _ => Value::Array(items),
        },
        other => other,
    }
}

/// Coerce every argument of a call against the tool's parameter schema.
pub(super) fn coerce_map(m: Map<String, Value>, schema: Option<&Value>) -> Map<String, Value> {
    m.into_iter()
        .map(|(k, v)| {
            let ps = prop_schema(schema, &k);
            (k, coerce_value(v, ps))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_coercion_follows_schema() {
        let int = json!({"type": "integer"});
        let num = json!({"type": "number"});
        let boolean = json!({"type": "boolean"});
        let obj = json!({"type": "object"});
        let arr = json!({"type": ["array", "null"]});
        let s = json!({"type": "string"});
        assert_eq!(coerce_text("5", Some(&int), None), json!(5));
        assert_eq!(coerce_text(" 5 ", Some(&num), None), json!(5));
        assert_eq!(coerce_text("2.5", Some(&num), None), json!(2.5));
        assert_eq!(coerce_text("True", Some(&boolean), None), json!(true));
        assert_eq!(coerce_text("{\"a\": 1}", Some(&obj), None), json!({"a": 1}));
        assert_eq!(
            coerce_text("{'a': None}", Some(&obj), None),
            json!({"a": null})
        );
        assert_eq!(coerce_text("[1]", Some(&arr), None), json!([1]));
        assert_eq!(coerce_text("5", Some(&s), None), json!("5"));
        let nullable = json!({"anyOf": [{"type": "string"}, {"type": "null"}]});
        assert_eq!(coerce_text("null", Some(&nullable), None), json!(null));
        assert_eq!(coerce_text("Alice", Some(&nullable), None), json!("Alice"));
        // No schema type: unchanged.
        assert_eq!(coerce_text("5", None, None), json!("5"));
        assert_eq!(coerce_text("5", Some(&json!({})), None), json!("5"));
        // Not readable as the type: unchanged.
        assert_eq!(coerce_text("five", Some(&int), None), json!("five"));
        // Model-declared hint only without schema type.
        assert_eq!(coerce_text("20", None, Some("integer")), json!(20));
        assert_eq!(coerce_text("20", Some(&s), Some("integer")), json!("20"));
    }

    #[test]
    fn value_coercion_recurses() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"},
            "s": {"type": "string"},
            "o": {"type": "object", "properties": {"b": {"type": "boolean"}}},
            "l": {"type": "array", "items": {"type": "number"}}
        }});
        let m = json!({"n": "7", "s": 12, "o": {"b": "false"}, "l": ["1.5", 2], "x": "9"});
        let Value::Object(m) = m else { unreachable!() };
        let out = Value::Object(coerce_map(m, Some(&schema)));
        assert_eq!(
            out,
            json!({"n": 7, "s": "12", "o": {"b": false}, "l": [1.5, 2], "x": "9"})
        );
    }
}
