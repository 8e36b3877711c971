//! The registry, tool by tool: every builtin has a valid schema, a strict
//! rendering (or the reason there is none), and runs with an example; the
//! shipped YAML tools' schemas get the same schema checks. The generated
//! schemas are snapshots.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use toolgate::context::CallContext;
use toolgate::strict;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, http_client};
use toolgate_tests::{Backend, ConfigDir, load_catalog, repo_root};

/// Every builtin enabled, the workspace in a temporary folder, web_fetch
/// allowed to reach the local backend.
fn all_builtins(workspace: &std::path::Path) -> ConfigDir {
    let names: Vec<String> = toolgate_builtins::all()
        .iter()
        .map(|t| t.name.to_owned())
        .collect();
    ConfigDir::new(&[(
        "toolgate.yaml",
        &format!(
            "builtins:\n  workspace: {}\n  enabled: [{}]\n  web_fetch: {{ allow_private: true }}\n",
            workspace.display(),
            names.join(", ")
        ),
    )])
}

/// An example call of each builtin, and a check of its result, in the
/// order they run (the file examples build on each other). A builtin
/// without an example fails the test.
/// A builtin's name, example arguments, and a check of the result.
type Example = (&'static str, (Value, fn(&Value) -> bool));

fn examples(backend: &Backend) -> Vec<Example> {
    let mut m = Examples(Vec::new());
    m.insert(
        "calculator",
        (json!({"expression": "2*(3+4)"}), |v| v == &json!(14)),
    );
    m.insert(
        "text_process",
        (json!({"text": "a b", "operation": "upper"}), |v| {
            v == &json!("A B")
        }),
    );
    m.insert(
        "json_process",
        (
            json!({"input": "{\"a\": [1, 2]}", "operation": "select", "path": "/a/1"}),
            |v| v == &json!(2),
        ),
    );
    m.insert(
        "file_write",
        (
            json!({"path": "notes/a.txt", "content": "hello\nworld\n"}),
            |v| v["bytes_written"] == json!(12),
        ),
    );
    m.insert(
        "file_read",
        (json!({"path": "notes/a.txt", "start_line": 2}), |v| {
            v == &json!("world\n")
        }),
    );
    m.insert(
        "file_edit",
        (
            json!({"path": "notes/a.txt", "old_text": "world", "new_text": "there"}),
            |v| v["replacements"] == json!(1),
        ),
    );
    m.insert(
        "file_list",
        (json!({"glob": "**/*.txt"}), |v| {
            v["entries"][0]["path"] == json!("notes/a.txt")
        }),
    );
    m.insert(
        "file_exists",
        (json!({"path": "notes/a.txt"}), |v| {
            v["exists"] == json!(true)
        }),
    );
    m.insert(
        "file_mkdir",
        (json!({"path": "x/y"}), |v| v["created"] == json!(true)),
    );
    m.insert(
        "file_delete",
        (json!({"path": "x", "recursive": true}), |v| {
            v["deleted"] == json!("dir")
        }),
    );
    m.insert(
        "exec",
        (json!({"command": "cat notes/a.txt"}), |v| {
            v["exit_code"] == json!(0) && v["stdout"] == json!("hello\nthere\n")
        }),
    );
    m.insert(
        "execute_python",
        (
            json!({"code": "import math\nprint(math.factorial(5))"}),
            |v| v["stdout"] == json!("120\n"),
        ),
    );
    let url = format!("{}/json", backend.url());
    let url: &'static str = Box::leak(url.into_boxed_str());
    m.insert(
        "web_fetch",
        (json!({ "url": url }), |v| {
            v["kind"] == json!("json") && v["content"].as_str().unwrap().contains("\"deep\"")
        }),
    );
    m.insert(
        "get_weather",
        (json!({"location": "Lyon"}), |v| {
            v["simulated"] == json!(true)
        }),
    );
    m.insert("spawn", (json!({"tasks": ["add 1 and 2"]}), |_| true));
    m.0
}

struct Examples(Vec<Example>);

impl Examples {
    fn insert(&mut self, name: &'static str, example: (Value, fn(&Value) -> bool)) {
        self.0.push((name, example));
    }
}

#[tokio::test]
async fn every_builtin_is_valid_strict_or_explained_and_runs() {
    let backend = Backend::start().await;
    let workspace = tempfile::tempdir().unwrap();
    let dir = all_builtins(workspace.path());
    let catalog = load_catalog(dir.path(), &[]);
    let examples = examples(&backend);
    let executor = Executor::new(http_client().unwrap());
    let ctx = CallContext::new();

    let builtins = toolgate_builtins::all();
    assert!(builtins.len() >= 14);
    let mut schemas = BTreeMap::new();
    for native in &builtins {
        let tool = catalog
            .tool(native.name)
            .unwrap_or_else(|| panic!("{} is not in the catalog", native.name));
        assert_eq!(tool.kind.label(), "builtin");
        assert!(!tool.description.trim().is_empty(), "{}", tool.name);
        jsonschema::meta::validate(&tool.parameters)
            .unwrap_or_else(|e| panic!("{}: invalid schema: {e}", tool.name));
        check_strict(&tool.name, &tool.parameters);
        assert!(
            examples.iter().any(|(n, _)| *n == native.name),
            "no example for the builtin `{}`: add one",
            native.name
        );
        schemas.insert(
            tool.name.clone(),
            json!({
                "description": tool.description,
                "category": tool.category,
                "cached": tool.cache.is_some(),
                "parameters": tool.parameters,
                "strict": match &tool.strict {
                    Ok(s) => Value::clone(s),
                    Err(e) => json!(format!("not strict: {e}")),
                },
            }),
        );
    }
    assert_eq!(
        examples.len(),
        builtins.len(),
        "an example names no builtin"
    );

    for (name, (args, ok)) in &examples {
        let tool = catalog.tool(name).unwrap();
        tool.validate(args)
            .unwrap_or_else(|e| panic!("{name}: the example is invalid: {e:?}"));
        // The strict rendering accepts the example too, once every
        // optional property is given as null.
        if let Ok(strict_schema) = &tool.strict {
            let mut full = args.clone();
            for key in tool.parameters["properties"].as_object().unwrap().keys() {
                full.as_object_mut()
                    .unwrap()
                    .entry(key.clone())
                    .or_insert(Value::Null);
            }
            assert!(
                jsonschema::is_valid(strict_schema, &full),
                "{name}: the strict schema refuses {full}"
            );
        }
        let result = executor
            .run(
                &catalog,
                &ToolCall {
                    id: "example".into(),
                    name: (*name).to_owned(),
                    arguments: args.clone(),
                },
                &ctx,
            )
            .await;
        if *name == "spawn" {
            // Sub-agents need a model: the chat loop runs them
            // (tests/tests/subagents.rs); elsewhere the call says so.
            let message = result.error.map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains("/v1/chat/completions"), "spawn: {message}");
            continue;
        }
        assert!(
            result.success,
            "{name}: {:?}",
            result.error.map(|e| e.to_string())
        );
        let data = result.data.unwrap();
        assert!(ok(&data), "{name}: unexpected result {data}");
    }
    insta::assert_json_snapshot!("builtin_schemas", schemas);
}

/// The strict rendering, when there is one, is a valid schema that
/// OpenAI's rules accept; when there is none, the reason says where.
fn check_strict(name: &str, canonical: &Value) {
    match strict::to_strict(canonical) {
        Ok(s) => {
            jsonschema::meta::validate(&s)
                .unwrap_or_else(|e| panic!("{name}: invalid strict schema: {e}"));
            assert_openai_strict(name, &s, "");
        }
        Err(e) => assert!(!e.reason.is_empty(), "{name}: no reason"),
    }
}

/// Every object closed and fully required; no `oneOf`, `$schema`,
/// `nullable`, or `$ref` with siblings.
fn assert_openai_strict(name: &str, s: &Value, path: &str) {
    let Some(obj) = s.as_object() else { return };
    for k in ["oneOf", "$schema", "nullable", "allOf", "default"] {
        assert!(!obj.contains_key(k), "{name}{path}: `{k}` left");
    }
    if obj.contains_key("$ref") {
        assert_eq!(obj.len(), 1, "{name}{path}: `$ref` with siblings");
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        assert_eq!(
            obj.get("additionalProperties"),
            Some(&json!(false)),
            "{name}{path}"
        );
        let required: Vec<&str> = obj["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for k in props.keys() {
            assert!(
                required.contains(&k.as_str()),
                "{name}{path}: `{k}` not required"
            );
        }
    }
    for (k, v) in obj {
        match v {
            Value::Object(_) => assert_openai_strict(name, v, &format!("{path}/{k}")),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    assert_openai_strict(name, item, &format!("{path}/{k}/{i}"));
                }
            }
            _ => {}
        }
    }
}

#[test]
fn shipped_configuration_schemas_are_valid_and_strict_or_explained() {
    let catalog = Catalog::load_with_env(&repo_root(), &|_| None).unwrap();
    let mut report = BTreeMap::new();
    // The YAML tools (builtins have their own test; MCP tools come and go).
    for tool in catalog.tools().filter(|t| t.kind.label() == "http") {
        jsonschema::meta::validate(&tool.parameters).unwrap();
        check_strict(&tool.name, &tool.parameters);
        report.insert(
            tool.name.clone(),
            match &tool.strict {
                Ok(_) => "strict".to_owned(),
                Err(e) => format!("not strict: {e}"),
            },
        );
    }
    insta::assert_json_snapshot!("shipped_tools_strictness", report);
}
