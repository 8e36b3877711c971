//! `json_process`: validate, pretty-print, minify, list keys, or select
//! parts of a JSON document by JSON pointer (`/a/0/b`) or JSONPath
//! (`$.a[*].b`, RFC 9535, via `serde_json_path`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::tool;

use toolgate::ToolError;

/// What to do with the document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JsonOperation {
    /// Check that the input is JSON; say where it is not.
    Validate,
    /// Indented JSON.
    Pretty,
    /// JSON without whitespace.
    Minify,
    /// The keys of the object (at `path`, if given).
    Keys,
    /// The value at `path`: a JSON pointer (`/items/0/name`) or a JSONPath (`$.items[*].name`).
    Select,
}

/// Process a JSON document: validate (where is it broken?), pretty, minify,
/// keys (of the object at `path`), or select (by JSON pointer like
/// `/items/0/name` or JSONPath like `$.items[*].name`).
#[tool(category = "data", read_only)]
pub fn json_process(
    /// The JSON document, as text.
    input: String,
    /// The operation.
    operation: JsonOperation,
    /// A JSON pointer (starting with `/`) or JSONPath (starting with `$`); needed by select.
    path: Option<String>,
) -> Result<Value, ToolError> {
    let doc = match serde_json::from_str::<Value>(&input) {
        Ok(doc) => doc,
        Err(e) if operation == JsonOperation::Validate => {
            return Ok(json!({
                "valid": false,
                "error": e.to_string(),
                "line": e.line(),
                "column": e.column(),
            }));
        }
        Err(e) => {
            return Err(ToolError::Failed(format!(
                "the input is not valid JSON: {e}"
            )));
        }
    };
    Ok(match operation {
        JsonOperation::Validate => json!({"valid": true, "type": type_name(&doc)}),
        JsonOperation::Pretty => {
            // Indentation grows with depth: a deep input can come out far
            // larger than it went in.
            let size =
                super::json_size_within(&doc, true, super::MAX_RESULT_BYTES).ok_or_else(|| {
                    super::too_large("the pretty-printed document", super::MAX_RESULT_BYTES)
                })?;
            let mut out = Vec::with_capacity(size);
            serde_json::to_writer_pretty(&mut out, &doc)
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            Value::String(String::from_utf8_lossy(&out).into_owned())
        }
        JsonOperation::Minify => Value::String(doc.to_string()),
        JsonOperation::Keys => {
            let target = match path.as_deref() {
                Some(p) if !p.is_empty() => select(&doc, p)?,
                _ => doc,
            };
            match target {
                Value::Object(map) => json!(map.keys().collect::<Vec<_>>()),
                other => {
                    return Err(ToolError::Failed(format!(
                        "keys needs an object, the value is {} {}",
                        article(type_name(&other)),
                        type_name(&other)
                    )));
                }
            }
        }
        JsonOperation::Select => {
            let p = path
                .as_deref()
                .filter(|p| !p.is_empty())
                .ok_or_else(|| ToolError::Failed("select needs a `path`".into()))?;
            select(&doc, p)?
        }
    })
}

fn select(doc: &Value, path: &str) -> Result<Value, ToolError> {
    if path.starts_with('/') {
        return doc
            .pointer(path)
            .cloned()
            .ok_or_else(|| ToolError::Failed(format!("nothing at JSON pointer {path:?}")));
    }
    if path.starts_with('$') {
        check_path_shape(path)?;
        let query = serde_json_path::JsonPath::parse(path)
            .map_err(|e| ToolError::Failed(format!("the JSONPath is invalid: {e}")))?;
        let nodes = query.query(doc).all();
        // `$..*` selects every node with its subtree, `$[*,*,*]` the same
        // nodes again: the selection can be far larger than the document.
        // Its size is counted before anything is copied.
        let mut size = 2usize;
        for node in &nodes {
            let room = super::MAX_RESULT_BYTES.saturating_sub(size);
            size += super::json_size_within(node, false, room)
                .ok_or_else(|| super::too_large("the selection", super::MAX_RESULT_BYTES))?
                + 1;
        }
        return Ok(Value::Array(nodes.into_iter().cloned().collect()));
    }
    Err(ToolError::Failed(format!(
        "{path:?} is neither a JSON pointer (`/a/0`) nor a JSONPath (`$.a[0]`)"
    )))
}

/// Longest JSONPath accepted, in bytes.
const MAX_PATH_BYTES: usize = 4096;
/// Deepest nesting of brackets, parentheses and negations in a JSONPath:
/// the JSONPath parser recurses on each level, and its stack is the
/// gateway's.
const MAX_PATH_NESTING: usize = 32;

/// Refuses a JSONPath too long or nested too deep to parse safely (the
/// parser is recursive): checked on the text, before parsing.
fn check_path_shape(path: &str) -> Result<(), ToolError> {
    if path.len() > MAX_PATH_BYTES {
        return Err(ToolError::Refused(format!(
            "the JSONPath is {} bytes long, over the limit of {MAX_PATH_BYTES}",
            path.len()
        )));
    }
    let (mut depth, mut deepest, mut quote) = (0usize, 0usize, None::<char>);
    let mut negations = 0usize;
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => {
                depth += 1;
                deepest = deepest.max(depth + negations);
            }
            (None, ')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                negations = 0;
            }
            (None, '!') => {
                negations += 1;
                deepest = deepest.max(depth + negations);
            }
            (None, c) if !c.is_whitespace() => negations = 0,
            _ => {}
        }
    }
    if deepest > MAX_PATH_NESTING {
        return Err(ToolError::Refused(format!(
            "the JSONPath nests {deepest} levels deep, over the limit of {MAX_PATH_NESTING}"
        )));
    }
    Ok(())
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: Value) -> Result<Value, ToolError> {
        let tool = json_process::tool();
        let ctx = toolgate::context::ToolContext::detached("json_process");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(tool.call(args, ctx))
    }

    const DOC: &str = r#"{"items": [{"name": "a", "n": 1}, {"name": "b", "n": 2}], "total": 2}"#;

    #[test]
    fn operations() {
        assert_eq!(
            run(json!({"input": DOC, "operation": "validate"})).unwrap(),
            json!({"valid": true, "type": "object"})
        );
        assert_eq!(
            run(json!({"input": "{\"a\": [1,\n 2,]}", "operation": "validate"})).unwrap()["line"],
            json!(2)
        );
        assert_eq!(
            run(json!({"input": "{\"a\":  [1, 2]}", "operation": "pretty"})).unwrap(),
            json!("{\n  \"a\": [\n    1,\n    2\n  ]\n}")
        );
        assert_eq!(
            run(json!({"input": "{ \"a\" : [ 1 , 2 ] }", "operation": "minify"})).unwrap(),
            json!("{\"a\":[1,2]}")
        );
        assert_eq!(
            run(json!({"input": DOC, "operation": "keys"})).unwrap(),
            json!(["items", "total"])
        );
        assert_eq!(
            run(json!({"input": DOC, "operation": "keys", "path": "/items/0"})).unwrap(),
            json!(["n", "name"])
        );
        assert_eq!(
            run(json!({"input": DOC, "operation": "select", "path": "/items/1/name"})).unwrap(),
            json!("b")
        );
        assert_eq!(
            run(json!({"input": DOC, "operation": "select", "path": "$.items[*].name"})).unwrap(),
            json!(["a", "b"])
        );
        assert_eq!(
            run(json!({"input": DOC, "operation": "select", "path": "$.items[?@.n > 1].name"}))
                .unwrap(),
            json!(["b"])
        );
    }

    #[test]
    fn refused_inputs() {
        let cases = [
            (
                json!({"input": "{nope", "operation": "pretty"}),
                "not valid JSON",
            ),
            (
                json!({"input": DOC, "operation": "select"}),
                "select needs a `path`",
            ),
            (
                json!({"input": DOC, "operation": "select", "path": "/missing"}),
                "nothing at JSON pointer",
            ),
            (
                json!({"input": DOC, "operation": "select", "path": "$[?"}),
                "the JSONPath is invalid",
            ),
            (
                json!({"input": DOC, "operation": "select", "path": "items.0"}),
                "neither a JSON pointer",
            ),
            (
                json!({"input": "[1]", "operation": "keys"}),
                "keys needs an object, the value is an array",
            ),
        ];
        for (args, expected) in cases {
            let e = run(args.clone()).unwrap_err().to_string();
            assert!(e.contains(expected), "{args}: {e}");
        }
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any JSONPath text, including deep and long ones: an answer or a
        /// clear error, never a panic or a stack overflow.
        #[test]
        fn any_jsonpath_is_answered_or_refused(
            body in "[\\[\\]()?!@.*,'\"a1 <=&|$-]{0,400}",
            depth in 0usize..3000,
            opener in prop::sample::select(vec!["(", "[", "!", "[?(", "[?!"]),
        ) {
            let path = format!("${}{}", opener.repeat(depth / opener.len().max(1)), body);
            let _ = run(json!({"input": DOC, "operation": "select", "path": path}));
            let _ = run(json!({"input": DOC, "operation": "select", "path": format!("${body}")}));
        }

        /// Any input document: pretty, minify and keys answer or refuse.
        #[test]
        fn any_document_is_answered_or_refused(input in "[\\[\\]{}:,\"a1 ]{0,300}", depth in 0usize..200) {
            let deep = format!("{}{input}{}", "[".repeat(depth), "]".repeat(depth));
            for op in ["validate", "pretty", "minify", "keys"] {
                let _ = run(json!({"input": deep, "operation": op}));
            }
        }
    }
}
