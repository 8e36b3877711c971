//! MCP servers end to end, against real servers installed by `make setup`:
//! `@modelcontextprotocol/server-everything` (npm, stdio), `mcp-server-time`
//! (PyPI, stdio) and the Python SDK test server `tests/mcp/test_server.py`
//! (stdio and streamable HTTP on 127.0.0.1). Each test is skipped, with a
//! message, when its server is not installed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::mcp_support;

use std::time::Duration;

use crate::mcp_support::{
    HttpServer, call, eventually, everything, python_stdio_yaml, start, text, time_server,
};
use serde_json::{Value, json};
use toolgate::context::CallContext;
use toolgate_engine::executor::{Executor, ToolCall, http_client};
use toolgate_engine::tools::tool::ToolKind;
use toolgate_tests::{ConfigDir, Gateway, load_catalog};

fn everything_yaml(bin: &str, timeout: &str) -> String {
    format!(
        r#"mcp_servers:
  - name: everything
    transport: stdio
    command: {bin}
    args: [stdio]
    tools:
      include: [echo, get-sum, get-tiny-image, get-structured-content, trigger-long-running-operation]
      prefix: everything_
    timeout: {timeout}
"#
    )
}

#[tokio::test]
async fn everything_tools_are_listed_with_their_schemas_and_called() {
    let bin = require!(everything());
    let dir = ConfigDir::new(&[
        ("tools.d/everything.yaml", &everything_yaml(&bin, "10s")),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [\"everything_*\"]\n",
        ),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;

    // Only the included tools, prefixed.
    let mut names: Vec<String> = catalog.tools().map(|t| t.name.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "everything_echo",
            "everything_get-structured-content",
            "everything_get-sum",
            "everything_get-tiny-image",
            "everything_trigger-long-running-operation"
        ]
    );
    let echo = catalog.tool("everything_echo").unwrap();
    assert!(matches!(echo.kind, ToolKind::Mcp(_)));
    assert_eq!(echo.kind.label(), "mcp");
    assert_eq!(&*echo.description, "Echoes back the input string");
    assert_eq!(echo.parameters["properties"]["message"]["type"], "string");
    assert_eq!(echo.parameters["required"], json!(["message"]));

    let r = call(&catalog, "everything_echo", json!({"message": "hello"})).await;
    assert_eq!(text(&r), "Echo: hello");
    let r = call(&catalog, "everything_get-sum", json!({"a": 2, "b": 3})).await;
    assert_eq!(text(&r), "The sum of 2 and 3 is 5.");
    // Arguments are validated against the server's schema before the call.
    let r = call(&catalog, "everything_get-sum", json!({"a": "two"})).await;
    assert_eq!(r.error.unwrap().code(), "invalid_arguments");
    // structuredContent is the data; images are summarised.
    let r = call(
        &catalog,
        "everything_get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert!(r.success, "{:?}", r.error);
    assert!(r.data.unwrap()["temperature"].is_number());
    let r = call(&catalog, "everything_get-tiny-image", json!({})).await;
    let t = text(&r);
    assert!(t.contains("[image: image/png, "), "{t}");
    assert!(t.len() < 1000, "no base64 in the result: {t}");

    // Through the HTTP API too.
    let gw = Gateway::start(catalog).await;
    let listing: Value = reqwest::get(gw.url("/v1/tools?tool_set=default"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let data = listing["data"].as_array().unwrap();
    assert_eq!(data.len(), 5, "{listing}");
    let echo = data
        .iter()
        .find(|t| t["function"]["name"] == "everything_echo")
        .unwrap();
    assert_eq!(echo["toolgate"]["kind"], "mcp");
    assert_eq!(echo["toolgate"]["mcp"]["server"], "everything");
    assert_eq!(echo["toolgate"]["mcp"]["name"], "echo");
    assert_eq!(echo["toolgate"]["mcp"]["annotations"]["readOnlyHint"], true);
    let r: Value = reqwest::Client::new()
        .post(gw.url("/v1/tools/everything_echo/invoke"))
        .json(&json!({"arguments": {"message": "via api"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["data"], "Echo: via api", "{r}");
}

#[tokio::test]
async fn a_long_call_is_cut_by_the_timeout_and_the_session_survives() {
    let bin = require!(everything());
    let dir = ConfigDir::new(&[("tools.d/everything.yaml", &everything_yaml(&bin, "1s"))]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let r = call(
        &catalog,
        "everything_trigger-long-running-operation",
        json!({"duration": 30, "steps": 3}),
    )
    .await;
    let e = r.error.expect("the call must time out");
    assert_eq!(e.code(), "timeout", "{e}");
    // The same session still serves calls.
    let r = call(
        &catalog,
        "everything_echo",
        json!({"message": "still here"}),
    )
    .await;
    assert_eq!(text(&r), "Echo: still here");
    let report = &catalog.mcp().reports()[0];
    assert_eq!(report.status, "ready");
}

/// A served gateway runs each MCP server's session on its connection
/// threads, not on the runtime that started it: a call over a connection
/// already handed to a connection thread is answered while that runtime's
/// one thread is blocked (with the session there, it would wait for the
/// tool's timeout and answer with an error).
#[tokio::test]
async fn a_served_gateway_runs_each_mcp_session_on_its_connection_threads() {
    use std::io::Write;
    let bin = require!(everything());
    let dir = ConfigDir::new(&[("tools.d/everything.yaml", &everything_yaml(&bin, "10s"))]);
    let served = toolgate_tests::Served::start(dir.path(), &[]).await;
    let mut stream = std::net::TcpStream::connect(served.addr).unwrap();
    // A first request, whose answer starts to come while this runtime runs:
    // the listener has accepted the connection and handed it to a
    // connection thread.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .unwrap();
    stream.set_nonblocking(true).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match stream.peek(&mut [0u8; 1]) {
            Ok(0) => panic!("the gateway closed the connection"),
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no answer to /healthz"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // From here on this runtime's thread is blocked until each answer is read.
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let (status, _) = crate::serve::answer(&mut stream).expect("an answer to /healthz");
    assert_eq!(status, 200);
    let body = r#"{"arguments": {"message": "from another thread"}}"#;
    write!(
        stream,
        "POST /v1/tools/everything_echo/invoke HTTP/1.1\r\nhost: 127.0.0.1\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let (status, answer) = crate::serve::answer(&mut stream).expect("an answer to the call");
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("Echo: from another thread"), "{answer}");
}

#[tokio::test]
async fn one_session_serves_concurrent_calls() {
    let yaml = require!(python_stdio_yaml("py", "py_", ""));
    let dir = ConfigDir::new(&[("tools.d/py.yaml", &format!("mcp_servers:\n{yaml}"))]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let pid = text(&call(&catalog, "py_pid", json!({})).await);
    let calls: Vec<ToolCall> = (0..24)
        .map(|i| ToolCall {
            id: format!("c{i}"),
            name: "py_echo".into(),
            arguments: json!({"message": format!("m{i}")}),
        })
        .collect();
    let results = Executor::new(http_client().unwrap())
        .run_batch(&catalog, &calls, &CallContext::new())
        .await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(text(r), format!("m{i}"));
    }
    // Still the first process: no process (or session) per call.
    assert_eq!(text(&call(&catalog, "py_pid", json!({})).await), pid);
}

#[tokio::test]
async fn the_time_server_from_pypi() {
    let bin = require!(time_server());
    let yaml = format!(
        r#"mcp_servers:
  - name: time
    transport: stdio
    command: {bin}
    args: ["--local-timezone", "UTC"]
    tools: {{ prefix: time_ }}
"#
    );
    let dir = ConfigDir::new(&[("tools.d/time.yaml", &yaml)]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    assert!(catalog.tool("time_get_current_time").is_some());
    let r = call(
        &catalog,
        "time_convert_time",
        json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
    )
    .await;
    assert!(r.success, "{:?}", r.error);
    let data = r.data.unwrap();
    assert_eq!(data["target"]["timezone"], "Asia/Tokyo", "{data}");
    assert!(
        data["target"]["datetime"]
            .as_str()
            .unwrap()
            .contains("T21:00:00+09:00"),
        "{data}"
    );
    // Read-only but not cacheable unless the server declares `cache`.
    assert!(
        catalog
            .tool("time_get_current_time")
            .unwrap()
            .cache
            .is_none()
    );
    let r = call(
        &catalog,
        "time_get_current_time",
        json!({"timezone": "Nowhere/City"}),
    )
    .await;
    assert!(!r.success, "an unknown zone is an error result");
}

#[tokio::test]
async fn streamable_http_with_headers_from_the_environment() {
    let server = require!(HttpServer::start().await);
    let dir = ConfigDir::fixture(
        r#"
--- tools.d/remote.yaml
env:
  TEST_TOKEN: required
mcp_servers:
  - name: remote
    transport: http
    url: ${URL}
    headers:
      X-Test-Token: "tok-{{ env.TEST_TOKEN }}"
    tools: { prefix: "r_", exclude: [grow] }
"#,
        &[("URL", &server.url)],
    );
    let catalog = load_catalog(dir.path(), &[("TEST_TOKEN", "s3cret")]);
    start(&catalog).await;
    assert!(catalog.tool("r_grow").is_none(), "excluded");
    assert!(catalog.tool("r_echo").is_some());

    let r = call(&catalog, "r_header", json!({"name": "x-test-token"})).await;
    assert_eq!(text(&r), "tok-s3cret");
    let r = call(&catalog, "r_add", json!({"a": 2, "b": 3})).await;
    assert_eq!(
        r.data,
        Some(json!({"result": 5.0})),
        "structuredContent wins"
    );
    let r = call(&catalog, "r_fail", json!({"message": "bad input"})).await;
    let e = r.error.unwrap();
    assert_eq!(e.code(), "tool_error");
    assert!(e.to_string().contains("bad input"), "{e}");
    let t = text(&call(&catalog, "r_picture", json!({})).await);
    assert!(t.starts_with("a tiny picture\n[image: image/png, "), "{t}");
    assert!(t.ends_with(" bytes]"), "{t}");
    let t = text(&call(&catalog, "r_document", json!({})).await);
    assert!(
        t.starts_with("[resource memo://document, text/plain, 1200 characters]\nlorem ipsum"),
        "{t}"
    );
    assert!(t.len() < 400, "{t}");
    // The header value (a secret) never shows in the catalog's debug form.
    assert!(!format!("{catalog:?}").contains("s3cret"));
}

/// `headers` that read `request.key` / `request.project` /
/// `request.subject` / `request.claims` are rendered for each call: an
/// upstream server over HTTP can authorise per caller.
#[tokio::test]
async fn headers_can_name_the_caller_per_call() {
    let server = require!(HttpServer::start().await);
    let yaml = format!(
        r#"env: {{ STATIC_TOKEN: required }}
mcp_servers:
  - name: remote
    transport: http
    url: {}
    headers:
      X-Caller: "{{{{ request.key }}}}"
      X-Caller-Project: "{{{{ request.project }}}}"
      X-Both: "{{{{ env.STATIC_TOKEN }}}}:{{{{ request.key }}}}"
      X-Static: "{{{{ env.STATIC_TOKEN }}}}"
      X-Subject: "{{{{ request.subject }}}}"
      X-Email: "{{{{ request.claims.email }}}}"
    cache: {{ ttl: 1m }}
"#,
        server.url
    );
    let dir = ConfigDir::new(&[("tools.d/remote.yaml", &yaml)]);
    let catalog = load_catalog(dir.path(), &[("STATIC_TOKEN", "tok")]);
    start(&catalog).await;
    let executor = Executor::new(http_client().unwrap());
    // The header `name` as the server received it from a call in `ctx`.
    let seen = |ctx: CallContext, name: &str| {
        let call = ToolCall {
            id: "t".into(),
            name: "header".into(),
            arguments: json!({ "name": name }),
        };
        let executor = executor.clone();
        let catalog = &catalog;
        async move { text(&executor.run(catalog, &call, &ctx).await) }
    };
    let header = |key: Option<&str>, project: Option<&str>, name: &str| {
        let ctx = CallContext::new()
            .with_key(key.map(str::to_owned))
            .with_project(project.map(str::to_owned))
            .unwrap();
        seen(ctx, name)
    };
    assert_eq!(header(Some("alice"), None, "x-caller").await, "alice");
    // `header` is read-only and the server's results are cached: per
    // caller, since the server is told who calls.
    assert_eq!(header(Some("bob"), None, "x-caller").await, "bob");
    assert_eq!(header(Some("alice"), None, "x-caller").await, "alice");
    assert_eq!(header(Some("bob"), Some("p1"), "x-caller").await, "bob");
    assert_eq!(
        header(Some("bob"), Some("p1"), "x-caller-project").await,
        "p1"
    );
    assert_eq!(header(Some("bob"), None, "x-both").await, "tok:bob");
    assert_eq!(header(Some("bob"), None, "x-static").await, "tok");
    // No key (an open gateway): the header renders empty and is left out.
    assert_eq!(header(None, None, "x-caller").await, "");
    // Who calls, and their token's claims: per subject, under one key.
    let as_person = |subject: &str, name: &str| {
        let ctx = CallContext::new()
            .with_key(Some("team".into()))
            .with_subject(
                Some(subject.to_owned()),
                Some(std::sync::Arc::new(
                    json!({"email": format!("{subject}@example.test")}),
                )),
            );
        seen(ctx, name)
    };
    assert_eq!(as_person("carol", "x-subject").await, "carol");
    assert_eq!(
        as_person("dave", "x-subject").await,
        "dave",
        "cached per subject"
    );
    assert_eq!(as_person("carol", "x-email").await, "carol@example.test");
    assert_eq!(
        header(Some("bob"), None, "x-email").await,
        "",
        "no token, no claim"
    );
    // The server never sees how the headers travel to the HTTP client.
    let ctx = CallContext::new().with_key(Some("alice".into()));
    let call = ToolCall {
        id: "t".into(),
        name: "meta".into(),
        arguments: json!({ "name": "io.toolgate/caller-headers" }),
    };
    assert_eq!(text(&executor.run(&catalog, &call, &ctx).await), "");
}

#[tokio::test]
async fn a_timed_out_call_is_cancelled_on_the_server() {
    let server = require!(HttpServer::start().await);
    let yaml = format!(
        "mcp_servers:\n  - name: remote\n    transport: http\n    url: {}\n    timeout: 500ms\n",
        server.url
    );
    let dir = ConfigDir::new(&[("tools.d/remote.yaml", &yaml)]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let r = call(&catalog, "sleep", json!({"seconds": 30})).await;
    let e = r.error.unwrap();
    assert_eq!(e.code(), "timeout", "{e}");
    // The server saw `notifications/cancelled` and stopped the call.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let n = text(&call(&catalog, "cancelled", json!({})).await);
        if n == "1" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server never saw the cancellation (count {n})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn tools_are_listed_again_when_the_server_says_they_changed() {
    let yaml = require!(python_stdio_yaml("py", "py_", ""));
    let dir = ConfigDir::new(&[
        ("tools.d/py.yaml", &format!("mcp_servers:\n{yaml}")),
        ("tool-sets/s.yaml", "name: s\ntools: [\"py_*\"]\n"),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    assert!(catalog.tool("py_late").is_none());
    assert_eq!(text(&call(&catalog, "py_grow", json!({})).await), "grown");
    eventually("the new tool is listed", || {
        catalog.tool("py_late").is_some()
    })
    .await;
    assert_eq!(
        text(&call(&catalog, "py_late", json!({})).await),
        "late tool"
    );
    let set = catalog.set("s").unwrap();
    assert!(catalog.tools_in(set, None).any(|t| t.name == "py_late"));
}

#[tokio::test]
async fn read_only_tools_are_cached_only_when_the_server_asks_for_it() {
    let cached = require!(python_stdio_yaml("a", "a_", "    cache: { ttl: 1m }\n"));
    let plain = python_stdio_yaml("b", "b_", "").unwrap();
    let dir = ConfigDir::new(&[("tools.d/py.yaml", &format!("mcp_servers:\n{cached}{plain}"))]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    // `counter` is readOnlyHint: cached on `a`; `echo` is not: never cached.
    let first = call(&catalog, "a_counter", json!({})).await;
    let second = call(&catalog, "a_counter", json!({})).await;
    assert!(!first.cached && second.cached);
    assert_eq!(first.data, second.data);
    let e1 = call(&catalog, "a_echo", json!({"message": "x"})).await;
    let e2 = call(&catalog, "a_echo", json!({"message": "x"})).await;
    assert!(!e1.cached && !e2.cached);
    assert!(catalog.tool("a_echo").unwrap().cache.is_none());
    // Without `cache`, read-only tools run every time.
    let first = call(&catalog, "b_counter", json!({})).await;
    let second = call(&catalog, "b_counter", json!({})).await;
    assert!(!second.cached);
    assert_ne!(first.data, second.data);
}

#[tokio::test]
async fn stdio_servers_get_their_env_and_cwd_and_not_the_gateway_environment() {
    let (python, script) = require!(mcp_support::python_server());
    let dir = ConfigDir::fixture(
        r#"
--- tools.d/py.yaml
env:
  GREETING: optional
mcp_servers:
  - name: py
    transport: stdio
    command: ${PYTHON}
    args: ["${SCRIPT}", "stdio"]
    env:
      SERVER_GREETING: "{{ env.GREETING }} from the gateway"
    cwd: work
    tools: { prefix: py_ }
--- work/.keep
"#,
        &[("PYTHON", &python), ("SCRIPT", &script)],
    );
    let catalog = load_catalog(dir.path(), &[("GREETING", "hello")]);
    start(&catalog).await;
    let t = text(&call(&catalog, "py_getenv", json!({"name": "SERVER_GREETING"})).await);
    assert_eq!(t, "hello from the gateway");
    let cwd = text(&call(&catalog, "py_cwd", json!({})).await);
    assert_eq!(
        std::fs::canonicalize(cwd).unwrap(),
        std::fs::canonicalize(dir.path().join("work")).unwrap()
    );
    // A variable of the gateway's own environment that is not declared.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let t = text(&call(&catalog, "py_getenv", json!({"name": "CARGO_MANIFEST_DIR"})).await);
    assert_eq!(t, "<unset>");
    assert_ne!(
        text(&call(&catalog, "py_getenv", json!({"name": "PATH"})).await),
        "<unset>"
    );
}

#[tokio::test]
async fn names_that_collide_or_are_too_long_are_reported_not_overwritten() {
    let prefix = "p".repeat(58);
    let long = require!(python_stdio_yaml("long", &prefix, ""));
    let plain = python_stdio_yaml("py", "py_", "").unwrap();
    let http = "tools:\n  - name: py_echo\n    description: An HTTP tool.\n    http: { url: \"http://127.0.0.1:9/x\" }\n";
    let dir = ConfigDir::new(&[
        ("tools.d/a_http.yaml", http),
        (
            "tools.d/b_mcp.yaml",
            &format!("mcp_servers:\n{long}{plain}"),
        ),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    // The declared HTTP tool keeps its name; the server's is unavailable.
    assert!(matches!(
        catalog.tool("py_echo").unwrap().kind,
        ToolKind::Http(_)
    ));
    let u = catalog.unavailable_tool("py_echo").unwrap();
    assert!(
        u.reason.contains("collides with the tool `py_echo`"),
        "{}",
        u.reason
    );
    // 58 + "pid" fits in 64; 58 + "cancelled" does not.
    assert!(catalog.tool(&format!("{prefix}pid")).is_some());
    let too_long = format!("{prefix}cancelled");
    assert!(catalog.tool(&too_long).is_none());
    let u = catalog.unavailable_tool(&too_long).unwrap();
    assert!(u.reason.contains("over the limit of 64"), "{}", u.reason);
    let reports = catalog.mcp().reports();
    assert!(
        !reports[1].is_ok(),
        "the collision is a problem for check --connect"
    );
}

/// A gateway whose default set `mcp` holds `tools` (YAML) of npm's
/// server-everything, in front of the scripted model.
async fn chat_gateway(
    bin: &str,
    tools: &str,
) -> (toolgate_tests::mock_llm::MockLlm, Gateway, ConfigDir) {
    chat_gateway_of(&everything_yaml(bin, "10s"), tools).await
}

/// A gateway whose default set `mcp` holds `tools` of the `servers`
/// (YAML), in front of the scripted model.
async fn chat_gateway_of(
    servers: &str,
    tools: &str,
) -> (toolgate_tests::mock_llm::MockLlm, Gateway, ConfigDir) {
    let model = toolgate_tests::mock_llm::MockLlm::start().await;
    let gateway_yaml = format!(
        "defaults:\n  tool_set: mcp\nupstreams:\n  - name: mock\n    base_url: {}\n",
        model.base_url()
    );
    let set = format!("name: mcp\ntools: {tools}\n");
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml),
        ("tools.d/everything.yaml", servers),
        ("tool-sets/mcp.yaml", &set),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    (model, Gateway::start(catalog).await, dir)
}

#[tokio::test]
async fn an_mcp_tool_in_the_chat_loop() {
    let bin = require!(everything());
    let (model, gw, _dir) = chat_gateway(&bin, "[everything_echo, \"everything_get-*\"]").await;
    let body = gw
        .chat("call everything_echo {\"message\": \"hi\"} call everything_get-sum {\"a\": 1, \"b\": 2}")
        .await;
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [everything_echo] Echo: hi | [everything_get-sum] The sum of 1 and 2 is 3.",
        "{body}"
    );
    // The model was offered the set's MCP tools, with their schemas.
    let mut offered: Vec<String> = model.requests()[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    offered.sort();
    assert_eq!(
        offered,
        [
            "everything_echo",
            "everything_get-structured-content",
            "everything_get-sum",
            "everything_get-tiny-image"
        ]
    );
}

/// An MCP tool's progress reports reach a streamed chat completion as SSE
/// comments (which OpenAI clients skip), before the answer.
#[tokio::test]
async fn an_mcp_tools_progress_reaches_a_streamed_chat_completion() {
    let bin = require!(everything());
    let (_model, gw, _dir) =
        chat_gateway(&bin, "[everything_trigger-long-running-operation]").await;
    let text = reqwest::Client::new()
        .post(gw.url("/v1/chat/completions"))
        .json(&json!({
            "model": "mock-model",
            "stream": true,
            "messages": [{"role": "user", "content": "call everything_trigger-long-running-operation {\"duration\": 1, \"steps\": 3}"}]
        }))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let reports: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix(": toolgate.progress "))
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    assert_eq!(reports.len(), 3, "{text}");
    for (i, r) in reports.iter().enumerate() {
        assert_eq!(r["tool"], "everything_trigger-long-running-operation");
        assert_eq!(r["progress"].as_f64(), Some((i + 1) as f64));
        assert_eq!(r["total"].as_f64(), Some(3.0));
        assert!(r["call_id"].as_str().is_some_and(|id| !id.is_empty()));
    }
    // The comments come before the answer, which is whole.
    let first_report = text.find(": toolgate.progress").unwrap();
    let answer = text.rfind("\"content\":").unwrap();
    assert!(first_report < answer);
    assert!(text.trim_end().ends_with("data: [DONE]"));
}

#[tokio::test]
async fn base64_in_structured_content_never_reaches_the_model() {
    // server-filesystem's `read_media_file` puts the image inside
    // `structuredContent`: its base64 must be summarised there too.
    let bin = require!(mcp_support::filesystem());
    let files = tempfile::tempdir().unwrap();
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    png.extend((0..30_000u32).map(|i| (i % 251) as u8));
    let path = files.path().join("picture.png");
    std::fs::write(&path, &png).unwrap();
    let yaml = format!(
        "mcp_servers:\n  - name: fs\n    transport: stdio\n    command: {bin}\n    args: [{}]\n    tools: {{ include: [read_media_file], prefix: fs_ }}\n",
        files.path().display()
    );
    let dir = ConfigDir::new(&[
        ("tools.d/fs.yaml", yaml.as_str()),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [fs_read_media_file]\n",
        ),
    ]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    let result = call(
        &catalog,
        "fs_read_media_file",
        json!({"path": path.display().to_string()}),
    )
    .await;
    assert!(result.success, "{:?}", result.error);
    let data = result.data.unwrap().to_string();
    assert!(
        data.len() < 2_000,
        "{} characters reached the model: {data:.300}",
        data.len()
    );
    assert!(
        data.contains("[binary data: image/png, 30008 bytes]"),
        "{data}"
    );
    // The MCP face still gets the server's result as it was.
    let upstream = result.mcp_result.expect("the server's result is kept");
    assert!(upstream.to_string().len() > 40_000);
    catalog.mcp().shutdown().await;
}

/// server-everything asks for a model's answer (sampling) in the middle of
/// a call made by the chat loop, where no client can answer: with
/// `sampling: {model}` the gateway's own model answers (one chat
/// completion without tools, within `max_tokens`); without it the call
/// fails, saying why.
#[tokio::test]
async fn the_gateway_s_model_answers_a_server_s_sampling_request_when_its_declaration_allows() {
    let bin = require!(everything());
    for allowed in [true, false] {
        let sampling = if allowed {
            "    sampling: { model: mock-model, max_tokens: 64 }\n"
        } else {
            ""
        };
        let servers = format!(
            "mcp_servers:\n  - name: everything\n    transport: stdio\n    command: {bin}\n    args: [stdio]\n    tools:\n      include: [trigger-sampling-request]\n      prefix: everything_\n{sampling}"
        );
        let (model, gw, _dir) = chat_gateway_of(&servers, "[\"everything_*\"]").await;
        let body = gw
            .chat("call everything_trigger-sampling-request {\"prompt\": \"Say hello\", \"maxTokens\": 500}")
            .await;
        let call = &body["toolgate"]["tool_calls"][0];
        let requests = model.requests();
        let asked: Vec<&Value> = requests
            .iter()
            .filter(|r| r["messages"].to_string().contains("Say hello") && r.get("tools").is_none())
            .collect();
        if allowed {
            assert_eq!(call["success"], true, "{body}");
            assert!(
                call["result"].to_string().contains("LLM sampling result"),
                "{call}"
            );
            assert_eq!(
                asked.len(),
                1,
                "one chat completion for the sampling request: {requests:?}"
            );
            assert_eq!(asked[0]["max_tokens"], 64, "the declaration's cap");
            assert_eq!(asked[0]["model"], "mock-model");
            // Its spend is counted with the request's: three model calls
            // (the loop's two and the sampling one), each with its tokens.
            let spend: Value = reqwest::get(gw.url("/v1/spend?group_by=model"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let row = &spend["data"][0];
            assert_eq!(row["model_calls"], 3, "{spend}");
            assert!(row["input_tokens"].as_i64().unwrap() > 0, "{spend}");
        } else {
            assert_eq!(call["success"], false, "{body}");
            assert!(call.to_string().contains("sampling"), "{call}");
            assert!(asked.is_empty(), "{requests:?}");
        }
    }
}
