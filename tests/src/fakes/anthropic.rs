//! A fake of Anthropic's Messages API (`POST /v1/messages`), whole and
//! streamed, that checks what the real API checks of what a gateway
//! writes:
//!
//! - `x-api-key` (when the fake has one) and `anthropic-version`;
//! - `model`, `max_tokens`, non-empty `messages` of roles user and
//!   assistant (and system), known block types;
//! - every `tool_result` answers a `tool_use` of the assistant message
//!   right before it;
//! - at most four `cache_control` markers;
//! - **thinking signatures**: the fake signs each thinking block it writes
//!   (HMAC over its text and the ids of the calls after it in the same
//!   message, with its own key), and refuses a request whose thinking block
//!   is altered, unsigned, moved away from its calls, or signed by another
//!   fake; with thinking on, an assistant message with calls that is the
//!   last one must start with a thinking block.
//!
//! It answers by a `Brain`: the shape of the request (the golden corpus)
//! or the scripted model's script (`mock_llm::scripted`, asked with the
//! request written in chat completions' shape). With `thinking` on, each
//! answer starts with a signed thinking block.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

use super::{Brain, Log, Received, Reply, Seen, USAGE, decide, headers_of};

/// A running fake.
pub struct FakeAnthropic {
    pub addr: SocketAddr,
    pub log: Log,
    shared: Shared,
}

#[derive(Clone)]
struct Shared {
    log: Log,
    answers: Arc<AtomicUsize>,
    /// The key it signs thinking with.
    key: Arc<Vec<u8>>,
    api_key: Option<String>,
    brain: Brain,
    /// Requests refused, with why.
    refusals: Arc<Mutex<Vec<String>>>,
}

impl FakeAnthropic {
    pub async fn start(brain: Brain) -> FakeAnthropic {
        FakeAnthropic::with(brain, None, b"anthropic-fake-key").await
    }

    /// A fake that requires `api_key` and signs with `key` (two fakes with
    /// two keys stand for two deployments).
    pub async fn with(brain: Brain, api_key: Option<&str>, key: &[u8]) -> FakeAnthropic {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        FakeAnthropic::serve_on(listener, brain, api_key, key)
    }

    /// The fake on `listener`.
    pub fn serve_on(
        listener: tokio::net::TcpListener,
        brain: Brain,
        api_key: Option<&str>,
        key: &[u8],
    ) -> FakeAnthropic {
        let log = Log::default();
        let shared = Shared {
            log: log.clone(),
            answers: Arc::default(),
            key: Arc::new(key.to_vec()),
            api_key: api_key.map(str::to_owned),
            brain,
            refusals: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/fake/requests", axum::routing::get(requests))
            .route("/fake/refusals", axum::routing::get(refusals))
            .with_state(shared.clone());
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeAnthropic { addr, log, shared }
    }

    /// The base URL an upstream declares (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Why requests were refused, in order.
    pub fn refusals(&self) -> Vec<String> {
        self.shared.refusals.lock().unwrap().clone()
    }
}

/// `GET /fake/requests`: every request body, in order.
async fn requests(State(shared): State<Shared>) -> axum::Json<Value> {
    axum::Json(Value::Array(
        shared.log.all().into_iter().map(|r| r.body).collect(),
    ))
}

/// `GET /fake/refusals`: why requests were refused, in order.
async fn refusals(State(shared): State<Shared>) -> axum::Json<Value> {
    axum::Json(json!(shared.refusals.lock().unwrap().clone()))
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"type": "error", "error": {"type": kind, "message": message}})),
    )
        .into_response()
}

/// The signature of a thinking block: its text and the calls after it.
fn sign(key: &[u8], thinking: &str, calls: &[&str]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(thinking.as_bytes());
    for c in calls {
        mac.update(b"|");
        mac.update(c.as_bytes());
    }
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// The ids of the `tool_use` blocks of `content` after index `i`.
fn calls_after(content: &[Value], i: usize) -> Vec<&str> {
    content[i + 1..]
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["id"].as_str())
        .collect()
}

const BLOCKS: [&str; 25] = [
    "text",
    "image",
    "document",
    "search_result",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "container_upload",
    "mcp_tool_use",
    "mcp_tool_result",
    "mid_conv_system",
    "compaction",
    "advisor_tool_result",
    "fallback",
    "mcp_tool_listing",
    "tool_addition",
    "tool_removal",
];

/// What the real API would refuse, if anything.
fn check(body: &Value, headers: &HeaderMap, shared: &Shared) -> Result<(), (StatusCode, String)> {
    let bad = |m: String| Err((StatusCode::BAD_REQUEST, m));
    if let Some(key) = &shared.api_key
        && headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(key.as_str())
    {
        return Err((StatusCode::UNAUTHORIZED, "invalid x-api-key".into()));
    }
    if headers.get("anthropic-version").is_none() {
        return bad("anthropic-version: header is required".into());
    }
    if !body["model"].is_string() {
        return bad("model: Field required".into());
    }
    if !body["max_tokens"].is_u64() {
        return bad("max_tokens: Field required".into());
    }
    let Some(messages) = body["messages"].as_array().filter(|m| !m.is_empty()) else {
        return bad("messages: at least one message is required".into());
    };
    let markers = body.to_string().matches("\"cache_control\"").count();
    if markers > 4 {
        return bad(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {markers}."
        ));
    }
    let thinking_on = matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    );
    let last_assistant = messages.iter().rposition(|m| m["role"] == "assistant");
    let mut calls_before: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if !matches!(role, "user" | "assistant" | "system") {
            return bad(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        let content: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => {
                return bad(format!(
                    "messages.{i}.content: Input should be a valid list"
                ));
            }
        };
        let mut calls_here = Vec::new();
        for (j, b) in content.iter().enumerate() {
            let kind = b["type"].as_str().unwrap_or_default();
            if !BLOCKS.contains(&kind) {
                return bad(format!(
                    "messages.{i}.content.{j}.type: unknown block type {kind:?}"
                ));
            }
            match kind {
                "tool_use" => calls_here.push(b["id"].as_str().unwrap_or_default().to_owned()),
                "tool_result" => {
                    let id = b["tool_use_id"].as_str().unwrap_or_default();
                    if !calls_before.iter().any(|c| c == id) {
                        return bad(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    }
                }
                "thinking" => {
                    let Some(signature) = b["signature"].as_str() else {
                        return bad(format!(
                            "messages.{i}.content.{j}.thinking.signature: Field required"
                        ));
                    };
                    let text = b["thinking"].as_str().unwrap_or_default();
                    if sign(&shared.key, text, &calls_after(&content, j)) != signature {
                        return bad(format!(
                            "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                        ));
                    }
                }
                _ => {}
            }
        }
        if thinking_on
            && Some(i) == last_assistant
            && !calls_here.is_empty()
            && !matches!(
                content.first().and_then(|b| b["type"].as_str()),
                Some("thinking" | "redacted_thinking")
            )
        {
            return bad(format!(
                "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block",
                content
                    .first()
                    .and_then(|b| b["type"].as_str())
                    .unwrap_or("nothing")
            ));
        }
        if role == "assistant" {
            calls_before = calls_here;
        }
    }
    Ok(())
}

/// The request as the scripted model reads it: chat completions' shape.
fn as_chat(body: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = body.get("system") {
        let text = match system {
            Value::String(s) => s.clone(),
            Value::Array(b) => b.iter().filter_map(|b| b["text"].as_str()).collect(),
            _ => String::new(),
        };
        messages.push(json!({"role": "system", "content": text}));
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => Vec::new(),
        };
        let text: String = blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect();
        if m["role"] == "assistant" {
            let calls: Vec<Value> = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| json!({"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": b["input"].to_string()}}))
                .collect();
            let mut msg = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                msg["tool_calls"] = json!(calls);
            }
            messages.push(msg);
            continue;
        }
        for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
            let content = match &b["content"] {
                Value::String(s) => s.clone(),
                Value::Array(c) => c
                    .iter()
                    .filter_map(|c| c["text"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                _ => String::new(),
            };
            messages.push(
                json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": content}),
            );
        }
        if !text.is_empty() || blocks.iter().all(|b| b["type"] != "tool_result") {
            messages.push(json!({"role": m["role"], "content": text}));
        }
    }
    let tools: Vec<Value> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t.get("input_schema").is_some())
        .map(|t| json!({"type": "function", "function": {"name": t["name"], "parameters": t["input_schema"]}}))
        .collect();
    json!({"model": body["model"], "messages": messages, "tools": tools})
}

/// What the request shows the shape brain.
fn seen(body: &Value) -> Seen {
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some((
                t["name"].as_str()?.to_owned(),
                t.get("input_schema")?.clone(),
            ))
        })
        .collect();
    let answered = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| {
            m["content"]
                .as_array()
                .is_some_and(|b| b.iter().any(|b| b["type"] == "tool_result"))
        });
    Seen { tools, answered }
}

fn reply(brain: Brain, body: &Value) -> Reply {
    match brain {
        Brain::Shape => decide(&seen(body)),
        Brain::Script => match crate::mock_llm::scripted(&as_chat(body)) {
            (_, calls) if !calls.is_empty() => Reply::Calls(calls),
            (text, _) => Reply::Text {
                reasoning: super::REASONING.into(),
                text: text.unwrap_or_default(),
            },
        },
    }
}

/// The blocks of the answer: a signed thinking block (thinking on), then
/// text or calls.
fn blocks(shared: &Shared, body: &Value, reply: &Reply, n: usize) -> Vec<Value> {
    let thinking_on = matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    );
    let mut out = Vec::new();
    match reply {
        Reply::Text { text, .. } => out.push(json!({"type": "text", "text": text})),
        Reply::Call { name, arguments } => out.push(json!({"type": "tool_use", "id": format!("toolu_fake{n}_0"), "name": name, "input": arguments})),
        Reply::Calls(calls) => {
            for (i, (name, arguments)) in calls.iter().enumerate() {
                out.push(json!({"type": "tool_use", "id": format!("toolu_fake{n}_{i}"), "name": name, "input": arguments}));
            }
        }
    }
    if thinking_on {
        let text = format!("{} (answer {n})", super::REASONING);
        let calls: Vec<&str> = out.iter().filter_map(|b| b["id"].as_str()).collect();
        let signature = sign(&shared.key, &text, &calls);
        out.insert(
            0,
            json!({"type": "thinking", "thinking": text, "signature": signature}),
        );
    }
    out
}

fn usage() -> Value {
    let (input, output, cached, _) = USAGE;
    json!({"input_tokens": input - cached, "output_tokens": output,
           "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0})
}

async fn messages(
    State(shared): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the body is not JSON",
        );
    };
    shared.log.push(Received {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers_of(&headers),
        body: body.clone(),
    });
    if let Err((status, message)) = check(&body, &headers, &shared) {
        shared.refusals.lock().unwrap().push(message.clone());
        let kind = if status == StatusCode::UNAUTHORIZED {
            "authentication_error"
        } else {
            "invalid_request_error"
        };
        return error(status, kind, &message);
    }
    let n = shared.answers.fetch_add(1, Ordering::SeqCst) + 1;
    let reply = reply(shared.brain, &body);
    let content = blocks(&shared, &body, &reply, n);
    let stop = if content.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let id = format!("msg_fake{n}");
    if body["stream"] == json!(true) {
        return stream(&id, &model, &content, stop);
    }
    axum::Json(json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage(),
    }))
    .into_response()
}

/// The answer as Messages' events: each block started, its content in two
/// deltas (a thinking block's signature last), stopped.
fn stream(id: &str, model: &str, content: &[Value], stop: &str) -> Response {
    let mut events: Vec<(&str, Value)> = Vec::new();
    let mut start_usage = usage();
    start_usage["output_tokens"] = json!(1);
    events.push((
        "message_start",
        json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    ));
    for (index, b) in content.iter().enumerate() {
        let halves = |s: &str| {
            let mid = s
                .char_indices()
                .nth(s.chars().count() / 2)
                .map_or(s.len(), |(i, _)| i);
            (s[..mid].to_owned(), s[mid..].to_owned())
        };
        let (start, deltas): (Value, Vec<Value>) = match b["type"].as_str() {
            Some("thinking") => {
                let (a, c) = halves(b["thinking"].as_str().unwrap_or_default());
                (
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    vec![
                        json!({"type": "thinking_delta", "thinking": a}),
                        json!({"type": "thinking_delta", "thinking": c}),
                        json!({"type": "signature_delta", "signature": b["signature"]}),
                    ],
                )
            }
            Some("text") => {
                let (a, c) = halves(b["text"].as_str().unwrap_or_default());
                (
                    json!({"type": "text", "text": ""}),
                    vec![
                        json!({"type": "text_delta", "text": a}),
                        json!({"type": "text_delta", "text": c}),
                    ],
                )
            }
            _ => {
                let args = b["input"].to_string();
                let (a, c) = halves(&args);
                (
                    json!({"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}),
                    vec![
                        json!({"type": "input_json_delta", "partial_json": a}),
                        json!({"type": "input_json_delta", "partial_json": c}),
                    ],
                )
            }
        };
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if index == 0 {
            events.push(("ping", json!({"type": "ping"})));
        }
        for d in deltas {
            events.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": d}),
            ));
        }
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let (_, output, _, _) = USAGE;
    events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": output}})));
    events.push(("message_stop", json!({"type": "message_stop"})));
    let mut text = String::new();
    for (name, data) in events {
        text.push_str(&format!("event: {name}\ndata: {data}\n\n"));
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}
