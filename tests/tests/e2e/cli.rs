//! The `toolgate` binary: check, tools, call, schema and serve, as a user
//! runs them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

use serde_json::Value;
use toolgate_tests::{Backend, ConfigDir, repo_root, toolgate_bin};

fn toolgate(args: &[&str]) -> (i32, String, String) {
    toolgate_tests::run_cli(&toolgate_bin(), args)
}

#[test]
fn check_passes_on_the_shipped_configuration() {
    let root = repo_root();
    let (code, out, _) = toolgate(&["check", "--config", root.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let last = out.lines().last().unwrap();
    assert!(
        last.starts_with("ok: 17 tools (1 unavailable), 4 tool sets, default set: default"),
        "{out}"
    );
    assert!(
        out.contains("warning: tool `web_search` is disabled"),
        "{out}"
    );
}

#[test]
fn check_lists_every_error_and_exits_1() {
    let dir = repo_root().join("tests/fixtures/broken/errors_in_two_files");
    let (code, out, _) = toolgate(&["check", "--config", dir.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(out.contains("tools.d/a.yaml:3:18: error:"), "{out}");
    assert!(out.contains("tools.d/b.yaml:2:11: error:"), "{out}");
    assert!(out.ends_with("2 errors found\n"), "{out}");
}

#[test]
fn tools_lists_a_set() {
    let root = repo_root();
    let (code, out, _) = toolgate(&[
        "tools",
        "--config",
        root.to_str().unwrap(),
        "--tool-set",
        "research",
    ]);
    assert_eq!(code, 0);
    let names: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "wikipedia_summary",
            "web_fetch",
            "spawn",
            "geocode",
            "get_forecast",
            "calculator",
            "text_process",
            "json_process",
            "web_search"
        ]
    );
    assert!(out.contains("unavailable: environment variable BRAVE_API_KEY is not set"));
    let (code, _, err) = toolgate(&[
        "tools",
        "--config",
        root.to_str().unwrap(),
        "--tool-set",
        "nope",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("available: code, default, research"), "{err}");
}

#[test]
fn schema_prints_the_three_formats() {
    let (code, out, _) = toolgate(&["schema"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    for key in ["toolgate.yaml", "tools.d/*.yaml", "tool-sets/*.yaml"] {
        assert!(v[key]["properties"].is_object(), "{key}");
    }
    assert_eq!(v["tools.d/*.yaml"]["additionalProperties"], false);
}

#[tokio::test]
async fn call_runs_a_tool_without_the_server() {
    let backend = Backend::start().await;
    let dir = ConfigDir::new(&[(
        "tools.d/t.yaml",
        &format!(
            "tools:\n  - name: nested\n    description: d\n    http:\n      url: {}/json\n    response:\n      select: /a/b/2/c\n",
            backend.url()
        ),
    )]);
    let path = dir.path().to_str().unwrap().to_owned();
    let (code, out, err) =
        tokio::task::spawn_blocking(move || toolgate(&["call", "nested", "--config", &path]))
            .await
            .unwrap();
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "deep\n");

    let path = dir.path().to_str().unwrap().to_owned();
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        toolgate(&["call", "nested", "--config", &path, "--args", "{\"x\": 1}"])
    })
    .await
    .unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("error (invalid_arguments)"), "{err}");
}

/// `toolgate serve` on the shipped configuration answers the README's
/// listing requests.
#[tokio::test]
async fn serve_answers_the_readme_requests() {
    let mut child = Command::new(toolgate_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(repo_root())
        .env("TOOLGATE_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let addr = toolgate_tests::listening_address(stderr).await;
    let get = |path: &str| {
        let url = format!("http://{addr}{path}");
        async move {
            reqwest::get(url)
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    assert_eq!(get("/healthz").await["status"], "ok");
    let sets = get("/v1/tool-sets").await;
    assert_eq!(sets["data"].as_array().unwrap().len(), 4);
    let tools = get("/v1/tools?tool_set=default").await;
    let names: Vec<&str> = tools["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "geocode",
            "get_forecast",
            "wikipedia_summary",
            "calculator",
            "text_process",
            "json_process"
        ]
    );
    child.kill().unwrap();
    let _ = child.wait();
}

/// `toolgate mcp login` says which servers can be logged in to, and a
/// server waiting for its login says so (tools unavailable with the
/// command to run), without touching the network for its token.
#[test]
fn mcp_login_names_what_it_needs_and_a_server_without_its_token_waits_for_it() {
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            "upstreams: [{ name: none, base_url: \"http://127.0.0.1:9/v1\" }]\n",
        ),
        (
            "tools.d/servers.yaml",
            "mcp_servers:\n  - name: plain\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    tools: { prefix: a_ }\n  - name: guarded\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    tools: { prefix: b_ }\n    startup_timeout: 2s\n    oauth:\n      grant: authorization_code\n",
        ),
    ]);
    let config = dir.path().to_str().unwrap();
    let (code, _, err) = toolgate(&["mcp", "login", "nope", "--config", config]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no MCP server is named `nope`; the configuration declares: plain, guarded"),
        "{err}"
    );
    let (code, _, err) = toolgate(&["mcp", "login", "plain", "--config", config]);
    assert_eq!(code, 1);
    assert!(err.contains("MCP server `plain` has no `oauth`"), "{err}");
    let (_, out, _) = toolgate(&["check", "--connect", "--config", config]);
    assert!(
        out.contains(
            "not authorized yet: run `toolgate mcp login guarded` and open the URL it prints"
        ),
        "{out}"
    );
    assert!(
        !dir.path().join(".toolgate").exists(),
        "no token file before a login"
    );
}
