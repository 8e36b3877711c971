//! A fake of Google's Gemini API (`POST /v1beta/models/{model}:generateContent`
//! and `:streamGenerateContent?alt=sse`), that checks what the real API
//! checks of what a gateway writes:
//!
//! - `x-goog-api-key` (or `?key=`) when the fake has one: missing is 403
//!   `PERMISSION_DENIED`, wrong is 400 `INVALID_ARGUMENT`;
//! - the body's fields are the API's (an unknown name is refused, as the
//!   real API refuses `Unknown name "…"`), `contents` is not empty, roles
//!   are `user` and `model`, each part holds exactly one kind of data;
//! - a content that answers calls has one function response per call;
//! - **thought signatures**: the fake signs the first call of each answer
//!   and a final empty text part of a text answer (HMAC over the parts'
//!   contents with its key), and refuses a signature it did not make
//!   (`Corrupted thought signature.`) and, in the turn being answered
//!   (after the last user content with text), a model content whose first
//!   call has no signature — unless it is the value Google documents for
//!   history from elsewhere (`skip_thought_signature_validator`).
//!
//! It answers by a `Brain`, like the other fakes; with
//! `thinkingConfig.includeThoughts` a thought summary comes first. Calls
//! come without ids, as the API mostly sends them. Streams are server-sent
//! events of exactly `data: {json}\r\n\r\n`, ending with the connection.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};

use super::{Brain, Log, Received, Reply, Seen, USAGE, decide, headers_of};

/// The signature Google documents for calls whose own was lost.
pub const NO_SIGNATURE: &str = "skip_thought_signature_validator";

/// A running fake.
pub struct FakeGemini {
    pub addr: SocketAddr,
    pub log: Log,
    shared: Shared,
}

#[derive(Clone)]
struct Shared {
    log: Log,
    answers: Arc<AtomicUsize>,
    key: Arc<Vec<u8>>,
    api_key: Option<String>,
    brain: Brain,
    refusals: Arc<Mutex<Vec<String>>>,
}

impl FakeGemini {
    pub async fn start(brain: Brain) -> FakeGemini {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        FakeGemini::serve_on(listener, brain, None, b"gemini-fake-key")
    }

    /// The fake on `listener`, requiring `api_key` and signing with `key`
    /// (two keys: two deployments).
    pub fn serve_on(
        listener: tokio::net::TcpListener,
        brain: Brain,
        api_key: Option<&str>,
        key: &[u8],
    ) -> FakeGemini {
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
            .route("/{version}/models", get(models))
            .route("/{version}/models/{action}", post(generate))
            .route("/fake/requests", get(requests))
            .route("/fake/refusals", get(refusals))
            .with_state(shared.clone());
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeGemini { addr, log, shared }
    }

    /// The base URL an upstream declares (`…/v1beta`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1beta", self.addr)
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

async fn models() -> axum::Json<Value> {
    axum::Json(
        json!({"models": [{"name": "models/gemini-fake", "displayName": "Gemini fake",
        "supportedGenerationMethods": ["generateContent", "countTokens"]}]}),
    )
}

fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status {
        StatusCode::FORBIDDEN => "PERMISSION_DENIED",
        StatusCode::NOT_FOUND => "NOT_FOUND",
        _ => "INVALID_ARGUMENT",
    };
    (
        status,
        axum::Json(json!({"error": {"code": status.as_u16(), "message": message, "status": kind}})),
    )
        .into_response()
}

/// A value with its objects' keys sorted (what a signature covers does
/// not depend on the order keys were written in).
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", json!(k), canonical(&m[k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// What a part's signature covers: a call's name and arguments, or the
/// text of the content it ends.
fn signed_over(part: &Value, content: &[Value]) -> String {
    match call_of(part) {
        Some(f) => format!("call {} {}", f["name"], canonical(&f["args"])),
        None => {
            let text: String = content
                .iter()
                .filter(|p| !is_thought(p))
                .filter_map(|p| p["text"].as_str())
                .collect();
            format!("text {text}")
        }
    }
}

fn sign(key: &[u8], over: &str) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    mac.update(over.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// A field by its camelCase name or its snake_case one.
fn field<'a>(v: &'a Value, camel: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake(camel).as_str()))
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn call_of(part: &Value) -> Option<&Value> {
    field(part, "functionCall").filter(|f| f.is_object())
}

fn is_thought(part: &Value) -> bool {
    part["thought"] == json!(true)
}

fn signature_of(part: &Value) -> Option<&str> {
    field(part, "thoughtSignature").and_then(Value::as_str)
}

const FIELDS: [&str; 9] = [
    "model",
    "contents",
    "tools",
    "toolConfig",
    "safetySettings",
    "systemInstruction",
    "generationConfig",
    "cachedContent",
    "labels",
];

const DATA: [&str; 9] = [
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
];

/// The contents of a request, as the fake reads them.
fn contents(body: &Value) -> &[Value] {
    field(body, "contents")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn parts(content: &Value) -> &[Value] {
    content["parts"].as_array().map_or(&[], Vec::as_slice)
}

/// What the real API would refuse, if anything.
fn check(
    body: &Value,
    headers: &HeaderMap,
    query: Option<&str>,
    shared: &Shared,
) -> Result<(), (StatusCode, String)> {
    let bad = |m: String| Err((StatusCode::BAD_REQUEST, m));
    if let Some(key) = &shared.api_key {
        let given = headers
            .get("x-goog-api-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| {
                query?
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("key=").map(str::to_owned))
            });
        match given {
            None => {
                return Err((
                    StatusCode::FORBIDDEN,
                    "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.".into(),
                ));
            }
            Some(g) if &g != key => {
                return bad("API key not valid. Please pass a valid API key.".into());
            }
            Some(_) => {}
        }
    }
    let Some(obj) = body.as_object() else {
        return bad("Invalid JSON payload received.".into());
    };
    for k in obj.keys() {
        if !FIELDS.iter().any(|f| f == k || snake(f) == *k) {
            return bad(format!(
                "Invalid JSON payload received. Unknown name \"{k}\": Cannot find field."
            ));
        }
    }
    let contents = contents(body);
    if contents.is_empty() {
        return bad("* GenerateContentRequest.contents: contents is not specified".into());
    }
    let current = contents
        .iter()
        .rposition(|c| c["role"] != "model" && parts(c).iter().any(|p| p.get("text").is_some()))
        .unwrap_or(0);
    let mut calls_before = 0;
    for (i, c) in contents.iter().enumerate() {
        let role = c["role"].as_str().unwrap_or("user");
        if !matches!(role, "user" | "model") {
            return bad(format!(
                "Please use a valid role: user, model. (contents[{i}].role: {role})"
            ));
        }
        let parts = parts(c);
        if parts.is_empty() {
            return bad(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            ));
        }
        let mut responses = 0;
        let mut first_call = true;
        for (j, p) in parts.iter().enumerate() {
            let kinds = DATA.iter().filter(|d| field(p, d).is_some()).count();
            if kinds != 1 {
                return bad(format!(
                    "* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof field 'data' must have one initialized field"
                ));
            }
            if field(p, "functionResponse").is_some() {
                responses += 1;
            }
            if let Some(s) = signature_of(p)
                && s != NO_SIGNATURE
                && sign(&shared.key, &signed_over(p, parts)) != s
            {
                return bad("Corrupted thought signature.".into());
            }
            if let Some(f) = call_of(p) {
                if role == "model" && i > current && first_call && signature_of(p).is_none() {
                    return bad(format!(
                        "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                        f["name"].as_str().unwrap_or_default(),
                        i + 1
                    ));
                }
                first_call = false;
            }
        }
        if responses > 0 && responses != calls_before {
            return bad("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into());
        }
        calls_before = if role == "model" {
            parts.iter().filter(|p| call_of(p).is_some()).count()
        } else {
            0
        };
    }
    Ok(())
}

/// The request as the scripted model reads it: chat completions' shape.
fn as_chat(body: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = field(body, "systemInstruction") {
        let text: String = parts(system)
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect();
        messages.push(json!({"role": "system", "content": text}));
    }
    let mut ids: Vec<String> = Vec::new();
    for (i, c) in contents(body).iter().enumerate() {
        let parts = parts(c);
        let text: String = parts
            .iter()
            .filter(|p| !is_thought(p))
            .filter_map(|p| p["text"].as_str())
            .collect();
        if c["role"] == "model" {
            ids.clear();
            let calls: Vec<Value> = parts
                .iter()
                .filter_map(call_of)
                .enumerate()
                .map(|(j, f)| {
                    let id = format!("call_{i}_{j}");
                    ids.push(id.clone());
                    json!({"id": id, "type": "function", "function": {"name": f["name"], "arguments": f["args"].to_string()}})
                })
                .collect();
            let mut msg = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                msg["tool_calls"] = json!(calls);
            }
            messages.push(msg);
            continue;
        }
        for (j, r) in parts
            .iter()
            .filter_map(|p| field(p, "functionResponse"))
            .enumerate()
        {
            let response = &r["response"];
            let content = match response.get("output").or_else(|| response.get("error")) {
                Some(Value::String(s)) => s.clone(),
                _ => response.to_string(),
            };
            let id = ids.get(j).cloned().unwrap_or_default();
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
        }
        if !text.is_empty() {
            messages.push(json!({"role": "user", "content": text}));
        }
    }
    json!({"model": "gemini", "messages": messages, "tools": declared(body).into_iter()
        .map(|(name, parameters)| json!({"type": "function", "function": {"name": name, "parameters": parameters}}))
        .collect::<Vec<_>>()})
}

/// The declared functions: name and parameters' schema.
fn declared(body: &Value) -> Vec<(String, Value)> {
    field(body, "tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| field(t, "functionDeclarations").and_then(Value::as_array))
        .flatten()
        .filter_map(|d| {
            let schema = field(d, "parametersJsonSchema")
                .or_else(|| d.get("parameters"))
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            Some((d["name"].as_str()?.to_owned(), schema))
        })
        .collect()
}

fn seen(body: &Value) -> Seen {
    let answered = contents(body).last().is_some_and(|c| {
        parts(c)
            .iter()
            .any(|p| field(p, "functionResponse").is_some())
    });
    Seen {
        tools: declared(body),
        answered,
    }
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

/// The parts of the answer: a thought summary (when asked for), then the
/// text and its signature on a last empty part, or the calls with a
/// signature on the first.
fn answer(shared: &Shared, body: &Value, reply: &Reply) -> Vec<Value> {
    let thoughts = field(body, "generationConfig")
        .and_then(|g| field(g, "thinkingConfig"))
        .and_then(|t| field(t, "includeThoughts"))
        == Some(&json!(true));
    let mut out = Vec::new();
    if thoughts {
        out.push(json!({"text": super::REASONING, "thought": true}));
    }
    let calls: Vec<(String, Value)> = match reply {
        Reply::Text { text, .. } => {
            out.push(json!({"text": text}));
            let over = signed_over(&json!({"text": ""}), &out);
            out.push(json!({"text": "", "thoughtSignature": sign(&shared.key, &over)}));
            return out;
        }
        Reply::Call { name, arguments } => vec![(name.clone(), arguments.clone())],
        Reply::Calls(calls) => calls.clone(),
    };
    for (i, (name, args)) in calls.into_iter().enumerate() {
        let mut part = json!({"functionCall": {"name": name, "args": args}});
        if i == 0 {
            let over = signed_over(&part, &[]);
            part["thoughtSignature"] = json!(sign(&shared.key, &over));
        }
        out.push(part);
    }
    out
}

fn usage() -> Value {
    let (input, output, cached, reasoning) = USAGE;
    json!({"promptTokenCount": input, "candidatesTokenCount": output - reasoning,
           "cachedContentTokenCount": cached, "thoughtsTokenCount": reasoning,
           "totalTokenCount": input + output,
           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": input}]})
}

async fn generate(
    State(shared): State<Shared>,
    Path((_version, action)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let action = action.replace("%3A", ":").replace("%3a", ":");
    let Some((model, method)) = action.rsplit_once(':') else {
        return error(StatusCode::NOT_FOUND, "no method in the path");
    };
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        other => {
            return error(
                StatusCode::NOT_FOUND,
                &format!("method {other} is not served by this fake"),
            );
        }
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "Invalid JSON payload received.");
    };
    shared.log.push(Received {
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
        headers: headers_of(&headers),
        body: body.clone(),
    });
    if let Err((status, message)) = check(&body, &headers, uri.query(), &shared) {
        shared.refusals.lock().unwrap().push(message.clone());
        return error(status, &message);
    }
    let n = shared.answers.fetch_add(1, Ordering::SeqCst) + 1;
    let parts = answer(&shared, &body, &reply(shared.brain, &body));
    let response_id = format!("fake-response-{n}");
    let envelope = |parts: Vec<Value>, finish: Option<&str>, usage: Value| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = json!(f);
        }
        json!({"candidates": [candidate], "usageMetadata": usage,
               "modelVersion": model, "responseId": response_id})
    };
    let sse = uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
    if !stream {
        return axum::Json(envelope(parts, Some("STOP"), usage())).into_response();
    }
    // Streamed: a thought and each text in two pieces, the calls whole,
    // the finish reason and the full usage on the last chunk.
    let mut chunks: Vec<Vec<Value>> = Vec::new();
    for p in &parts {
        match p["text"].as_str() {
            Some(t) if signature_of(p).is_none() && t.chars().count() > 1 => {
                let mid = t
                    .char_indices()
                    .nth(t.chars().count() / 2)
                    .map_or(t.len(), |(i, _)| i);
                for piece in [&t[..mid], &t[mid..]] {
                    let mut q = p.clone();
                    q["text"] = json!(piece);
                    chunks.push(vec![q]);
                }
            }
            _ => chunks.push(vec![p.clone()]),
        }
    }
    let last = chunks.len().saturating_sub(1);
    let (input, _, _, _) = USAGE;
    let events: Vec<Value> = chunks
        .into_iter()
        .enumerate()
        .map(|(i, parts)| {
            if i == last {
                envelope(parts, Some("STOP"), usage())
            } else {
                envelope(
                    parts,
                    None,
                    json!({"promptTokenCount": input, "totalTokenCount": input}),
                )
            }
        })
        .collect();
    if !sse {
        // Without `alt=sse` the API streams one JSON array.
        return axum::Json(Value::Array(events)).into_response();
    }
    let mut text = String::new();
    for e in events {
        text.push_str(&format!("data: {e}\r\n\r\n"));
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}
