//! `toolgate serve` as a process: graceful shutdown with a stream in
//! flight, reload errors in the logs, SIGHUP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{Backend, ConfigDir, toolgate_bin, write_atomically};

/// A running `toolgate serve` and what it logged so far.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(dir: &Path) -> Server {
        let mut child = Command::new(toolgate_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(dir)
            .env("TOOLGATE_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                lines.lock().unwrap().push(line);
            }
        });
        let mut server = Server {
            child,
            addr: String::new(),
            log,
        };
        let line = server.logged("listening on http://").await;
        let at = line.find("listening on http://").unwrap();
        server.addr = line[at + "listening on http://".len()..].trim().to_owned();
        server
    }

    /// Waits (at most 30 s) for a log line containing `text`.
    async fn logged(&self, text: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(text)) {
                return l.clone();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no log line contains {text:?}:\n{}",
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
    }

    /// Waits (at most 60 s) for the process to exit; its exit code.
    async fn exited(&mut self) -> i32 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the gateway did not exit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn invoke(&self, tool: &str, args: Value) -> (u16, Value) {
        let r = reqwest::Client::new()
            .post(self.url(&format!("/v1/tools/{tool}/invoke")))
            .json(&json!({ "arguments": args }))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    async fn version(&self) -> u64 {
        let h: Value = reqwest::get(self.url("/healthz"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        h["catalog"]["version"].as_u64().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lookup_yaml(backend: &Backend, name: &str) -> String {
    format!(
        r#"tools:
  - name: {name}
    description: Look something up.
    parameters:
      type: object
      properties:
        q: {{ type: string }}
      required: [q]
    http:
      url: "{base}/echo/{name}"
      query: {{ q: "{{{{ args.q }}}}" }}
    response:
      select: /params/q
"#,
        base = backend.url()
    )
}

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
        ("tools.d/a.yaml", &lookup_yaml(&backend, "lookup")),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ]);
    let mut server = Server::start(dir.path()).await;

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
        ("tools.d/a.yaml", &lookup_yaml(&backend, "lookup")),
    ]);
    let server = Server::start(dir.path()).await;
    write_atomically(
        dir.path(),
        "tools.d/a.yaml",
        &lookup_yaml(&backend, "look up"),
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
        ("tools.d/a.yaml", &lookup_yaml(&backend, "lookup")),
    ]);
    let server = Server::start(dir.path()).await;
    write_atomically(
        dir.path(),
        "tools.d/b.yaml",
        &lookup_yaml(&backend, "added"),
    );
    server.signal(Signal::SIGHUP);
    server.logged("configuration reloaded").await;
    assert_eq!(server.version().await, 2);
    let (status, body) = server.invoke("added", json!({"q": "new"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"], "new");
}
