//! A fake of OpenAI's Responses API (`POST /v1/responses`), whole and
//! streamed, that checks what the real API checks of what a gateway
//! writes:
//!
//! - a `model` and an `input`; a `function_call_output` answers a
//!   `function_call` before it;
//! - **encrypted reasoning**: the fake encrypts (here: signs) each
//!   reasoning item's `encrypted_content` with its own key — its
//!   deployment's — and refuses a request carrying one it did not make
//!   (`invalid_encrypted_content`, as the real API refuses another
//!   organization's); a reasoning item with an id and no encrypted content
//!   in a request that stores nothing is an item it never kept.
//!
//! Each answer starts with a reasoning item (its encrypted content when the
//! request `include`s it), then a message or calls, decided by a `Brain`.

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
pub struct FakeResponses {
    pub addr: SocketAddr,
    pub log: Log,
    shared: Shared,
}

#[derive(Clone)]
struct Shared {
    log: Log,
    answers: Arc<AtomicUsize>,
    key: Arc<Vec<u8>>,
    brain: Brain,
    refusals: Arc<Mutex<Vec<String>>>,
    /// A status every request gets instead of an answer (0: none): a
    /// deployment that is down.
    down: Arc<std::sync::atomic::AtomicU16>,
}

impl FakeResponses {
    pub async fn start(brain: Brain) -> FakeResponses {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        FakeResponses::serve_on(listener, brain, b"responses-fake-key")
    }

    /// A fake encrypting with `key` (another deployment).
    pub async fn start_with_key(brain: Brain, key: &[u8]) -> FakeResponses {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        FakeResponses::serve_on(listener, brain, key)
    }

    /// The fake on `listener`, encrypting with `key` (two keys: two
    /// deployments).
    pub fn serve_on(listener: tokio::net::TcpListener, brain: Brain, key: &[u8]) -> FakeResponses {
        let log = Log::default();
        let shared = Shared {
            log: log.clone(),
            answers: Arc::default(),
            key: Arc::new(key.to_vec()),
            brain,
            refusals: Arc::default(),
            down: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/responses", post(responses))
            .route("/fake/requests", axum::routing::get(requests))
            .route("/fake/refusals", axum::routing::get(refusals))
            .with_state(shared.clone());
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeResponses { addr, log, shared }
    }

    /// The base URL an upstream declares (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Answers every request with `status` (a deployment down), or again
    /// normally (`None`).
    pub fn down(&self, status: Option<u16>) {
        self.shared
            .down
            .store(status.unwrap_or(0), Ordering::SeqCst);
    }

    /// Why requests were refused, in order.
    pub fn refusals(&self) -> Vec<String> {
        self.shared.refusals.lock().unwrap().clone()
    }
}

async fn requests(State(shared): State<Shared>) -> axum::Json<Value> {
    axum::Json(Value::Array(
        shared.log.all().into_iter().map(|r| r.body).collect(),
    ))
}

async fn refusals(State(shared): State<Shared>) -> axum::Json<Value> {
    axum::Json(json!(shared.refusals.lock().unwrap().clone()))
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": "invalid_request_error", "param": "input", "code": code}})),
    )
        .into_response()
}

/// A reasoning item's encrypted content: its number, sealed with the key.
fn seal(key: &[u8], n: usize) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("reasoning {n}").as_bytes());
    let tag = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    base64::engine::general_purpose::STANDARD.encode(json!({"n": n, "tag": tag}).to_string())
}

fn opens(key: &[u8], sealed: &str) -> bool {
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(sealed) else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
        return false;
    };
    v["n"]
        .as_u64()
        .is_some_and(|n| seal(key, n as usize) == sealed)
}

/// The input as items (a string is one user message).
fn items(body: &Value) -> Vec<Value> {
    match &body["input"] {
        Value::String(s) => vec![json!({"role": "user", "content": s})],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

/// What the real API would refuse, if anything.
fn check(body: &Value, shared: &Shared) -> Result<(), (String, String)> {
    if !body["model"].is_string() {
        return Err((
            "missing_required_parameter".into(),
            "Missing required parameter: 'model'.".into(),
        ));
    }
    if !(body["input"].is_string() || body["input"].is_array()) {
        return Err((
            "missing_required_parameter".into(),
            "Missing required parameter: 'input'.".into(),
        ));
    }
    let stores = body["store"] != json!(false);
    let mut calls = Vec::new();
    for item in items(body) {
        match item["type"].as_str() {
            Some("function_call") => {
                calls.push(item["call_id"].as_str().unwrap_or_default().to_owned())
            }
            Some("function_call_output") => {
                let id = item["call_id"].as_str().unwrap_or_default();
                if !calls.iter().any(|c| c == id) {
                    return Err((
                        "invalid_request_error".into(),
                        format!("No tool call found for function call output with call_id {id}."),
                    ));
                }
            }
            Some("reasoning") => match item["encrypted_content"].as_str() {
                Some(sealed) if !opens(&shared.key, sealed) => {
                    return Err((
                        "invalid_encrypted_content".into(),
                        format!(
                            "The encrypted content {} could not be verified.",
                            &sealed[..sealed.len().min(12)]
                        ),
                    ));
                }
                None if !stores && item.get("id").is_some() => {
                    return Err((
                        "invalid_request_error".into(),
                        format!(
                            "Item with id '{}' not found. Items are not persisted when `store` is set to false.",
                            item["id"].as_str().unwrap_or_default()
                        ),
                    ));
                }
                _ => {}
            },
            _ => {}
        }
    }
    Ok(())
}

/// The request as the scripted model reads it: chat completions' shape.
fn as_chat(body: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(i) = body["instructions"].as_str() {
        messages.push(json!({"role": "system", "content": i}));
    }
    let text = |content: &Value| match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    for item in items(body) {
        match item["type"].as_str() {
            Some("function_call") => {
                let call = json!({"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}});
                match messages.last_mut() {
                    Some(last) if last["role"] == "assistant" => match last["tool_calls"].as_array_mut() {
                        Some(c) => c.push(call),
                        None => last["tool_calls"] = json!([call]),
                    },
                    _ => messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            Some("function_call_output") => messages.push(json!({"role": "tool", "tool_call_id": item["call_id"], "content": text(&item["output"])})),
            None | Some("message") => {
                let role = match item["role"].as_str() {
                    Some("developer" | "system") => "system",
                    Some(r) => r,
                    None => "user",
                };
                messages.push(json!({"role": role, "content": text(&item["content"])}));
            }
            _ => {}
        }
    }
    let tools: Vec<Value> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "function")
        .map(|t| json!({"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}}))
        .collect();
    json!({"model": body["model"], "messages": messages, "tools": tools})
}

fn seen(body: &Value) -> Seen {
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "function")
        .filter_map(|t| {
            Some((
                t["name"].as_str()?.to_owned(),
                t.get("parameters").cloned().unwrap_or(json!({})),
            ))
        })
        .collect();
    let answered = items(body)
        .last()
        .is_some_and(|i| i["type"] == "function_call_output");
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

/// The answer's output items: the reasoning, then a message or calls.
fn output(shared: &Shared, body: &Value, reply: &Reply, n: usize) -> Vec<Value> {
    let include = body["include"]
        .as_array()
        .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content"));
    let mut reasoning = json!({"id": format!("rs_fake{n}"), "type": "reasoning",
        "summary": [{"type": "summary_text", "text": super::REASONING}]});
    if include {
        reasoning["encrypted_content"] = json!(seal(&shared.key, n));
    }
    let mut out = vec![reasoning];
    let call = |i: usize, name: &str, arguments: &Value| {
        json!({"id": format!("fc_fake{n}_{i}"), "type": "function_call", "status": "completed",
               "call_id": format!("call_fake{n}_{i}"), "name": name, "arguments": arguments.to_string()})
    };
    match reply {
        Reply::Text { text, .. } => out.push(json!({"id": format!("msg_fake{n}"), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]})),
        Reply::Call { name, arguments } => out.push(call(0, name, arguments)),
        Reply::Calls(calls) => out.extend(calls.iter().enumerate().map(|(i, (n, a))| call(i, n, a))),
    }
    out
}

fn usage() -> Value {
    let (input, output, cached, reasoning) = USAGE;
    json!({"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
           "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
           "total_tokens": input + output})
}

async fn responses(
    State(shared): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "We could not parse the JSON body of your request.",
        );
    };
    shared.log.push(Received {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers_of(&headers),
        body: body.clone(),
    });
    let down = shared.down.load(Ordering::SeqCst);
    if down != 0 {
        return error(
            StatusCode::from_u16(down).unwrap(),
            "server_error",
            "The server is overloaded.",
        );
    }
    if let Err((code, message)) = check(&body, &shared) {
        shared.refusals.lock().unwrap().push(message.clone());
        return error(StatusCode::BAD_REQUEST, &code, &message);
    }
    let n = shared.answers.fetch_add(1, Ordering::SeqCst) + 1;
    let reply = reply(shared.brain, &body);
    let out = output(&shared, &body, &reply, n);
    let response = json!({
        "id": format!("resp_fake{n}"), "object": "response", "created_at": 1_700_000_000u64,
        "status": "completed", "model": body["model"], "output": out, "usage": usage(),
        "error": null, "incomplete_details": null, "store": body["store"] != json!(false),
    });
    if body["stream"] == json!(true) {
        return stream(&response);
    }
    axum::Json(response).into_response()
}

/// The response as events: created, each item added, its pieces, done,
/// completed.
fn stream(response: &Value) -> Response {
    let mut events: Vec<Value> = Vec::new();
    let mut created = response.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    events.push(json!({"type": "response.created", "response": created}));
    events.push(json!({"type": "response.in_progress", "response": created}));
    for (index, item) in response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = item["id"].clone();
        match item["type"].as_str() {
            Some("reasoning") => {
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": {"id": id, "type": "reasoning", "summary": []}}));
                let text = item["summary"][0]["text"].as_str().unwrap_or_default();
                events.push(json!({"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}));
                events.push(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": index, "summary_index": 0, "delta": text}));
                events.push(json!({"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": index, "summary_index": 0, "text": text}));
            }
            Some("message") => {
                let text = item["content"][0]["text"].as_str().unwrap_or_default();
                let mid = text
                    .char_indices()
                    .nth(text.chars().count() / 2)
                    .map_or(text.len(), |(i, _)| i);
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}));
                events.push(json!({"type": "response.content_part.added", "item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
                for piece in [&text[..mid], &text[mid..]] {
                    events.push(json!({"type": "response.output_text.delta", "item_id": id, "output_index": index, "content_index": 0, "delta": piece}));
                }
                events.push(json!({"type": "response.output_text.done", "item_id": id, "output_index": index, "content_index": 0, "text": text}));
            }
            _ => {
                let args = item["arguments"].as_str().unwrap_or_default();
                let mid = args.len() / 2;
                events.push(json!({"type": "response.output_item.added", "output_index": index, "item": {"id": id, "type": "function_call", "status": "in_progress", "call_id": item["call_id"], "name": item["name"], "arguments": ""}}));
                for piece in [&args[..mid], &args[mid..]] {
                    events.push(json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece}));
                }
                events.push(json!({"type": "response.function_call_arguments.done", "item_id": id, "output_index": index, "name": item["name"], "arguments": args}));
            }
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item}),
        );
    }
    events.push(json!({"type": "response.completed", "response": response}));
    let mut text = String::new();
    for (i, mut e) in events.into_iter().enumerate() {
        e["sequence_number"] = json!(i);
        text.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap_or_default()
        ));
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}
