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

/// The `THP_enabled` line of a process's status: whether the kernel may
/// back its memory with transparent huge pages.
fn huge_pages_allowed(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("THP_enabled:"))
        .expect("the kernel reports THP_enabled");
    line.trim() == "1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_runs_without_huge_pages_unless_the_allocator_is_told_otherwise() {
    let dir = ConfigDir::new(&[("toolgate.yaml", "reload: { watch: false }\n")]);
    // The switch is inherited: this process allows them, so that what the
    // server says is the server's own doing.
    nix::sys::prctl::set_thp_disable(false).unwrap();
    assert!(huge_pages_allowed(std::process::id()));
    let server = Server::start(dir.path(), &[]).await;
    assert!(!huge_pages_allowed(server.child.id()));
    let asked = Server::start(dir.path(), &[("MIMALLOC_ALLOW_THP", "1")]).await;
    assert!(huge_pages_allowed(asked.child.id()));
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

/// One HTTP/1 answer read off `s`: its status and body (by
/// `Content-Length`); `None` when the server closed the connection first.
pub(crate) fn answer(s: &mut std::net::TcpStream) -> Option<(u16, String)> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(0) => return None,
            Ok(_) => head.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading an answer: {e} (after {head:?})"),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head[9..12].parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// HTTP/1 keep-alive as clients use it. Between requests a connection
/// holds its socket and nothing of hyper's (`server::idle`), so each of
/// these crosses that point: a pause between requests, requests sent
/// together, a request's head split by a pause, a body the route does not
/// read, an upgrade on a connection that has served a request, and a quiet
/// connection closed after `limits.header_timeout`.
#[tokio::test]
async fn a_keep_alive_connection_is_served_across_pauses_pipelining_and_upgrades() {
    use std::io::{Read, Write};
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[(
        "toolgate.yaml",
        &format!(
            "upstreams:\n  - name: mock\n    base_url: {}\nlimits:\n  header_timeout: 2s\n",
            model.base_url()
        ),
    )]);
    let server = Server::start(dir.path(), &[]).await;
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || {
        let get = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let pause = || std::thread::sleep(Duration::from_millis(300));
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(get).unwrap();
        assert_eq!(answer(&mut s).unwrap().0, 200, "first");
        pause();
        s.write_all(get).unwrap();
        assert_eq!(answer(&mut s).unwrap().0, 200, "after a pause");
        // Two requests in one write, then three.
        s.write_all(&get.repeat(2)).unwrap();
        for i in 0..2 {
            assert_eq!(answer(&mut s).unwrap().0, 200, "pipelined {i}");
        }
        s.write_all(&get.repeat(3)).unwrap();
        for i in 0..3 {
            assert_eq!(answer(&mut s).unwrap().0, 200, "pipelined {i} of 3");
        }
        // A head split by a pause.
        s.write_all(b"GET /healthz HTTP/1.1\r\nHo").unwrap();
        pause();
        s.write_all(b"st: localhost\r\n\r\n").unwrap();
        assert_eq!(answer(&mut s).unwrap().0, 200, "a split head");
        // A body the route never reads, arriving after its answer: its
        // bytes are not a request.
        s.write_all(b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 24\r\n\r\n")
            .unwrap();
        let (status, _) = answer(&mut s).unwrap();
        assert!(matches!(status, 405 | 415), "a POST to /healthz: {status}");
        pause();
        // (Writes may fail here: hyper closes rather than wait for a body
        // nobody reads.)
        let _ = s.write_all(b"GET /nowhere HTTP/1.1\r\n\r\n");
        pause();
        let _ = s.write_all(get);
        match answer(&mut s) {
            Some((status, _)) => assert_eq!(status, 200, "after an unread body"),
            None => {
                // hyper may close rather than drain: then a new connection.
                s = std::net::TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            }
        }
        // An upgrade on a connection that has served a request: the
        // WebSocket answers a ping.
        s.write_all(get).unwrap();
        assert_eq!(answer(&mut s).unwrap().0, 200);
        pause();
        s.write_all(
            b"GET /v1/responses HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
              Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .unwrap();
        let (status, _) = answer(&mut s).unwrap();
        assert_eq!(status, 101, "the upgrade");
        let mask = [1u8, 2, 3, 4];
        let mut ping = vec![0x89, 0x84];
        ping.extend_from_slice(&mask);
        ping.extend(b"ping".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
        s.write_all(&ping).unwrap();
        let mut pong = [0u8; 6];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"\x8a\x04ping", "the WebSocket's pong");
        // A connection that stays quiet after its request is closed.
        let mut quiet = std::net::TcpStream::connect(&addr).unwrap();
        quiet.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        quiet.write_all(get).unwrap();
        assert_eq!(answer(&mut quiet).unwrap().0, 200);
        let started = std::time::Instant::now();
        let mut rest = Vec::new();
        quiet
            .read_to_end(&mut rest)
            .expect("an idle connection is closed");
        assert!(rest.is_empty(), "{rest:?}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
    })
    .await
    .unwrap();
}
