//! Support shared by the MCP end-to-end tests: where `make setup` installed
//! the real MCP servers (a test without them is skipped with a message, so
//! `cargo nextest` works before `make setup`), a streamable HTTP test server
//! on 127.0.0.1, and helpers to run calls.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use toolgate::context::CallContext;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, ToolResult, http_client};
use toolgate_tests::repo_root;

/// The value of `$e`, or (when it is `None`) the test fails under `make
/// test` and skips (returns) elsewhere: an MCP test server is missing.
#[macro_export]
macro_rules! require {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => {
                toolgate_tests::missing(
                    "an MCP test server is not installed; run `make setup` (see the Makefile)",
                );
                return;
            }
        }
    };
}

fn existing(p: PathBuf) -> Option<String> {
    p.exists().then(|| p.to_string_lossy().into_owned())
}

/// `@modelcontextprotocol/server-everything` from npm (`tests/mcp/package.json`).
pub fn everything() -> Option<String> {
    existing(repo_root().join("tests/mcp/node_modules/.bin/mcp-server-everything"))
}

/// `mcp-server-time` from PyPI (`tests/python/requirements.txt`).
pub fn time_server() -> Option<String> {
    existing(repo_root().join(".venv/bin/mcp-server-time"))
}

/// The Python interpreter of `.venv` with the `mcp` SDK, and the test
/// server written with it.
pub fn python_server() -> Option<(String, String)> {
    // mcp-server-time depends on the SDK: its presence says the SDK is there.
    time_server()?;
    Some((
        existing(repo_root().join(".venv/bin/python"))?,
        existing(repo_root().join("tests/mcp/test_server.py"))?,
    ))
}

/// YAML for the Python test server over stdio, named `name`, tools
/// prefixed `prefix`, with `extra` YAML lines (indented 4 spaces) appended.
pub fn python_stdio_yaml(name: &str, prefix: &str, extra: &str) -> Option<String> {
    let (python, script) = python_server()?;
    Some(format!(
        r#"  - name: {name}
    transport: stdio
    command: {python}
    args: ["{script}", "stdio"]
    tools: {{ prefix: "{prefix}" }}
{extra}"#
    ))
}

/// The Python test server serving streamable HTTP on 127.0.0.1; killed
/// when dropped.
pub struct HttpServer {
    _child: tokio::process::Child,
    pub url: String,
}

impl HttpServer {
    pub async fn start() -> Option<HttpServer> {
        Self::start_on(0).await
    }

    /// On `port` (0: a free one).
    pub async fn start_on(port: u16) -> Option<HttpServer> {
        let (python, script) = python_server()?;
        let mut child = tokio::process::Command::new(python)
            .args([script.as_str(), "http", &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(port) = line.strip_prefix("PORT ") {
                    return port.trim().to_owned();
                }
            }
            panic!("the HTTP test server exited without printing its port");
        })
        .await
        .expect("the HTTP test server did not start within 120s");
        Some(HttpServer {
            _child: child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches("/mcp")
            .parse()
            .expect("a port")
    }
}

/// Runs one call with a fresh executor.
pub async fn call(catalog: &Catalog, name: &str, arguments: Value) -> ToolResult {
    let call = ToolCall {
        id: "test".into(),
        name: name.into(),
        arguments,
    };
    let executor = Executor::new(http_client().unwrap());
    let ctx = CallContext::new();
    tokio::time::timeout(Duration::from_secs(60), executor.run(catalog, &call, &ctx))
        .await
        .expect("a call must never hang")
}

/// The text data of a successful call.
pub fn text(result: &ToolResult) -> String {
    assert!(result.success, "the call failed: {:?}", result.error);
    match &result.data {
        Some(Value::String(s)) => s.clone(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Waits (at most 30 s) until `done` holds, checking every 50 ms.
/// An MCP tool that takes no arguments, for the rmcp servers of the tests.
pub fn tool_without_arguments(name: &'static str, description: &'static str) -> rmcp::model::Tool {
    let schema: rmcp::model::JsonObject =
        serde_json::from_value(serde_json::json!({"type": "object", "properties": {}}))
            .expect("an empty object schema");
    rmcp::model::Tool::new(name, description, std::sync::Arc::new(schema))
}

pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts the catalog's MCP servers (bounded, so a test never hangs here).
pub async fn start(catalog: &Catalog) {
    tokio::time::timeout(Duration::from_secs(90), catalog.mcp().start())
        .await
        .expect("starting the MCP servers must be bounded by their startup timeout");
}

/// `@modelcontextprotocol/server-filesystem` from npm (`tests/mcp/package.json`).
pub fn filesystem() -> Option<String> {
    existing(repo_root().join("tests/mcp/node_modules/.bin/mcp-server-filesystem"))
}

/// Every reason the catalog gives for a tool it cannot offer, one a line.
pub fn unavailable_reasons(catalog: &Catalog) -> String {
    catalog
        .unavailable()
        .map(|u| u.reason)
        .collect::<Vec<_>>()
        .join("\n")
}
