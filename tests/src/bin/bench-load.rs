//! A bounded load test: N concurrent streaming chat requests (1,000 by
//! default) through a real `toolgate serve` process against the scripted
//! model, on 127.0.0.1. Each request runs a tool loop (`calculator`, then
//! the answer), and the model takes `--latency-ms` per call, so every
//! request is open at the same time. Reports failures (any is an error
//! exit), whether `/healthz` answered throughout (a new connection every
//! 50 ms, within 2 s, as a load balancer checks), the most streams the
//! gateway had open at once (from its own `/metrics`), and the gateway's
//! resident memory idle and at the peak, per open connection. The
//! gateway's caps (connections, loops, streams) are raised to N + 100.
//!
//! Run with `make bench` (release mode, nothing else running), or
//! `target/release/bench-load [--connections N] [--latency-ms MS]
//! [--history-bytes B] [--set-tools T]` (B bytes of earlier conversation
//! in each request, none by default; T HTTP tools in the tool set beside
//! the calculator, each with a description of about 300 characters and a
//! schema of three parameters, never called; none by default). It
//! raises its open-files limit itself (each request holds a client and an
//! upstream socket in the gateway); when the hard limit is too low, raise
//! it first (`ulimit -n 8192`).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolgate_tests::ConfigDir;
use toolgate_tests::mock_llm::MockLlm;

/// The whole run must finish within this.
const TIME_BOUND: Duration = Duration::from_secs(180);

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} wants a number, got {v}"))
        })
}

/// Resident memory of a process, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// An error with its causes, as `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// One streaming request; `Ok` when it ends with the expected answer.
/// `history` bytes of earlier conversation come first (a system message),
/// as an agent's long conversation does.
async fn one(
    client: &reqwest::Client,
    url: &str,
    latency: u64,
    history: usize,
    i: u64,
) -> Result<(), String> {
    let ask = json!({"role": "user", "content": format!("call calculator {{\"expression\": \"{i} + 1\"}} [[mock:latency={latency}]]")});
    let messages = if history == 0 {
        vec![ask]
    } else {
        let earlier = "Earlier in this conversation. ".repeat(history / 30 + 1);
        vec![
            json!({"role": "system", "content": &earlier[..history]}),
            ask,
        ]
    };
    let body = json!({
        "model": "mock-model",
        "stream": true,
        "messages": messages,
    });
    let resp = client
        .post(url)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("request: {}", chain(&e)))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("body: {e}"))?;
    if status != 200 {
        return Err(format!("HTTP {status}: {text}"));
    }
    let mut content = String::new();
    let mut done = false;
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("chunk: {e}"))?;
        if let Some(e) = v.get("error") {
            return Err(format!("stream error: {e}"));
        }
        if let Some(c) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            content.push_str(c);
        }
    }
    let expected = format!("Tool results: [calculator] {}", i + 1);
    if !done || !content.starts_with(&expected) {
        return Err(format!("incomplete answer: {content:?} (done: {done})"));
    }
    Ok(())
}

/// The value of an unlabelled gauge in a Prometheus text page.
fn gauge(page: &str, name: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::main]
async fn main() {
    let n = arg("--connections", 1000);
    let latency = arg("--latency-ms", 2000);
    let history = usize::try_from(arg("--history-bytes", 0)).unwrap_or(0);
    let set_tools = arg("--set-tools", 0);
    // Per request: the client's socket and the mock's (this process); the
    // accepted socket and the upstream socket (the gateway, which inherits
    // this limit).
    let want = 2 * n + 512;
    let limit = rlimit::increase_nofile_limit(want).unwrap_or(0);
    if limit < want {
        eprintln!(
            "the open-files limit is {limit}, {want} are needed: raise the hard limit (`ulimit -n {want}`) and run again"
        );
        std::process::exit(2);
    }

    let model = MockLlm::start().await;
    let gateway_yaml = format!(
        "upstreams:
  - name: mock
    base_url: {}
    read_timeout: 120s
limits:
  max_connections: {cap}
  max_concurrent_loops: {cap}
  max_concurrent_streams: {cap}
reload: {{ watch: false }}
builtins:
  enabled: [calculator]
",
        model.base_url(),
        cap = n + 100
    );
    // The tool set's other tools: declared, offered, never called.
    let mut extra = String::from(if set_tools == 0 {
        "tools: []\n"
    } else {
        "tools:\n"
    });
    let mut names = vec!["calculator".to_string()];
    for t in 0..set_tools {
        extra.push_str(&format!(
            "  - name: lookup_{t}
    description: >-
      Look up record {t} of the inventory by its identifier and return its
      fields: the name, the owner, the place it is kept, when it was last
      checked and by whom, and any notes written about it since. Use it
      when the user names a record or asks where something is kept.
    parameters:
      type: object
      properties:
        id: {{ type: string, description: The record's identifier. }}
        fields: {{ type: array, items: {{ type: string }}, description: Which fields to return. }}
        verbose: {{ type: boolean, description: Include the notes. }}
      required: [id]
    http: {{ method: GET, url: 'http://127.0.0.1:9/records/{{{{ args.id }}}}' }}
"
        ));
        names.push(format!("lookup_{t}"));
    }
    let tool_set = format!("name: default\ntools: [{}]\n", names.join(", "));
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &gateway_yaml),
        ("tools.d/extra.yaml", &extra),
        ("tool-sets/default.yaml", &tool_set),
    ]);
    let mut child = Command::new(toolgate_tests::measured_toolgate())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.path())
        .env(
            "TOOLGATE_LOG",
            "warn,toolgate_server::cli=info,toolgate_server::server=info",
        )
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let addr = toolgate_tests::serve_address(child.stderr.take().unwrap());
    let url = format!("http://{addr}/v1/chat/completions");
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(usize::MAX)
        .build()
        .unwrap();

    // Warm up (allocator, connection pools), then measure idle memory.
    for i in 0..20 {
        one(&client, &url, 0, history, i)
            .await
            .expect("warm-up request");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle = rss_kib(pid);

    let peak_rss = Arc::new(AtomicU64::new(idle));
    let peak_streams = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak_rss, peak_streams, sampling) = (
            Arc::clone(&peak_rss),
            Arc::clone(&peak_streams),
            Arc::clone(&sampling),
        );
        let metrics = format!("http://{addr}/metrics");
        tokio::spawn(async move {
            let c = reqwest::Client::new();
            while sampling.load(Ordering::SeqCst) {
                peak_rss.fetch_max(rss_kib(pid), Ordering::SeqCst);
                if let Ok(r) = c.get(&metrics).send().await
                    && let Ok(page) = r.text().await
                {
                    peak_streams
                        .fetch_max(gauge(&page, "toolgate_active_streams"), Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // A health check as a load balancer makes it: a new connection each
    // time, and an answer wanted within two seconds. A task of its own, so
    // that a slow answer does not space out the memory samples.
    let checker = {
        let sampling = Arc::clone(&sampling);
        let healthz = format!("http://{addr}/healthz");
        tokio::spawn(async move {
            let probe = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            let (mut asked, mut answered) = (0u64, 0u64);
            while sampling.load(Ordering::SeqCst) {
                asked += 1;
                if probe
                    .get(&healthz)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    answered += 1;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (asked, answered)
        })
    };

    println!(
        "bench-load: {n} concurrent streaming tool-loop requests, model latency {latency} ms per call, {} tools in the tool set",
        1 + set_tools
    );
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = client.clone();
            let url = url.clone();
            tokio::spawn(async move { one(&client, &url, latency, history, 1000 + i).await })
        })
        .collect();
    let results = tokio::time::timeout(TIME_BOUND, futures::future::join_all(tasks))
        .await
        .expect("the load test did not finish in time");
    let wall = started.elapsed();
    sampling.store(false, Ordering::SeqCst);
    sampler.await.unwrap();
    let (asked, answered) = checker.await.unwrap();
    let mut failures: Vec<String> = results
        .into_iter()
        .filter_map(|r| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(e) => Some(format!("task: {e}")),
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid);
    let peak = peak_rss.load(Ordering::SeqCst);
    let streams = peak_streams.load(Ordering::SeqCst);

    println!("  requests:            {n} ({} failed)", failures.len());
    if answered < asked {
        failures.push(format!(
            "/healthz answered {answered} of {asked} checks within 2 s"
        ));
    }
    println!("  /healthz under load: {answered} of {asked} answered within 2 s");
    println!("  wall time:           {:.2} s", wall.as_secs_f64());
    println!("  peak open streams:   {streams} (toolgate_active_streams)");
    println!("  gateway RSS idle:    {:.1} MiB", idle as f64 / 1024.0);
    println!("  gateway RSS peak:    {:.1} MiB", peak as f64 / 1024.0);
    println!("  gateway RSS after:   {:.1} MiB", after as f64 / 1024.0);
    println!(
        "  memory per connection (peak - idle) / {}: {:.1} KiB (goal <= 16)",
        streams.max(1),
        peak.saturating_sub(idle) as f64 / streams.max(1) as f64
    );
    for f in failures.iter().take(5) {
        println!("  failure: {f}");
    }
    let _ = child.kill();
    let _ = child.wait();
    if !failures.is_empty() || streams < n {
        if streams < n {
            println!("  error: the requests did not all overlap ({streams} of {n} open at once)");
        }
        std::process::exit(1);
    }
}
