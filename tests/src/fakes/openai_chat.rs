//! A fake OpenAI chat-completions server (`POST /v1/chat/completions`),
//! whole and streamed. It checks what the real API checks of the parts
//! the gateway writes: a `model`, a non-empty `messages`, every `tool`
//! message answering a call of an assistant message before it, and tools
//! of type `function` with a name; a request that fails a check gets a 400
//! in OpenAI's error shape.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use super::{Log, Received, Reply, Seen, USAGE, decide, headers_of};

/// A running fake.
pub struct FakeChat {
    pub addr: SocketAddr,
    pub log: Log,
}

#[derive(Clone)]
struct Shared {
    log: Log,
    answers: Arc<AtomicUsize>,
}

impl FakeChat {
    pub async fn start() -> FakeChat {
        let log = Log::default();
        let shared = Shared {
            log: log.clone(),
            answers: Arc::default(),
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeChat { addr, log }
    }

    /// The base URL an upstream declares (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }
}

fn error(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})),
    )
        .into_response()
}

/// What the real API would refuse, if anything.
fn check(body: &Value) -> Result<(), String> {
    if !body["model"].is_string() {
        return Err("you must provide a model parameter".into());
    }
    let messages = body["messages"]
        .as_array()
        .filter(|m| !m.is_empty())
        .ok_or("'messages' must be a non-empty array")?;
    let mut calls = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            // `function` is deprecated but still accepted.
            Some("system" | "developer" | "user" | "function") => {}
            Some("assistant") => {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    calls.insert(c["id"].as_str().unwrap_or_default().to_owned());
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                if !calls.contains(id) {
                    return Err(format!(
                        "Invalid parameter: messages[{i}] with role 'tool' must be a response to a preceeding message with 'tool_calls'."
                    ));
                }
            }
            other => return Err(format!("messages[{i}]: invalid role {other:?}")),
        }
    }
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if t["type"] != "function" || !t["function"]["name"].is_string() {
            return Err(format!(
                "tools[{i}]: a function tool with a name is required"
            ));
        }
    }
    Ok(())
}

/// What the request shows.
fn seen(body: &Value) -> Seen {
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let f = &t["function"];
            Some((
                f["name"].as_str()?.to_owned(),
                f.get("parameters").cloned().unwrap_or(json!({})),
            ))
        })
        .collect();
    let answered = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    Seen { tools, answered }
}

fn usage() -> Value {
    let (input, output, cached, reasoning) = USAGE;
    json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    })
}

async fn completions(
    State(shared): State<Shared>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error("We could not parse the JSON body of your request.");
    };
    shared.log.push(Received {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers_of(&headers),
        body: body.clone(),
    });
    if let Err(e) = check(&body) {
        return error(&e);
    }
    let n = shared.answers.fetch_add(1, Ordering::SeqCst) + 1;
    let id = format!("chatcmpl-fake{n}");
    let model = body["model"].as_str().unwrap_or_default().to_owned();
    let reply = decide(&seen(&body));
    if body["stream"] == json!(true) {
        let include_usage = body["stream_options"]["include_usage"] == json!(true);
        return stream(&id, &model, n, &reply, include_usage);
    }
    let (message, finish) = match &reply {
        Reply::Text { reasoning, text } => (
            json!({"role": "assistant", "content": text, "reasoning_content": reasoning, "refusal": null}),
            "stop",
        ),
        Reply::Call { name, arguments } => (
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [{
                "id": format!("call_fake{n}"), "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()},
            }]}),
            "tool_calls",
        ),
        Reply::Calls(calls) => (
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": calls.iter().enumerate().map(|(i, (name, arguments))| json!({
                "id": format!("call_fake{n}_{i}"), "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()},
            })).collect::<Vec<_>>()}),
            "tool_calls",
        ),
    };
    axum::Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": 1_700_000_000u64,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage(),
    }))
    .into_response()
}

/// The answer as chat-completion chunks: the text in two pieces, a call's
/// arguments in two pieces, the finish, the usage when asked, `[DONE]`.
fn stream(id: &str, model: &str, n: usize, reply: &Reply, include_usage: bool) -> Response {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000u64,
               "model": model, "system_fingerprint": "fp_fake",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let finish = match reply {
        Reply::Text { reasoning, text } => {
            chunks.push(chunk(json!({"reasoning_content": reasoning}), Value::Null));
            let (a, b) = text.split_at(text.len() / 2);
            chunks.push(chunk(json!({"content": a}), Value::Null));
            chunks.push(chunk(json!({"content": b}), Value::Null));
            "stop"
        }
        Reply::Calls(calls) => {
            for (i, (name, arguments)) in calls.iter().enumerate() {
                chunks.push(chunk(
                    json!({"tool_calls": [{"index": i, "id": format!("call_fake{n}_{i}"), "type": "function",
                                           "function": {"name": name, "arguments": arguments.to_string()}}]}),
                    Value::Null,
                ));
            }
            "tool_calls"
        }
        Reply::Call { name, arguments } => {
            let args = arguments.to_string();
            let (a, b) = args.split_at(args.len() / 2);
            chunks.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": format!("call_fake{n}"), "type": "function",
                                       "function": {"name": name, "arguments": a}}]}),
                Value::Null,
            ));
            chunks.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
                Value::Null,
            ));
            "tool_calls"
        }
    };
    chunks.push(chunk(json!({}), json!(finish)));
    if include_usage {
        let mut last = chunk(json!({}), Value::Null);
        last["choices"] = json!([]);
        last["usage"] = usage();
        chunks.push(last);
    }
    let mut text = String::new();
    for c in chunks {
        text.push_str(&format!("data: {c}\n\n"));
    }
    text.push_str("data: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}
