//! Routes of several targets: requests shared by weight, failover on what
//! another deployment may not share (429, 5xx, a reset connection) and
//! never on a refused request or once an answer has begun, cooldowns, and
//! a conversation's follow-ups going to the deployment that made its
//! encrypted reasoning.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use toolgate_tests::fakes::Brain;
use toolgate_tests::fakes::openai_responses::FakeResponses;
use toolgate_tests::{ConfigDir, Gateway, load_catalog, repo_root};

/// What a deployment does with the requests it gets.
#[derive(Debug, Clone, PartialEq)]
enum Behaviour {
    Answer,
    /// An error status, with `Retry-After` seconds.
    Status(u16, Option<u64>),
    /// The connection closed without an answer.
    Reset,
    /// A stream's head and first event, then the connection closed.
    BreakMidStream,
}

/// A chat-completions deployment written by hand over TCP, so that it can
/// fail in every way a real one does.
struct Deployment {
    name: String,
    addr: std::net::SocketAddr,
    behaviour: Arc<Mutex<Behaviour>>,
    hits: Arc<AtomicUsize>,
}

impl Deployment {
    async fn start(name: &str) -> Deployment {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let behaviour = Arc::new(Mutex::new(Behaviour::Answer));
        let hits = Arc::new(AtomicUsize::new(0));
        let (b, h, n) = (Arc::clone(&behaviour), Arc::clone(&hits), name.to_owned());
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (b, h, n) = (Arc::clone(&b), Arc::clone(&h), n.clone());
                tokio::spawn(async move { serve(socket, &b, &h, &n).await });
            }
        });
        Deployment {
            name: name.to_owned(),
            addr,
            behaviour,
            hits,
        }
    }

    fn set(&self, b: Behaviour) {
        *self.behaviour.lock().unwrap() = b;
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

/// One request's head and body off `socket` (keep-alive: several in turn).
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&buf[head_end..head_end + length]).ok()
}

async fn serve(
    mut socket: tokio::net::TcpStream,
    behaviour: &Mutex<Behaviour>,
    hits: &AtomicUsize,
    name: &str,
) {
    while let Some(body) = read_request(&mut socket).await {
        hits.fetch_add(1, Ordering::SeqCst);
        let b = behaviour.lock().unwrap().clone();
        let stream = body["stream"] == json!(true);
        let text = format!("answered by {name}");
        let reply = match b {
            Behaviour::Reset => return,
            Behaviour::Status(code, retry_after) => {
                let body = json!({"error": {"message": format!("{name} says {code}"), "type": "server_error"}}).to_string();
                let ra = retry_after
                    .map(|s| format!("retry-after: {s}\r\n"))
                    .unwrap_or_default();
                format!(
                    "HTTP/1.1 {code} Status\r\ncontent-type: application/json\r\n{ra}content-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
            Behaviour::BreakMidStream => {
                let first = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": "partial "}, "finish_reason": null}]});
                let _ = socket
                    .write_all(format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {first}\n\n").as_bytes())
                    .await;
                let _ = socket.flush().await;
                return;
            }
            Behaviour::Answer if stream => {
                let chunk = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
                let end = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
                let events = format!("data: {chunk}\n\ndata: {end}\n\ndata: [DONE]\n\n");
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
                    events.len()
                )
            }
            Behaviour::Answer => {
                let body = json!({"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
                .to_string();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        };
        if socket.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A gateway whose model `m` has the targets `targets` (YAML), over the
/// deployments given (each an upstream of its name).
async fn gateway(deployments: &[&Deployment], targets: &str) -> (Gateway, ConfigDir) {
    let mut upstreams = String::new();
    for d in deployments {
        upstreams.push_str(&format!(
            "  - name: {}\n    base_url: {}\n    retries: {{max_attempts: 3, initial_backoff: 10ms, max_backoff: 50ms}}\n",
            d.name,
            d.base_url()
        ));
    }
    let config = format!(
        "--- toolgate.yaml\nupstreams:\n{upstreams}models:\n  - model: m\n    targets:\n{targets}"
    );
    let dir = ConfigDir::fixture(&config, &[]);
    (Gateway::start(load_catalog(dir.path(), &[])).await, dir)
}

/// A chat completion of `m` (streamed or not): status, attempts header,
/// and the body's text.
async fn ask(gateway: &Gateway, stream: bool) -> (u16, String, String) {
    let resp = reqwest::Client::new()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let attempts = resp
        .headers()
        .get("x-toolgate-attempts")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, attempts, resp.text().await.unwrap())
}

#[tokio::test]
async fn weights_of_three_to_one_share_ten_thousand_requests_three_to_one() {
    let (a, b) = (Deployment::start("a").await, Deployment::start("b").await);
    let (gw, _dir) = gateway(
        &[&a, &b],
        "      - {upstream: a, weight: 3}\n      - {upstream: b, weight: 1}\n",
    )
    .await;
    let gw = Arc::new(gw);
    let n = 10_000;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (gw, next) = (Arc::clone(&gw), Arc::clone(&next));
        workers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while next.fetch_add(1, Ordering::SeqCst) < n {
                let resp = client
                    .post(gw.url("/v1/chat/completions"))
                    .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200);
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    assert_eq!(a.hits() + b.hits(), n);
    let share = a.hits() as f64 / n as f64;
    assert!(
        (0.73..=0.77).contains(&share),
        "a got {} of {n} ({share})",
        a.hits()
    );
}

#[tokio::test]
async fn a_rate_limited_failing_or_unreachable_target_fails_over_to_the_next() {
    for (fault, code) in [
        (Behaviour::Status(429, None), "upstream_rate_limited"),
        (Behaviour::Status(503, None), "upstream_unavailable"),
        (Behaviour::Status(500, None), "upstream_error"),
        (Behaviour::Reset, "upstream_unreachable"),
    ] {
        let (a, b) = (Deployment::start("a").await, Deployment::start("b").await);
        a.set(fault.clone());
        let (gw, _dir) = gateway(
            &[&a, &b],
            "      - {upstream: a}\n      - {upstream: b, priority: 1}\n",
        )
        .await;
        for stream in [false, true] {
            let (status, attempts, text) = ask(&gw, stream).await;
            assert_eq!(status, 200, "{fault:?}: {text}");
            assert!(text.contains("answered by b"), "{fault:?}: {text}");
            assert_eq!(attempts, format!("a/m={code}, b/m=ok"), "{fault:?}");
        }
        // Each target tried once per request (no retry of a on its own).
        assert_eq!((a.hits(), b.hits()), (2, 2), "{fault:?}");
    }
}

#[tokio::test]
async fn a_refused_request_and_a_broken_stream_do_not_fail_over() {
    let (a, b) = (Deployment::start("a").await, Deployment::start("b").await);
    a.set(Behaviour::Status(400, None));
    let (gw, _dir) = gateway(
        &[&a, &b],
        "      - {upstream: a}\n      - {upstream: b, priority: 1}\n",
    )
    .await;
    let (status, attempts, text) = ask(&gw, false).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("a says 400"), "{text}");
    assert_eq!(attempts, "");
    assert_eq!(b.hits(), 0);

    // An answer that began and broke: the client sees it break; nothing
    // is sent again elsewhere (the words it had would be said twice).
    a.set(Behaviour::BreakMidStream);
    let (status, attempts, text) = ask(&gw, true).await;
    assert_eq!(status, 200);
    assert_eq!(attempts, "a/m=ok");
    assert!(text.contains("partial"), "{text}");
    assert!(
        text.contains("error"),
        "the stream ends with an error: {text}"
    );
    assert_eq!(b.hits(), 0);
}

#[tokio::test]
async fn three_failures_in_a_row_or_a_retry_after_cool_a_target_down() {
    let (a, b) = (Deployment::start("a").await, Deployment::start("b").await);
    a.set(Behaviour::Status(503, None));
    let (gw, _dir) = gateway(
        &[&a, &b],
        "      - {upstream: a}\n      - {upstream: b, priority: 1}\n    cooldown: {failures: 3, duration: 1s}\n",
    )
    .await;
    for _ in 0..3 {
        assert_eq!(ask(&gw, false).await.1, "a/m=upstream_unavailable, b/m=ok");
    }
    // Cooling down: b first, a not tried.
    assert_eq!(ask(&gw, false).await.1, "b/m=ok");
    assert_eq!(a.hits(), 3);
    // The cooldown over, a is tried again (and answers).
    a.set(Behaviour::Answer);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(ask(&gw, false).await.1, "a/m=ok");

    // A 429 with Retry-After cools it down at once, for that long.
    a.set(Behaviour::Status(429, Some(1)));
    assert_eq!(ask(&gw, false).await.1, "a/m=upstream_rate_limited, b/m=ok");
    assert_eq!(ask(&gw, false).await.1, "b/m=ok");
    a.set(Behaviour::Answer);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(ask(&gw, false).await.1, "a/m=ok");
}

/// The first messages and tools of the Codex request of the face fixtures.
fn codex_request() -> Value {
    let text =
        std::fs::read_to_string(repo_root().join("tests/fixtures/faces/responses-codex.json"))
            .unwrap();
    let mut body: Value = serde_json::from_str(&text).unwrap();
    let first: Vec<Value> = body["input"].as_array().unwrap()[..4].to_vec();
    body["input"] = json!(first);
    body["model"] = json!("codex");
    body["stream"] = json!(true);
    body
}

/// The output of a streamed Responses answer (its `response.completed`).
fn completed_output(sse: &str) -> Vec<Value> {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|e| e["type"] == "response.completed")
        .and_then(|e| e["response"]["output"].as_array().cloned())
        .unwrap_or_default()
}

#[tokio::test]
async fn follow_ups_go_to_the_deployment_that_made_their_encrypted_reasoning() {
    let east = FakeResponses::start_with_key(Brain::Shape, b"east-deployment").await;
    let west = FakeResponses::start_with_key(Brain::Shape, b"west-deployment").await;
    let config = format!(
        "--- toolgate.yaml\nupstreams:\n  - {{name: east, protocol: openai_responses, base_url: {}}}\n  - {{name: west, protocol: openai_responses, base_url: {}}}\nmodels:\n  - model: codex\n    targets:\n      - {{upstream: east, model: gpt-5-codex}}\n      - {{upstream: west, model: gpt-5-codex}}\n",
        east.base_url(),
        west.base_url()
    );
    let dir = ConfigDir::fixture(&config, &[]);
    let gw = Gateway::start(load_catalog(dir.path(), &[])).await;
    let client = reqwest::Client::new();
    let mut reached = 0;
    for _ in 0..100 {
        let body = codex_request();
        let (east_before, west_before) = (east.log.len(), west.log.len());
        let resp = client
            .post(gw.url("/v1/responses"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let output = completed_output(&resp.text().await.unwrap());
        let producer_is_east = east.log.len() > east_before;
        assert_ne!(producer_is_east, west.log.len() > west_before);
        let reasoning = output.iter().find(|i| i["type"] == "reasoning").unwrap();
        assert!(reasoning["encrypted_content"].is_string(), "{reasoning}");
        let call = output
            .iter()
            .find(|i| i["type"] == "function_call")
            .unwrap();
        // The follow-up: the answer's items back, with the call's output.
        let (east_before, west_before) = (east.log.len(), west.log.len());
        let mut follow = body.clone();
        let mut input = body["input"].as_array().unwrap().clone();
        input.extend(output.iter().cloned());
        input.push(
            json!({"type": "function_call_output", "call_id": call["call_id"], "output": "done"}),
        );
        follow["input"] = json!(input);
        let resp = client
            .post(gw.url("/v1/responses"))
            .json(&follow)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        assert!(
            !completed_output(&text).is_empty(),
            "the follow-up completed: {text}"
        );
        let went_east = east.log.len() > east_before;
        assert_ne!(went_east, west.log.len() > west_before);
        if went_east == producer_is_east {
            reached += 1;
        }
    }
    assert_eq!(reached, 100);

    // The producer down: its follow-up goes to the other deployment
    // without the reasoning only the producer can read, said in a notice
    // (not refused for it).
    let body = codex_request();
    let before = east.log.len();
    let resp = client
        .post(gw.url("/v1/responses"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let output = completed_output(&resp.text().await.unwrap());
    let (producer, other) = if east.log.len() > before {
        (&east, &west)
    } else {
        (&west, &east)
    };
    producer.down(Some(503));
    let call = output
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap();
    let mut input = body["input"].as_array().unwrap().clone();
    input.extend(output.iter().cloned());
    input.push(
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "done"}),
    );
    let mut follow = body.clone();
    follow["input"] = json!(input);
    let before = other.log.len();
    let resp = client
        .post(gw.url("/v1/responses"))
        .json(&follow)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let notice = resp
        .headers()
        .get("x-toolgate-notice")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    assert!(notice.contains("another deployment"), "{notice}");
    assert!(!completed_output(&resp.text().await.unwrap()).is_empty());
    assert_eq!(other.log.len(), before + 1);
    let sent = &other.log.all()[before].body;
    assert!(
        !sent.to_string().contains("encrypted_content\":\"")
            && !sent["input"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["type"] == "reasoning"),
        "no reasoning went to the other deployment: {sent}"
    );
    producer.down(None);
    assert_eq!(east.refusals(), Vec::<String>::new());
    assert_eq!(west.refusals(), Vec::<String>::new());
    // Both deployments served: the draw shared the first requests.
    assert!(
        east.log.len() >= 40 && west.log.len() >= 40,
        "{} / {}",
        east.log.len(),
        west.log.len()
    );
}
