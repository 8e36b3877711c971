//! `toolgate serve` as a process: graceful shutdown with a stream in
//! flight, reload errors in the logs, SIGHUP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{Backend, ConfigDir, Server, write_atomically};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_stream_in_flight_finish_and_flushes_the_audit_log() {
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        (
            "toolgate.yaml",
            &format!(
                "upstreams:\n  - name: mock\n    base_url: {}\naudit: {{ path: audit.jsonl }}\nshutdown: {{ grace: 60s }}\n",
                model.base_url()
            ),
        ),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look something up."),
        ),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ]);
    let mut server = Server::start(dir.path(), &[]).await;

    // The first model call answers before the response starts; the second
    // (after the tool) takes a second, so the stream is open meanwhile.
    let resp = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({
            "model": "mock-model",
            "stream": true,
            "messages": [{"role": "user", "content": "call lookup {\"q\": \"in flight\"} [[mock:latency=1000]]"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    server.signal(Signal::SIGTERM);
    server.logged("shutting down").await;
    // No new connections once shutting down...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&server.addr).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "still accepting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ... while the stream in flight completes.
    let text = resp.text().await.unwrap();
    let mut content = String::new();
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap();
        assert!(v.get("error").is_none(), "{v}");
        if let Some(c) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            content.push_str(c);
        }
    }
    assert!(text.contains("data: [DONE]"), "{text}");
    assert_eq!(content, "Tool results: [lookup] in flight");

    assert_eq!(server.exited().await, 0);
    server.logged("audit log flushed").await;
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let line: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    assert_eq!(line["tool"], "lookup");
    assert_eq!(line["outcome"], "ok");
    assert_eq!(line["tool_set"], "default");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_change_is_logged_with_its_position_and_the_old_tools_keep_working() {
    let backend = Backend::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", "reload: { debounce: 100ms }\n"),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look something up."),
        ),
    ]);
    let server = Server::start(dir.path(), &[]).await;
    write_atomically(
        dir.path(),
        "tools.d/a.yaml",
        &toolgate_tests::lookup_tool(&backend, "look up", "Look something up."),
    );
    let line = server
        .logged("tools.d/a.yaml:2:11: error: tool name \"look up\" is invalid")
        .await;
    assert!(line.contains("ERROR"), "{line}");
    server.logged("still serving version 1").await;
    let (status, body) = server.invoke("lookup", json!({"q": "old"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], "old");
    assert_eq!(server.version().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_configuration() {
    let backend = Backend::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", "reload: { watch: false }\n"),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look something up."),
        ),
    ]);
    let server = Server::start(dir.path(), &[]).await;
    write_atomically(
        dir.path(),
        "tools.d/b.yaml",
        &toolgate_tests::lookup_tool(&backend, "added", "Look something up."),
    );
    server.signal(Signal::SIGHUP);
    server.logged("configuration reloaded").await;
    assert_eq!(server.version().await, 2);
    let (status, body) = server.invoke("added", json!({"q": "new"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], "new");
}
