//! Code mode (`mode: code` on a tool set): instead of the set's tools, the
//! model is offered `run_code`, one tool that runs a Python program in
//! which the set's tools are functions. A program makes many calls in one
//! step — loops, filters, joins — and only what it returns or prints goes
//! back to the model. The program runs on the gateway's interpreter
//! (`toolgate-code`: no OS access, a confined worker process); each call
//! it makes runs through the executor like any call (validation, policies,
//! guards, limits, rate limits, cache, audit, metrics) — the executor's
//! `run_program` does that, this module holds the rest: the tool, the
//! functions' stubs the model reads, arguments from a Python call, and the
//! answer.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::tools::tool::{Annotations, Tool, ToolError, ToolKind, ToolSpec};

/// The name of every code-mode set's program tool.
pub const RUN_CODE: &str = "run_code";

/// The longest program accepted, in characters.
pub const MAX_PROGRAM_CHARS: usize = 64 * 1024;

/// How long a program may run in all, its tool calls included.
pub const TIMEOUT: Duration = Duration::from_secs(300);

/// Characters of function stubs in `run_code`'s description; a set with
/// more leaves the rest to `find_tools`.
const MAX_STUB_CHARS: usize = 48 * 1024;

/// Characters of a tool's description in its stub.
const STUB_DESCRIPTION_CHARS: usize = 300;

/// The limits of one program.
pub fn limits() -> toolgate_code::Limits {
    toolgate_code::Limits::default()
}

/// The `run_code` tool of the set `set`.
pub fn run_code_tool(set: &str) -> Result<Tool, String> {
    Tool::new(
        ToolSpec {
            name: RUN_CODE.to_owned(),
            description: format!(
                "Run a Python program in which the tools of the `{set}` tool set are functions."
            ),
            category: None,
            parameters: json!({
                "type": "object",
                "properties": {
                    "code": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_PROGRAM_CHARS,
                        "description": "The program. Call the tools as functions with keyword arguments; the value of the last expression is returned, and what it prints."
                    }
                },
                "required": ["code"],
                "additionalProperties": false
            }),
            timeout: Some(TIMEOUT),
            cache_ttl: None,
            annotations: Annotations {
                title: Some("Run code".to_owned()),
                read_only_hint: Some(false),
                destructive_hint: Some(true),
                idempotent_hint: Some(false),
                open_world_hint: Some(true),
            },
            output_schema: None,
            origin: "toolgate (code mode)".to_owned(),
        },
        ToolKind::Code,
    )
}

/// `run_code` as offered to a model (OpenAI's shape), described by
/// [`description`].
pub fn offer(tools: &[Arc<Tool>], search: bool) -> crate::conversation::ToolDef {
    crate::conversation::ToolDef {
        json: Default::default(),
        name: RUN_CODE.to_owned(),
        description: Some(description(tools, search).into()),
        parameters: json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The program. Call the tools as functions with keyword arguments; the value of the last expression is returned, and what it prints."
                }
            },
            "required": ["code"],
            "additionalProperties": false
        }).into(),
        strict: None,
        native: None,
    }
}

/// What `run_code` tells a model: how the interpreter works, and `tools`
/// as function stubs — or, with `search`, that `find_tools` finds them.
pub fn description(tools: &[Arc<Tool>], search: bool) -> String {
    let mut description = String::from(
        "Run a Python program that calls this tool set's tools as functions, and get the value of its last expression and what it printed. \
         Prefer one program to many single calls: loop, filter, join and summarise results inside the program and return only what you need. \
         Each function takes keyword arguments, returns the tool's result as Python values (dicts, lists, strings, numbers), and raises RuntimeError when the tool fails. \
         The interpreter is sandboxed Python: no files, network or environment; the modules json, math, re, datetime, collections, itertools, dataclasses and typing are there. \
         A program that fails after making calls is not run again by itself: those calls happened; look at what it printed and decide.\n",
    );
    if search {
        description.push_str(
            "\nFind the functions with find_tools (its results show each one's signature); a tool name's `-` is `_` in its function name.",
        );
        return description;
    }
    description.push_str("\nFunctions:\n```python\n");
    let mut left = tools.len();
    for tool in tools {
        let Some(s) = stub(tool) else {
            left -= 1;
            continue;
        };
        if description.len() + s.len() > MAX_STUB_CHARS {
            description.push_str(&format!("# … and {left} more\n"));
            break;
        }
        description.push_str(&s);
        left -= 1;
    }
    description.push_str("```");
    description
}

/// The Python function name of a tool, or `None` when it cannot be one
/// (`-` becomes `_`; keywords get a trailing `_`).
pub fn function_name(tool: &str) -> Option<String> {
    let name: String = tool
        .chars()
        .map(|c| if c == '-' { '_' } else { c })
        .collect();
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return None;
    }
    Some(if KEYWORDS.contains(&name.as_str()) {
        format!("{name}_")
    } else {
        name
    })
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "print",
];

/// The parameters of a tool in the order positional arguments fill them:
/// the required ones (as `required` lists them), then the rest.
fn parameter_order(tool: &Tool) -> Vec<(String, bool)> {
    let props = tool.parameters["properties"].as_object();
    let required: Vec<String> = tool.parameters["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .filter(|n| props.is_some_and(|p| p.contains_key(*n)))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut order: Vec<(String, bool)> = required.iter().map(|n| (n.clone(), true)).collect();
    if let Some(props) = props {
        order.extend(
            props
                .keys()
                .filter(|k| !required.contains(k))
                .map(|k| (k.clone(), false)),
        );
    }
    order
}

/// A tool as a Python function stub: its signature with types from its
/// schema, and the start of its description.
pub fn stub(tool: &Tool) -> Option<String> {
    let name = function_name(&tool.name)?;
    let props = tool.parameters["properties"].as_object();
    let params: Vec<String> = parameter_order(tool)
        .into_iter()
        .filter(|(p, _)| function_name(p).as_deref() == Some(p.as_str()))
        .map(|(p, required)| {
            let ty = props.and_then(|m| m.get(&p)).map_or("Any", python_type);
            if required {
                format!("{p}: {ty}")
            } else {
                format!("{p}: {ty} | None = None")
            }
        })
        .collect();
    let doc = toolgate::truncate_chars(&tool.description, STUB_DESCRIPTION_CHARS)
        .replace('\\', "\\\\")
        .replace("\"\"\"", "\\\"\\\"\\\"");
    Some(format!(
        "def {name}({}) -> Any:\n    \"\"\"{}\"\"\"\n",
        params.join(", "),
        doc.trim()
    ))
}

fn python_type(schema: &Value) -> &'static str {
    match schema["type"].as_str() {
        Some("string") => "str",
        Some("integer") => "int",
        Some("number") => "float",
        Some("boolean") => "bool",
        Some("array") => "list",
        Some("object") => "dict",
        _ => "Any",
    }
}

/// The tool's arguments from a Python call: positional ones fill the
/// parameters in stub order, keywords name them.
pub fn arguments(
    tool: &Tool,
    args: Vec<Value>,
    kwargs: Map<String, Value>,
) -> Result<Value, String> {
    let order = parameter_order(tool);
    if args.len() > order.len() {
        return Err(format!(
            "{}() takes {} arguments, {} given",
            tool.name,
            order.len(),
            args.len()
        ));
    }
    let mut out = Map::new();
    for ((name, _), value) in order.iter().zip(args) {
        out.insert(name.clone(), value);
    }
    for (name, value) in kwargs {
        if out.contains_key(&name) {
            return Err(format!(
                "{}() got two values for the argument `{name}`",
                tool.name
            ));
        }
        out.insert(name, value);
    }
    Ok(Value::Object(out))
}

/// What the model reads of a program's outcome.
pub fn answer(outcome: toolgate_code::Outcome) -> Result<Value, ToolError> {
    let toolgate_code::Outcome {
        value,
        printed,
        calls,
    } = outcome;
    match value {
        Ok(value) => {
            let mut out = json!({"result": value, "calls": calls});
            if !printed.text.is_empty() {
                out["printed"] = json!(printed.text);
            }
            if printed.dropped > 0 {
                out["printed_dropped_bytes"] = json!(printed.dropped);
            }
            Ok(out)
        }
        Err(failure) => {
            let mut message = failure.message.trim_end().to_owned();
            if !printed.text.is_empty() {
                message.push_str("\n\nIt printed before:\n");
                message.push_str(printed.text.trim_end());
            }
            if calls > 0 {
                message.push_str(&format!(
                    "\n\nThe program had made {calls} tool call(s) before it stopped; they happened and are not repeated. Decide whether to run a corrected program."
                ));
            }
            Err(ToolError::Failed(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, parameters: Value) -> Tool {
        crate::tools::tool::test_tool(
            name,
            "Lists the \"\"\"issues\"\"\" of a repository.",
            parameters,
        )
    }

    #[test]
    fn a_stub_is_a_python_signature_in_the_order_arguments_fill() {
        let t = tool(
            "list-issues",
            json!({"type": "object", "properties": {
                "state": {"type": "string"}, "repo": {"type": "string"}, "limit": {"type": "integer"}
            }, "required": ["repo"]}),
        );
        let s = stub(&t).unwrap();
        assert!(s.starts_with("def list_issues(repo: str, "), "{s}");
        assert!(s.contains("limit: int | None = None"), "{s}");
        assert!(s.contains(r#"\"\"\"issues\"\"\""#), "{s}");
        let args = arguments(
            &t,
            vec![json!("a/b")],
            serde_json::from_value(json!({"state": "open"})).unwrap(),
        )
        .unwrap();
        assert_eq!(args, json!({"repo": "a/b", "state": "open"}));
        assert!(
            arguments(
                &t,
                vec![json!("a/b")],
                serde_json::from_value(json!({"repo": "c"})).unwrap()
            )
            .is_err()
        );
        assert!(arguments(&t, vec![json!(1), json!(2), json!(3), json!(4)], Map::new()).is_err());
    }

    #[test]
    fn names_that_cannot_be_functions_are_left_out() {
        assert_eq!(function_name("get-weather").as_deref(), Some("get_weather"));
        assert_eq!(function_name("class").as_deref(), Some("class_"));
        assert_eq!(function_name("9lives"), None);
        assert_eq!(function_name("a.b"), None);
    }

    #[test]
    fn a_large_set_s_stubs_are_bounded() {
        let tools: Vec<Arc<Tool>> = (0..2_000)
            .map(|i| {
                Arc::new(tool(
                    &format!("tool_{i}"),
                    json!({"type": "object", "properties": {"x": {"type": "string"}}}),
                ))
            })
            .collect();
        let offered = offer(&tools, false);
        let d = offered.description.as_deref().unwrap();
        assert!(d.len() < MAX_STUB_CHARS + 2_000, "{}", d.len());
        assert!(d.contains("more\n```"), "{d}");
    }
}
