//! The cost of a proxied MCP call: many sequential and concurrent calls of
//! one tool (`echo` of `@modelcontextprotocol/server-everything`, over
//! stdio) through the gateway's executor, against the same calls made
//! directly with the rmcp client over the same transport, in the same run
//! (rounds alternate, so both see the same machine load). Prints per-call
//! times and the ratio gateway / direct; the target is at most 1.5x.
//! Then the hop as a client sees it: the tool API of a `toolgate serve`
//! process against a bare JSON-RPC client on the server's stdio, with the
//! gateway's CPU time per call.
//!
//! Run with `make bench` (release mode, nothing else running; `make setup`
//! installs the server).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::json;
use toolgate::context::CallContext;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, ToolCall, http_client};

const ROUNDS: usize = 5;
const SEQUENTIAL: usize = 200;
const CONCURRENCY: usize = 16;
const PER_TASK: usize = 25;
const WARMUP: usize = 50;

fn server() -> String {
    let bin =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp/node_modules/.bin/mcp-server-everything");
    if !bin.exists() {
        eprintln!(
            "{} is missing: run `make setup` (or `make bench`, which installs it)",
            bin.display()
        );
        std::process::exit(2);
    }
    bin.to_string_lossy().into_owned()
}

/// Per-call latencies of sequential calls, and the wall time of
/// `CONCURRENCY` tasks making `PER_TASK` calls each.
#[derive(Default)]
struct Sample {
    sequential: Vec<Duration>,
    concurrent_wall: Vec<Duration>,
}

trait Caller: Send + Sync + 'static {
    fn call(&self, i: usize) -> impl Future<Output = ()> + Send;
}

struct Direct(rmcp::service::RunningService<rmcp::RoleClient, ()>);

impl Caller for Direct {
    async fn call(&self, i: usize) {
        let args = json!({"message": format!("hello {i}")});
        let params =
            CallToolRequestParams::new("echo").with_arguments(args.as_object().unwrap().clone());
        let r = self.0.call_tool(params).await.expect("direct call");
        assert_ne!(r.is_error, Some(true));
    }
}

struct Gateway {
    catalog: Catalog,
    executor: Executor,
    ctx: CallContext,
}

impl Caller for Gateway {
    async fn call(&self, i: usize) {
        let call = ToolCall {
            id: "bench".into(),
            name: "everything_echo".into(),
            arguments: json!({"message": format!("hello {i}")}),
        };
        let r = self.executor.run(&self.catalog, &call, &self.ctx).await;
        assert!(r.success, "gateway call: {:?}", r.error);
    }
}

async fn measure<C: Caller>(caller: &Arc<C>, sample: &mut Sample) {
    for i in 0..SEQUENTIAL {
        let t = Instant::now();
        caller.call(i).await;
        sample.sequential.push(t.elapsed());
    }
    let t = Instant::now();
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|k| {
            let caller = Arc::clone(caller);
            tokio::spawn(async move {
                for i in 0..PER_TASK {
                    caller.call(k * PER_TASK + i).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    sample.concurrent_wall.push(t.elapsed());
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Summary {
    median: Duration,
    p90: Duration,
    p99: Duration,
    mean: Duration,
    /// Wall time of the concurrent phase divided by its calls.
    concurrent_per_call: Duration,
}

fn summarize(s: &Sample) -> Summary {
    let mut seq = s.sequential.clone();
    seq.sort();
    let total: Duration = seq.iter().sum();
    let calls = (CONCURRENCY * PER_TASK * s.concurrent_wall.len()) as u32;
    let wall: Duration = s.concurrent_wall.iter().sum();
    Summary {
        median: percentile(&seq, 0.5),
        p90: percentile(&seq, 0.9),
        p99: percentile(&seq, 0.99),
        mean: total / seq.len() as u32,
        concurrent_per_call: wall / calls,
    }
}

#[tokio::main]
async fn main() {
    let bin = server();
    println!(
        "MCP call benchmark: `echo` of server-everything over stdio, {ROUNDS} alternating rounds of {SEQUENTIAL} sequential calls and {CONCURRENCY} tasks x {PER_TASK} concurrent calls"
    );

    // Direct: one rmcp client session.
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg("stdio").stderr(std::process::Stdio::null());
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let direct = Arc::new(Direct(().serve(transport).await.expect("direct session")));

    // Gateway: the same server declared in tools.d/, called through the executor.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tools.d")).unwrap();
    std::fs::write(
        dir.path().join("tools.d/everything.yaml"),
        format!(
            "mcp_servers:\n  - name: everything\n    transport: stdio\n    command: {bin}\n    args: [stdio]\n    tools: {{ include: [echo], prefix: everything_ }}\n"
        ),
    )
    .unwrap();
    let catalog = Catalog::load_with_env(dir.path(), &|_| None).expect("catalog");
    catalog.mcp().start().await;
    assert!(
        catalog.tool("everything_echo").is_some(),
        "the server did not start"
    );
    let gateway = Arc::new(Gateway {
        catalog,
        executor: Executor::new(http_client().unwrap()),
        ctx: CallContext::new(),
    });

    for i in 0..WARMUP {
        direct.call(i).await;
        gateway.call(i).await;
    }
    let (mut d, mut g) = (Sample::default(), Sample::default());
    for round in 0..ROUNDS {
        // Alternate which goes first.
        if round % 2 == 0 {
            measure(&direct, &mut d).await;
            measure(&gateway, &mut g).await;
        } else {
            measure(&gateway, &mut g).await;
            measure(&direct, &mut d).await;
        }
    }
    let (d, g) = (summarize(&d), summarize(&g));
    println!();
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>10} {:>16}",
        "per call (ms)", "median", "p90", "p99", "mean", "concurrent/call"
    );
    for (name, s) in [("direct (rmcp client)", &d), ("gateway (executor)", &g)] {
        println!(
            "{:<28} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>16.3}",
            name,
            ms(s.median),
            ms(s.p90),
            ms(s.p99),
            ms(s.mean),
            ms(s.concurrent_per_call)
        );
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    let seq = ratio(g.median, d.median);
    let conc = ratio(g.concurrent_per_call, d.concurrent_per_call);
    println!();
    println!("ratio gateway/direct, sequential (median): {seq:.2}x");
    println!("ratio gateway/direct, concurrent (per call): {conc:.2}x");
    println!(
        "added per call: {:.3} ms sequential (median)",
        ms(g.median) - ms(d.median)
    );
    let verdict = if seq <= 1.5 && conc <= 1.5 {
        "within"
    } else {
        "OVER"
    };
    println!("target <= 1.5x: {verdict}");
    gateway.catalog.mcp().shutdown().await;
    drop(direct);

    hop(&bin, dir.path()).await;
}

/// The MCP hop as a client sees it: `POST /v1/tools/everything_echo/invoke`
/// on a `toolgate serve` process (keep-alive client) against the same
/// server's `echo` called by a bare JSON-RPC client on its stdio (a line
/// written, a line read: the least any client can do). Sequential calls,
/// rounds alternating; the gateway's CPU time per call is read from
/// `/proc` (every thread's time on a CPU, in ns).
async fn hop(bin: &str, tools: &Path) {
    const CALLS: usize = 400;
    std::fs::write(tools.join("toolgate.yaml"), "reload: { watch: false }\n").unwrap();
    let mut gate = std::process::Command::new(toolgate_tests::measured_toolgate())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(tools)
        .env("TOOLGATE_LOG", "warn,toolgate_server::server=info")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = gate.id();
    let addr = toolgate_tests::serve_address(gate.stderr.take().unwrap());
    let url = format!("http://{addr}/v1/tools/everything_echo/invoke");
    let client = reqwest::Client::new();
    let api = |i: usize| {
        let (client, url) = (&client, &url);
        async move {
            let r = client
                .post(url)
                .json(&json!({"arguments": {"message": format!("hello {i}")}}))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "tool API: {}", r.status());
            r.bytes().await.unwrap();
        }
    };
    let mut bare = Bare::start(bin).await;
    for i in 0..WARMUP {
        api(i).await;
        bare.call(i).await;
    }
    let (mut b, mut a, mut cpu) = (Vec::new(), Vec::new(), Duration::ZERO);
    for round in 0..ROUNDS {
        for first in [round % 2 == 0, round % 2 != 0] {
            if first {
                for i in 0..CALLS {
                    let t = Instant::now();
                    bare.call(i).await;
                    b.push(t.elapsed());
                }
            } else {
                let before = cpu_time(pid);
                for i in 0..CALLS {
                    let t = Instant::now();
                    api(i).await;
                    a.push(t.elapsed());
                }
                // Saturating: a thread that ended during the round took its time with it.
                cpu += cpu_time(pid).saturating_sub(before);
            }
        }
    }
    let _ = gate.kill();
    let _ = gate.wait();
    b.sort();
    a.sort();
    let (bm, am) = (percentile(&b, 0.5), percentile(&a, 0.5));
    println!();
    println!(
        "the MCP hop: `echo` through `toolgate serve`'s tool API (keep-alive HTTP client) against a bare JSON-RPC client on the server's stdio, {ROUNDS} alternating rounds of {CALLS} sequential calls"
    );
    println!(
        "  per call, median (p99): bare {:.3} ({:.3}) ms, tool API {:.3} ({:.3}) ms: {:.2}x (goal <= 1.1x)",
        ms(bm),
        ms(percentile(&b, 0.99)),
        ms(am),
        ms(percentile(&a, 0.99)),
        am.as_secs_f64() / bm.as_secs_f64()
    );
    println!(
        "  gateway CPU per call (all its threads): {:.1} us (goal <= 50)",
        cpu.as_secs_f64() * 1e6 / (ROUNDS * CALLS) as f64
    );
}

/// On-CPU time of every thread of a process, from `/proc/PID/task/*/schedstat`.
fn cpu_time(pid: u32) -> Duration {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let path = task.unwrap().path().join("schedstat");
        if let Ok(s) = std::fs::read_to_string(path) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

/// A bare MCP client: JSON-RPC lines on a child's stdin and stdout.
struct Bare {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    id: u64,
}

impl Bare {
    async fn start(bin: &str) -> Bare {
        let mut child = tokio::process::Command::new(bin)
            .arg("stdio")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut bare = Bare {
            _child: child,
            stdin,
            lines: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)),
            id: 0,
        };
        bare.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bare", "version": "0"}}),
        )
        .await;
        bare.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        bare
    }

    async fn send(&mut self, message: &serde_json::Value) {
        let mut line = message.to_string();
        line.push('\n');
        tokio::io::AsyncWriteExt::write_all(&mut self.stdin, line.as_bytes())
            .await
            .unwrap();
    }

    /// Sends a request and reads lines up to its response.
    async fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.id += 1;
        let id = self.id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = self
                .lines
                .next_line()
                .await
                .unwrap()
                .expect("the server closed");
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v;
            }
        }
    }

    async fn call(&mut self, i: usize) {
        let r = self
            .request(
                "tools/call",
                json!({"name": "echo", "arguments": {"message": format!("hello {i}")}}),
            )
            .await;
        assert_ne!(r["result"]["isError"], json!(true));
    }
}
