//! MCP servers that fail: a missing binary, a server killed in the middle of
//! a call, a server that never answers. The gateway keeps running, reports
//! the tools unavailable, answers calls with error results (never a hang),
//! and uses the server again once it is back. Also the command line:
//! `check --connect`, `tools` and `call`, with the server's stderr in the
//! logs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support;

use std::time::Duration;

use crate::mcp_support::{call, python_stdio_yaml, start, text};
use serde_json::{Value, json};
use toolgate_tests::{ConfigDir, Gateway, load_catalog, toolgate_bin};

const MISSING: &str = r#"mcp_servers:
  - name: missing
    transport: stdio
    command: /nonexistent/mcp-server
    tools: { prefix: "missing_" }
  - name: listed
    transport: stdio
    command: /nonexistent/other-server
    tools: { include: [search, fetch], prefix: "listed_" }
"#;

#[tokio::test]
async fn a_server_that_does_not_start_leaves_the_gateway_running() {
    let dir = ConfigDir::new(&[
        ("tools.d/missing.yaml", MISSING),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [\"missing_*\", listed_search]\n",
        ),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let gw = Gateway::start(catalog).await;

    let health = reqwest::get(gw.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);

    let listing: Value = reqwest::get(gw.url("/v1/tools"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["data"], json!([]));
    let unavailable = listing["unavailable"].as_array().unwrap();
    let names: Vec<&str> = unavailable
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    // Unknown tools are reported per server; listed ones by name.
    assert_eq!(names, ["mcp:missing", "listed_search", "listed_fetch"]);
    let reason = unavailable[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("cannot run `/nonexistent/mcp-server`"),
        "{reason}"
    );

    let in_set: Value = reqwest::get(gw.url("/v1/tools?tool_set=default"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = in_set["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["mcp:missing", "listed_search"]);

    // Calls answer with an error, right away.
    let r = reqwest::Client::new()
        .post(gw.url("/v1/tools/missing_anything/invoke"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "tool_unavailable");
    let r = call(&gw.catalog, "listed_fetch", json!({})).await;
    let e = r.error.unwrap().to_string();
    assert!(e.contains("is unavailable") && e.contains("listed"), "{e}");
    // A name no server could offer is simply unknown.
    let r = call(&gw.catalog, "other_tool", json!({})).await;
    assert_eq!(r.error.unwrap().code(), "unknown_tool");
}

#[tokio::test]
async fn an_unreachable_http_server_is_reported_in_words() {
    // Nothing listens on the discard port of loopback.
    let dir = ConfigDir::new(&[
        (
            "tools.d/gone.yaml",
            "mcp_servers:\n  - name: gone\n    transport: http\n    url: http://127.0.0.1:9/mcp\n    tools: { prefix: gone_ }\n    startup_timeout: 5s\n",
        ),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [\"gone_*\"]\n",
        ),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let reason = mcp_support::unavailable_reasons(&catalog);
    assert!(reason.contains("`initialize` failed"), "{reason}");
    for rust in ["rmcp::", "Transport [", "WorkerTransport", "reqwest::"] {
        assert!(
            !reason.contains(rust),
            "a Rust type name reached users: {reason}"
        );
    }
    catalog.mcp().shutdown().await;
}

#[tokio::test]
async fn a_server_killed_mid_call_fails_the_call_and_is_restarted() {
    let yaml = require!(python_stdio_yaml("py", "py_", "    timeout: 60s\n"));
    let dir = ConfigDir::new(&[("tools.d/py.yaml", &format!("mcp_servers:\n{yaml}"))]);
    let catalog = std::sync::Arc::new(load_catalog(dir.path(), &[]));
    start(&catalog).await;
    let pid = text(&call(&catalog, "py_pid", json!({})).await);

    let slow = {
        let catalog = std::sync::Arc::clone(&catalog);
        tokio::spawn(async move { call(&catalog, "py_sleep", json!({"seconds": 50})).await })
    };
    // Let the call reach the server, then kill the server.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .unwrap();
    assert!(killed.success());

    let r = tokio::time::timeout(Duration::from_secs(20), slow)
        .await
        .expect("the call in flight must end when the server dies")
        .unwrap();
    let e = r.error.expect("the call in flight fails");
    assert_eq!(
        e.code(),
        "backend_error",
        "it fails because of the crash: {e}"
    );
    assert!(e.to_string().contains("closed the session"), "{e}");

    // The server comes back (restarted with backoff) and serves again.
    tokio::time::timeout(Duration::from_secs(30), catalog.mcp().wait_ready("py"))
        .await
        .expect("the server is restarted");
    let new_pid = text(&call(&catalog, "py_pid", json!({})).await);
    assert_ne!(new_pid, pid, "a new process");
    assert_eq!(
        text(&call(&catalog, "py_echo", json!({"message": "back"})).await),
        "back"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_reported_and_calls_do_not_hang() {
    let yaml = r#"mcp_servers:
  - name: silent
    transport: stdio
    command: /bin/sh
    args: ["-c", "exec sleep 600"]
    tools: { include: [ping], prefix: "silent_" }
    startup_timeout: 1s
"#;
    let dir = ConfigDir::new(&[("tools.d/silent.yaml", yaml)]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let report = &catalog.mcp().reports()[0];
    assert!(!report.is_ok());
    let reason = report.reason.clone().unwrap();
    assert!(reason.contains("within 1s"), "{reason}");
    let r = call(&catalog, "silent_ping", json!({})).await;
    let e = r.error.unwrap().to_string();
    assert!(e.contains("unavailable"), "{e}");
}

#[test]
fn check_connect_reports_each_server() {
    let (python, script) = require!(mcp_support::python_server());
    let good = format!(
        r#"mcp_servers:
  - name: py
    transport: stdio
    command: {python}
    args: ["{script}", "stdio"]
    tools: {{ include: [echo, add], prefix: py_ }}
"#
    );
    let dir = ConfigDir::new(&[
        ("tools.d/py.yaml", &good),
        ("tool-sets/s.yaml", "name: s\ntools: [py_echo, \"py_*\"]\n"),
    ]);
    let out = std::process::Command::new(toolgate_bin())
        .args(["check", "--connect", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("MCP server `py` (toolgate-test-server) over stdio: 2 tools"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  py_echo  Echo a message back."),
        "{stdout}"
    );
    assert!(
        stdout.contains("ok: 2 tools (0 unavailable), 1 MCP server, 1 tool sets"),
        "the summary counts the tools the server offered: {stdout}"
    );

    // A server that does not start, and a set naming a tool the server
    // (which does not list its tools by name) turns out not to offer.
    let any = mcp_support::python_stdio_yaml("py", "py_", "").unwrap();
    let bad = format!(
        "mcp_servers:\n{any}{}",
        MISSING.trim_start_matches("mcp_servers:\n")
    );
    let dir = ConfigDir::new(&[
        ("tools.d/py.yaml", &bad),
        ("tool-sets/s.yaml", "name: s\ntools: [py_echo, py_nope]\n"),
    ]);
    let out = std::process::Command::new(toolgate_bin())
        .args(["check", "--connect", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "tool-sets/s.yaml:2:18: tool set `s` names `py_nope`, which no MCP server offers (py)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("tools.d/py.yaml:7:9: error: MCP server `missing` did not start: cannot run `/nonexistent/mcp-server`"),
        "{stdout}"
    );
    assert!(stdout.contains("3 of 3 MCP servers failed"), "{stdout}");
    // Without --connect the same folder is valid: nothing is started.
    let out = std::process::Command::new(toolgate_bin())
        .args(["check", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn the_command_line_calls_mcp_tools_and_logs_their_stderr() {
    let yaml = require!(python_stdio_yaml("pyserver", "py_", ""));
    let dir = ConfigDir::new(&[
        ("tools.d/py.yaml", &format!("mcp_servers:\n{yaml}")),
        ("tools.d/missing.yaml", MISSING),
    ]);
    let out = std::process::Command::new(toolgate_bin())
        .args([
            "call",
            "py_echo",
            "--args",
            r#"{"message": "from the cli"}"#,
            "--config",
        ])
        .arg(dir.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from the cli\n");
    // The server's own stderr line, tagged with its name.
    let line = stderr
        .lines()
        .find(|l| l.contains("toolgate-test-server starting (stdio)"))
        .unwrap_or_else(|| panic!("the server's stderr is not in the logs:\n{stderr}"));
    assert!(line.contains("mcp_server=pyserver"), "{line}");
    // The failed server is in the logs too.
    assert!(
        stderr.contains("MCP server `missing` failed to start"),
        "{stderr}"
    );

    let out = std::process::Command::new(toolgate_bin())
        .args(["tools", "--config"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let line = |start: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` in:\n{stdout}"))
            .to_owned()
    };
    let echo = line("py_echo ");
    assert!(
        echo.contains(" mcp ") && echo.contains("Echo a message back."),
        "{echo}"
    );
    let missing = line("mcp:missing ");
    assert!(
        missing.contains("unavailable: MCP server `missing` is")
            && missing.contains("cannot run `/nonexistent/mcp-server`"),
        "{missing}"
    );
    assert!(line("listed_search ").contains("unavailable"));
}

#[tokio::test]
async fn an_http_server_that_goes_away_is_down_until_it_is_back_with_its_new_tools() {
    let first = require!(mcp_support::HttpServer::start().await);
    let port = first.port();
    let yaml = format!(
        "mcp_servers:\n  - name: remote\n    transport: http\n    url: {}\n    tools: {{ prefix: r_ }}\n",
        first.url
    );
    let dir = ConfigDir::new(&[("tools.d/remote.yaml", &yaml)]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    // The server adds `late` at run time, and says so.
    assert_eq!(text(&call(&catalog, "r_grow", json!({})).await), "grown");
    mcp_support::eventually("`late` is offered", || catalog.tool("r_late").is_some()).await;

    // It stops: the next call fails at once, and the server is down (its
    // tools unavailable with the reason, its health false).
    drop(first);
    let r = call(&catalog, "r_echo", json!({"message": "hi"})).await;
    let e = r.error.expect("the server is gone").to_string();
    assert!(e.contains("reconnecting"), "{e}");
    mcp_support::eventually("the server is down", || {
        catalog.tool("r_echo").is_none() && catalog.mcp().health() == [("remote".to_owned(), false)]
    })
    .await;
    let reason = mcp_support::unavailable_reasons(&catalog);
    assert!(reason.contains("remote"), "{reason}");

    // Back on the same port, without `late`: a new session, a fresh list.
    let _second = require!(mcp_support::HttpServer::start_on(port).await);
    mcp_support::eventually("the server is back", || catalog.tool("r_echo").is_some()).await;
    assert!(
        catalog.tool("r_late").is_none(),
        "a tool of the old server is still offered"
    );
    assert_eq!(
        text(&call(&catalog, "r_echo", json!({"message": "back"})).await),
        "back"
    );
    catalog.mcp().shutdown().await;
}

#[tokio::test]
async fn a_server_answering_401_is_told_which_setting_gives_it_a_token() {
    // The upstream: a toolgate whose MCP endpoint needs an API key.
    let upstream_dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            "builtins:\n  enabled: [calculator]\nauth:\n  keys:\n    - name: a\n      key_env: KEY\n",
        ),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [calculator]\n",
        ),
    ]);
    let upstream = Gateway::start(load_catalog(
        upstream_dir.path(),
        &[("KEY", "a-long-key-0123456789")],
    ))
    .await;
    let yaml = format!(
        "mcp_servers:\n  - name: locked\n    transport: http\n    url: {}\n    tools: {{ prefix: l_ }}\n",
        upstream.url("/mcp/default")
    );
    let dir = ConfigDir::new(&[("tools.d/locked.yaml", &yaml)]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let reason = mcp_support::unavailable_reasons(&catalog);
    assert!(
        reason.contains("401 Unauthorized") && reason.contains("`headers`"),
        "{reason}"
    );
    // Refused credentials are not retried (backoff would have retried
    // twice by now): the upstream saw one `initialize`.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let metrics = reqwest::Client::new()
        .get(upstream.url("/metrics"))
        .bearer_auth("a-long-key-0123456789")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused: Vec<&str> = metrics
        .lines()
        .filter(|l| l.contains("route=\"/mcp/{tool_set}\"") && l.contains("status=\"401\""))
        .collect();
    assert_eq!(refused.len(), 1, "{metrics}");
    assert!(refused[0].ends_with(" 1"), "{}", refused[0]);
    catalog.mcp().shutdown().await;

    // With the key in `headers`, the other gateway's set is a server like
    // any other: toolgate's MCP client on toolgate's MCP face.
    let yaml = format!(
        "mcp_servers:\n  - name: locked\n    transport: http\n    url: {}\n    headers: {{ Authorization: \"Bearer a-long-key-0123456789\" }}\n    tools: {{ prefix: l_ }}\n",
        upstream.url("/mcp/default")
    );
    let dir = ConfigDir::new(&[("tools.d/locked.yaml", &yaml)]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let r = call(&catalog, "l_calculator", json!({"expression": "6 * 7"})).await;
    assert_eq!(text(&r), "42");
    catalog.mcp().shutdown().await;
}

#[tokio::test]
async fn a_server_slow_to_answer_its_first_request_starts() {
    // A first `npx -y` run fetching its package: the server reads its
    // first request only after 11 s. Its answer to `server/discover` is
    // waited for, and `initialize` never goes on the same pipe before it.
    let Some((python, script)) = mcp_support::python_server() else {
        toolgate_tests::missing("the Python MCP test server is not installed; run `make setup`");
        return;
    };
    let yaml = format!(
        r#"mcp_servers:
  - name: slow
    transport: stdio
    command: /bin/sh
    args: ["-c", "sleep 11; exec {python} {script} stdio"]
    startup_timeout: 40s
    tools: {{ prefix: "slow_" }}
"#
    );
    let dir = ConfigDir::new(&[
        ("tools.d/slow.yaml", yaml.as_str()),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [\"slow_*\"]\n",
        ),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let r = call(&catalog, "slow_echo", json!({"message": "late but here"})).await;
    assert_eq!(text(&r), "late but here");
}
