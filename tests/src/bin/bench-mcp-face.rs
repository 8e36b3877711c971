//! The cost of the MCP face: sequential calls of the `calculator` builtin
//! made three ways in one run, rounds alternating so all see the same
//! machine load:
//!
//! - `mcp`: rmcp's client over streamable HTTP to the gateway's
//!   `/mcp/{tool_set}` (a 2025-11-25 session; the full gateway: auth layer,
//!   executor with validation, metrics);
//! - `tool API`: `POST /v1/tools/calculator/invoke` on the same gateway;
//! - `direct`: the same rmcp client to a bare rmcp server (streamable HTTP,
//!   same kind of session) whose one tool evaluates the same expression
//!   with the same function: the MCP protocol's own cost, without the
//!   gateway.
//!
//! Prints per-call times and the ratios mcp / direct and mcp / tool API.
//! Run with `make bench` (release mode, nothing else running).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::json;
use toolgate_engine::catalog::Catalog;
use toolgate_tests::ConfigDir;

const ROUNDS: usize = 5;
const CALLS: usize = 400;
const WARMUP: usize = 100;
const EXPRESSION: &str = "2 * (3 + 4) - sqrt(16)";

/// A bare rmcp server with one tool doing the builtin's work.
#[derive(Clone)]
struct Bare;

impl ServerHandler for Bare {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let expression = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("expression"))
            .and_then(|e| e.as_str())
            .unwrap_or_default();
        let value = toolgate_builtins::calculator::evaluate(expression)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(value.to_string()),
        ])))
    }
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

async fn mcp_client(url: &str) -> Client {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .expect("MCP client connects")
}

async fn mcp_call(client: &Client) {
    let mut args = serde_json::Map::new();
    args.insert("expression".into(), json!(EXPRESSION));
    let result = client
        .call_tool(CallToolRequestParams::new("calculator").with_arguments(args))
        .await
        .expect("MCP call");
    assert_ne!(result.is_error, Some(true), "{result:?}");
}

async fn api_call(http: &reqwest::Client, url: &str) {
    let resp = http
        .post(url)
        .json(&json!({"arguments": {"expression": EXPRESSION}}))
        .send()
        .await
        .expect("tool API call");
    assert!(resp.status().is_success());
    resp.bytes().await.expect("body");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    // The gateway, in this process, serving the builtin in a set.
    let dir = ConfigDir::fixture(
        "--- toolgate.yaml\nbuiltins:\n  enabled: [calculator]\n--- tool-sets/bench.yaml\nname: bench\ntools: [calculator]\n",
        &[],
    );
    let catalog = Catalog::load(dir.path()).expect("bench configuration loads");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let loader: toolgate_server::reload::Loader = Arc::new(Catalog::load);
    let gateway = toolgate_server::server::start(
        catalog,
        listener,
        toolgate_server::server::Options {
            dir: dir.path().to_owned(),
            loader,
            signals: false,
        },
    )
    .await
    .expect("gateway starts");
    let base = format!("http://{}", gateway.addr());

    // The bare rmcp server.
    let bare = StreamableHttpService::new(
        || Ok(Bare),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let bare_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bare_url = format!("http://{}/mcp", bare_listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            bare_listener,
            axum::Router::new().nest_service("/mcp", bare),
        )
        .await
        .unwrap();
    });

    let via_gateway = mcp_client(&format!("{base}/mcp/bench")).await;
    let direct = mcp_client(&bare_url).await;
    let http = reqwest::Client::new();
    let invoke = format!("{base}/v1/tools/calculator/invoke");
    for _ in 0..WARMUP {
        mcp_call(&via_gateway).await;
        mcp_call(&direct).await;
        api_call(&http, &invoke).await;
    }

    let mut samples: [Vec<Duration>; 3] = Default::default();
    for _ in 0..ROUNDS {
        for _ in 0..CALLS {
            let t = Instant::now();
            mcp_call(&direct).await;
            samples[0].push(t.elapsed());
        }
        for _ in 0..CALLS {
            let t = Instant::now();
            api_call(&http, &invoke).await;
            samples[1].push(t.elapsed());
        }
        for _ in 0..CALLS {
            let t = Instant::now();
            mcp_call(&via_gateway).await;
            samples[2].push(t.elapsed());
        }
    }

    println!(
        "calculator(\"{EXPRESSION}\"), {ROUNDS} alternating rounds of {CALLS} sequential calls each"
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9}",
        "per call (ms)", "median", "p90", "p99"
    );
    let names = [
        "direct: bare rmcp server",
        "tool API: POST /v1/tools/…/invoke",
        "mcp: gateway /mcp/{set}",
    ];
    let mut medians = [Duration::ZERO; 3];
    for (i, s) in samples.iter_mut().enumerate() {
        s.sort();
        medians[i] = percentile(s, 0.5);
        println!(
            "{:<34} {:>9.3} {:>9.3} {:>9.3}",
            names[i],
            ms(medians[i]),
            ms(percentile(s, 0.9)),
            ms(percentile(s, 0.99))
        );
    }
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "ratio mcp / direct (median): {:.2}x",
        ratio(medians[2], medians[0])
    );
    println!(
        "ratio mcp / tool API (median): {:.2}x",
        ratio(medians[2], medians[1])
    );
    gateway.shutdown();
    let _ = gateway.wait().await;
}
