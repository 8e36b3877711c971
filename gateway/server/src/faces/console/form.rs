//! A tool's form, both ways: its JSON Schema as the fields a page shows,
//! and the fields a page sends back as the call's arguments.
//!
//! A field's name carries what it holds and where it goes: a kind, then a
//! JSON pointer into the arguments (`n/limit`, `s/where/city`). The kinds
//! are `s` (text), `n` (number), `i` (integer), `b` (`true`/`false`),
//! `j` (JSON: enums and what the form cannot express), `ls`/`ln`/`li`
//! (lists of text, numbers or integers, one item per line). The names come
//! back from a client, so nothing in them is trusted: the arguments built
//! here are validated by the executor like any other call's, and a value
//! that does not parse as its kind is passed on as text for the validator
//! to refuse in its words.

use serde::Serialize;
use serde_json::{Map, Value};

/// Fields one form may have; a schema with more gets the JSON form only.
pub const MAX_FIELDS: usize = 100;
/// Choices an enum may offer in a list; more are entered as JSON.
pub const MAX_OPTIONS: usize = 100;
/// Nesting of objects shown as fields; deeper objects are edited as JSON.
pub const MAX_FORM_DEPTH: usize = 4;
/// The deepest pointer a submitted field may name.
pub const MAX_POINTER_DEPTH: usize = 16;
/// Fields a submitted form may have.
pub const MAX_SUBMITTED_FIELDS: usize = 512;

/// One field of a tool's form.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Field {
    /// The form field's name: kind and pointer.
    pub name: String,
    /// The element id (unique in the form).
    pub id: String,
    /// The property's name.
    pub label: String,
    pub description: Option<String>,
    pub required: bool,
    pub input: Input,
    /// The fields of an object.
    pub fields: Vec<Field>,
}

/// How a field is entered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    Text {
        multiline: bool,
        placeholder: Option<String>,
    },
    Number {
        integer: bool,
        /// `minimum` and `maximum` as the schema writes them.
        min: Option<Value>,
        max: Option<Value>,
        placeholder: Option<String>,
    },
    Boolean {
        placeholder: Option<String>,
    },
    /// One of `options` (each value's JSON text).
    Choice {
        options: Vec<String>,
    },
    /// Items one per line.
    List {
        items: &'static str,
    },
    /// A fieldset of `fields`.
    Object,
    /// JSON text, and why the form cannot do better.
    Json {
        why: &'static str,
        placeholder: Option<String>,
    },
}

/// The fields of a tool whose arguments are `schema`, or `None` when the
/// form cannot express it (not an object of named properties, or more than
/// [`MAX_FIELDS`] fields): then the page offers only the JSON form.
pub fn fields(schema: &Value) -> Option<Vec<Field>> {
    let mut count = 0;
    let fields = object_fields(schema, "", 0, &mut count)?;
    (count <= MAX_FIELDS).then_some(fields)
}

fn object_fields(
    schema: &Value,
    pointer: &str,
    depth: usize,
    count: &mut usize,
) -> Option<Vec<Field>> {
    if types(schema).is_some_and(|t| t != ["object"]) {
        return None;
    }
    let empty = Map::new();
    let properties = match schema.get("properties") {
        Some(p) => p.as_object()?,
        // `{"type": "object"}`: a tool without arguments.
        None if types(schema).is_some() => &empty,
        None => return None,
    };
    if *count + properties.len() > MAX_FIELDS {
        return None;
    }
    let required: std::collections::HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(properties.len());
    // Required properties first, each group by name.
    let mut ordered: Vec<(&String, &Value)> = properties.iter().collect();
    ordered.sort_by_key(|(name, _)| !required.contains(name.as_str()));
    for (name, property) in ordered {
        *count += 1;
        if *count > MAX_FIELDS {
            return None;
        }
        let path = format!("{pointer}/{}", escape(name));
        let (kind, input, fields) = input_for(name, property, &path, depth, count);
        out.push(Field {
            name: format!("{kind}{path}"),
            id: format!("f{count}"),
            label: name.clone(),
            description: property
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            required: required.contains(&name.as_str()),
            input,
            fields,
        });
    }
    Some(out)
}

/// The schema's `type`s, `null` left out (an optional value is left empty).
fn types(schema: &Value) -> Option<Vec<&str>> {
    let list: Vec<&str> = match schema.get("type")? {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => return Some(Vec::new()),
    };
    Some(list.into_iter().filter(|t| *t != "null").collect())
}

fn placeholder(schema: &Value) -> Option<String> {
    match schema.get("default")? {
        Value::Null => None,
        Value::String(s) => Some(format!("default: {s}")),
        other => Some(format!("default: {other}")),
    }
}

/// Strings under these names are long (code, file contents, prompts).
const LONG_TEXT: &[&str] = &[
    "code", "content", "text", "body", "script", "source", "prompt", "task", "patch",
];

fn input_for(
    name: &str,
    schema: &Value,
    path: &str,
    depth: usize,
    count: &mut usize,
) -> (&'static str, Input, Vec<Field>) {
    let json = |why| {
        (
            "j",
            Input::Json {
                why,
                placeholder: placeholder(schema),
            },
            Vec::new(),
        )
    };
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if values.len() > MAX_OPTIONS {
            return json("more choices than a list shows");
        }
        let options = values.iter().map(Value::to_string).collect();
        return ("j", Input::Choice { options }, Vec::new());
    }
    let Some(kinds) = types(schema) else {
        return json("the schema gives no single type");
    };
    match kinds.as_slice() {
        ["string"] => {
            let long = LONG_TEXT.contains(&name)
                || schema
                    .get("maxLength")
                    .and_then(Value::as_u64)
                    .is_some_and(|n| n > 200);
            (
                "s",
                Input::Text {
                    multiline: long,
                    placeholder: placeholder(schema),
                },
                Vec::new(),
            )
        }
        [t @ ("number" | "integer")] => (
            if *t == "integer" { "i" } else { "n" },
            Input::Number {
                integer: *t == "integer",
                min: schema.get("minimum").filter(|v| v.is_number()).cloned(),
                max: schema.get("maximum").filter(|v| v.is_number()).cloned(),
                placeholder: placeholder(schema),
            },
            Vec::new(),
        ),
        ["boolean"] => (
            "b",
            Input::Boolean {
                placeholder: placeholder(schema),
            },
            Vec::new(),
        ),
        ["array"] => {
            let items = schema.get("items");
            let enumerated = items.is_some_and(|i| i.get("enum").is_some());
            match items.and_then(types).as_deref() {
                Some(["string"]) if !enumerated => {
                    ("ls", Input::List { items: "text" }, Vec::new())
                }
                Some(["number"]) if !enumerated => {
                    ("ln", Input::List { items: "number" }, Vec::new())
                }
                Some(["integer"]) if !enumerated => {
                    ("li", Input::List { items: "integer" }, Vec::new())
                }
                _ => json("a list of structured items"),
            }
        }
        ["object"] if depth + 1 < MAX_FORM_DEPTH => {
            match object_fields(schema, path, depth + 1, count) {
                Some(fields) if !fields.is_empty() => ("o", Input::Object, fields),
                _ => json("an object without named properties"),
            }
        }
        ["object"] => json("an object nested too deep for the form"),
        _ => json("a value of several types"),
    }
}

/// Why submitted fields are not arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("the form has more than {MAX_SUBMITTED_FIELDS} fields")]
    TooManyFields,
    #[error("the form field `{0}` is not one this page makes")]
    UnknownField(String),
    #[error("the form field `{0}` is nested deeper than {MAX_POINTER_DEPTH} levels")]
    TooDeep(String),
    #[error("`{path}` is not JSON: {message}")]
    NotJson { path: String, message: String },
    #[error("`{0}` is given both as a value and as an object of fields")]
    Conflict(String),
}

/// The arguments a submitted form stands for. Empty fields are left out.
pub fn arguments(submitted: &[(String, String)]) -> Result<Value, FormError> {
    if submitted.len() > MAX_SUBMITTED_FIELDS {
        return Err(FormError::TooManyFields);
    }
    let mut root = Map::new();
    for (name, raw) in submitted {
        let Some(slash) = name.find('/') else {
            return Err(FormError::UnknownField(name.clone()));
        };
        let (kind, pointer) = name.split_at(slash);
        let segments: Vec<String> = pointer[1..].split('/').map(unescape).collect();
        if segments.len() > MAX_POINTER_DEPTH {
            return Err(FormError::TooDeep(pointer.to_owned()));
        }
        let value = match parse(kind, raw, pointer)? {
            Some(v) => v,
            None => continue,
        };
        insert(&mut root, &segments, value, pointer)?;
    }
    Ok(Value::Object(root))
}

/// One field's value, `None` when it is left empty.
fn parse(kind: &str, raw: &str, pointer: &str) -> Result<Option<Value>, FormError> {
    let text = raw.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let number = |item: &str, integer: bool| -> Value {
        let parsed = if integer {
            item.parse::<i64>().ok().map(Value::from)
        } else {
            item.parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(Value::Number)
        };
        // Not a number: the validator says so, in the gateway's words.
        parsed.unwrap_or_else(|| Value::String(item.to_owned()))
    };
    Ok(Some(match kind {
        "s" => Value::String(raw.to_owned()),
        "n" => number(text, false),
        "i" => number(text, true),
        "b" => match text {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            other => Value::String(other.to_owned()),
        },
        "j" => serde_json::from_str(text).map_err(|e| FormError::NotJson {
            path: pointer.to_owned(),
            message: e.to_string(),
        })?,
        "ls" | "ln" | "li" => Value::Array(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(|item| match kind {
                    "ls" => Value::String(item.to_owned()),
                    _ => number(item, kind == "li"),
                })
                .collect(),
        ),
        _ => return Err(FormError::UnknownField(format!("{kind}{pointer}"))),
    }))
}

fn insert(
    root: &mut Map<String, Value>,
    segments: &[String],
    value: Value,
    pointer: &str,
) -> Result<(), FormError> {
    let conflict = || FormError::Conflict(pointer.to_owned());
    let Some((last, parents)) = segments.split_last() else {
        return Err(conflict());
    };
    let mut at = root;
    for segment in parents {
        let next = at
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        at = next.as_object_mut().ok_or_else(conflict)?;
    }
    if at.contains_key(last) {
        return Err(conflict());
    }
    at.insert(last.clone(), value);
    Ok(())
}

/// A property name as a JSON pointer segment.
fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_kind_of_field_comes_back_as_its_value() {
        let schema = json!({
            "type": "object",
            "required": ["city"],
            "properties": {
                "city": {"type": "string", "description": "Where."},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "ratio": {"type": ["number", "null"]},
                "metric": {"type": "boolean", "default": true},
                "unit": {"enum": ["c", "f", 3]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "where": {"type": "object", "properties": {"a/b~c": {"type": "number"}}},
                "any": {"anyOf": [{"type": "string"}, {"type": "number"}]}
            }
        });
        let fields = fields(&schema).unwrap();
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "s/city", "j/any", "i/days", "b/metric", "n/ratio", "ls/tags", "j/unit", "o/where"
            ]
        );
        assert!(fields[0].required && !fields[1].required);
        assert_eq!(fields[7].fields[0].name, "n/where/a~1b~0c");
        assert_eq!(
            fields[6].input,
            Input::Choice {
                options: vec!["\"c\"".into(), "\"f\"".into(), "3".into()]
            }
        );
        let args = arguments(&pairs(&[
            ("s/city", "Paris"),
            ("i/days", "3"),
            ("n/ratio", ""),
            ("b/metric", "false"),
            ("j/unit", "3"),
            ("ls/tags", "a\n\n b \n"),
            ("n/where/a~1b~0c", "2.5"),
            ("j/any", "\"x\""),
        ]))
        .unwrap();
        assert_eq!(
            args,
            json!({"city": "Paris", "days": 3, "metric": false, "unit": 3,
                   "tags": ["a", "b"], "where": {"a/b~c": 2.5}, "any": "x"})
        );
    }

    #[test]
    fn what_does_not_parse_reaches_the_validator_as_text() {
        let args = arguments(&pairs(&[("i/days", "three"), ("b/x", "yes")])).unwrap();
        assert_eq!(args, json!({"days": "three", "x": "yes"}));
    }

    #[test]
    fn hostile_forms_are_refused_in_words() {
        assert_eq!(
            arguments(&pairs(&[("x/a", "1")])),
            Err(FormError::UnknownField("x/a".into()))
        );
        assert_eq!(
            arguments(&pairs(&[("nopointer", "1")])),
            Err(FormError::UnknownField("nopointer".into()))
        );
        let deep = format!("s{}", "/a".repeat(MAX_POINTER_DEPTH + 1));
        assert!(matches!(
            arguments(&[(deep, "1".into())]),
            Err(FormError::TooDeep(_))
        ));
        assert!(matches!(
            arguments(&pairs(&[("s/a", "1"), ("s/a/b", "2")])),
            Err(FormError::Conflict(_))
        ));
        assert!(matches!(
            arguments(&pairs(&[("j/a", "{nope")])),
            Err(FormError::NotJson { .. })
        ));
        let many: Vec<(String, String)> = (0..=MAX_SUBMITTED_FIELDS)
            .map(|i| (format!("s/{i}"), "x".into()))
            .collect();
        assert_eq!(arguments(&many), Err(FormError::TooManyFields));
    }

    #[test]
    fn schemas_the_form_cannot_express_get_the_json_form() {
        assert_eq!(fields(&json!({"type": "object"})), Some(Vec::new()));
        assert_eq!(fields(&json!({"type": "string"})), None);
        let many: Vec<usize> = (0..=MAX_OPTIONS).collect();
        let f = fields(&json!({"type": "object", "properties": {"x": {"enum": many}}})).unwrap();
        assert!(matches!(f[0].input, Input::Json { .. }));
        assert_eq!(fields(&json!({"oneOf": []})), None);
        let wide: Map<String, Value> = (0..=MAX_FIELDS)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        assert_eq!(fields(&json!({"type": "object", "properties": wide})), None);
        let mut deep = json!({"type": "string"});
        for _ in 0..10 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let f = fields(&deep).unwrap();
        let mut depth = 0;
        let mut at = &f[0];
        while let Some(next) = at.fields.first() {
            at = next;
            depth += 1;
        }
        assert_eq!(depth, MAX_FORM_DEPTH - 1);
        assert!(matches!(at.input, Input::Json { .. }));
    }

    proptest::proptest! {
        /// Any submitted form is arguments or a refusal, never a panic.
        #[test]
        fn any_form_is_arguments_or_a_refusal(
            form in proptest::collection::vec(("[a-z]{0,2}(/[a-z~01]{0,3}){0,20}", ".{0,12}"), 0..20)
        ) {
            let _ = arguments(&form);
        }
    }
}
