//! The example crate `examples/custom-tools`: a binary of its own that runs
//! the same CLI and gateway with its `#[tool]` functions added. Needs the
//! workspace built (`cargo build --workspace`), like the CLI tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toolgate_tests::{ConfigDir, repo_root, toolgate_bin};

fn custom_bin() -> PathBuf {
    let bin =
        toolgate_bin().with_file_name(format!("custom-toolgate{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace`)",
        bin.display()
    );
    bin
}

fn example_config() -> String {
    repo_root()
        .join("examples/custom-tools/config")
        .to_str()
        .unwrap()
        .to_owned()
}

fn run(args: &[&str]) -> (i32, String, String) {
    toolgate_tests::run_cli(&custom_bin(), args)
}

#[test]
fn its_tools_are_listed_next_to_builtins_and_in_yaml_tool_sets() {
    let config = example_config();
    let (code, out, err) = run(&["tools", "--config", &config]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<(&str, &str)> = out
        .lines()
        .map(|l| {
            let mut p = l.split_whitespace();
            (p.next().unwrap(), p.next().unwrap())
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("calculator", "builtin"),
            ("get_weather", "builtin"),
            ("convert_temperature", "native"),
            ("whoami", "native"),
            ("reverse_words", "native"),
        ]
    );
    let (code, out, _) = run(&["tools", "--config", &config, "--tool-set", "custom"]);
    assert_eq!(code, 0);
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "convert_temperature",
            "whoami",
            "reverse_words",
            "calculator"
        ]
    );
}

#[test]
fn its_tools_run_from_the_cli() {
    let config = example_config();
    let (code, out, err) = run(&[
        "call",
        "convert_temperature",
        "--config",
        &config,
        "--args",
        r#"{"value": 100, "to": "fahrenheit"}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "212.0\n");
    let (code, out, _) = run(&[
        "call",
        "reverse_words",
        "--config",
        &config,
        "--args",
        r#"{"text": "one two three"}"#,
    ]);
    assert_eq!(code, 0);
    assert_eq!(out, "three two one\n");
    // An `Err` is an error result.
    let (code, _, err) = run(&[
        "call",
        "reverse_words",
        "--config",
        &config,
        "--args",
        r#"{"text": "  "}"#,
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("error (tool_error): the text has no words"),
        "{err}"
    );
    // Arguments are validated against the generated schema.
    let (code, _, err) = run(&[
        "call",
        "convert_temperature",
        "--config",
        &config,
        "--args",
        r#"{"value": 100, "to": "kelvin"}"#,
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("error (invalid_arguments)"), "{err}");
    // The builtins still work.
    let (code, out, _) = run(&[
        "call",
        "calculator",
        "--config",
        &config,
        "--args",
        r#"{"expression": "2*(3+4)"}"#,
    ]);
    assert_eq!(code, 0);
    assert_eq!(out, "14\n");
}

#[test]
fn a_yaml_tool_with_the_name_of_one_of_its_tools_is_an_error_naming_both() {
    let dir = ConfigDir::new(&[(
        "tools.d/clash.yaml",
        "tools:\n  - name: whoami\n    description: Mine.\n    http: { url: \"https://example.com\" }\n",
    )]);
    let (code, out, _) = run(&["check", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("tools.d/clash.yaml:2:11: error: tool `whoami` is also registered as the native tool `whoami` (examples/custom-tools/src/tools.rs:"),
        "{out}"
    );
    // The plain `toolgate` binary has no such tool: no clash.
    let out = Command::new(toolgate_bin())
        .args(["check", "--config", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
}

/// Served, its context-reading tool sees the project from the request's
/// header and the tool set in force.
#[tokio::test]
async fn served_it_injects_the_request_context() {
    let mut child = Command::new(custom_bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &example_config(),
        ])
        .env("TOOLGATE_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let addr = toolgate_tests::listening_address(stderr).await;
    let resp: Value = reqwest::Client::new()
        .post(format!("http://{addr}/v1/tools/whoami/invoke"))
        .header("X-Toolgate-Project", "acme")
        .json(&json!({"arguments": {}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp["success"], json!(true), "{resp}");
    assert_eq!(resp["data"]["project"], json!("acme"));
    assert_eq!(resp["data"]["request_id"].as_str().unwrap().len(), 32);
    let tools: Value = reqwest::get(format!("http://{addr}/v1/tools?tool_set=custom"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let whoami = tools["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "whoami")
        .unwrap();
    assert_eq!(whoami["function"]["parameters"]["properties"], json!({}));
    assert_eq!(whoami["toolgate"]["kind"], json!("native"));
    child.kill().unwrap();
    let _ = child.wait();
}
