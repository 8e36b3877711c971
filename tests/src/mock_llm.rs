//! A scripted, OpenAI-compatible model for tests and demos.
//!
//! No model runs here, so this one follows a script written in the last user
//! message, and otherwise behaves like a real chat-completions server
//! (streaming and not, usage, tool calls in OpenAI's format):
//!
//! - `call NAME {json}`: call tool NAME with these arguments (several
//!   `call`s make parallel calls in one turn). Only offered tools are called.
//! - `fix NAME {json}`: when NAME's result was an error, call it again with
//!   these arguments (a model correcting itself).
//! - `loop NAME {json}`: call NAME on every turn (never answers).
//! - `then NAME {json}`: once tools have answered, call NAME if it is
//!   offered by then and has not answered yet (one `then` per turn, in
//!   order): a model that calls a tool an earlier call told it of.
//! - `next NAME {json}`: once tools have answered, every `next` call in one
//!   turn (parallel calls), when all are offered and none has answered:
//!   a model that makes several calls of what an earlier call found.
//! - The script is the last user message that is not tool results: a user
//!   message right after tool messages (what a client sends next to its
//!   results, e.g. Claude Code's text beside its `tool_result` blocks) is
//!   part of the results.
//! - Without a script, a question naming exactly one offered `verb_noun`
//!   tool ("weather" for `get_weather`) calls it, each required string
//!   parameter set to the question.
//! - Without a script, or once the tools have answered, it answers in text,
//!   quoting every tool result: `Tool results: [name] result ...`.
//!
//! Faults, as `[[mock:...]]` anywhere in the last user message:
//! `status=500` (or any status; `retry-after=N` adds that header),
//! `fail-first=N:STATUS` (the first N attempts of this conversation fail),
//! `hang`, `malformed` (a 200 that is not JSON), `broken-stream` (the stream
//! stops halfway), `latency=MS`, `reject-tools` (a 400 about tools when the
//! request carries `tools`), `text=FORMAT` (tool calls written as text in
//! FORMAT: `hermes`, `json`, `pythonic`, `mistral`, `xml-attrs` (BFCL's
//! `<param name=.. value=../>`), `xml-unclosed` (element-style with every
//! `</param>` forgotten, until the model is told its call could not be
//! read) instead of `tool_calls`).
//! Hostile answers, for the hardening tests: `huge=BYTES` (an answer of that
//! many bytes, produced as it is sent), `trickle=MS` (a 200 whose body comes
//! one byte every MS milliseconds, forever), `huge-index` (a streamed tool
//! call with index 1,000,000,000), `many-calls=N` (N tool calls in one
//! turn), `echo-auth` (a 400 whose message repeats the Authorization
//! header).
//! `GET /mock/requests` answers every request body it was sent, in order.
//! When the tools come only through a structured prompt (no `tools` field),
//! it always answers in text (`hermes` unless `text=` says otherwise), and
//! it reads results back from `<tool_response>` blocks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

#[derive(Default)]
struct MockState {
    requests: Mutex<Vec<Value>>,
    headers: Mutex<Vec<HashMap<String, String>>>,
    attempts: Mutex<HashMap<String, usize>>,
}

/// A running scripted model.
pub struct MockLlm {
    pub addr: SocketAddr,
    state: Arc<MockState>,
}

impl MockLlm {
    pub async fn start() -> MockLlm {
        // A backlog the size of the kernel's largest default: a load test
        // opens a thousand upstream connections at once, and a full
        // accept queue resets some of them.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(4096).unwrap();
        Self::serve_on(listener).await
    }

    pub async fn serve_on(listener: tokio::net::TcpListener) -> MockLlm {
        let state = Arc::new(MockState::default());
        let addr = listener.local_addr().unwrap();
        let app = router(Arc::clone(&state));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockLlm { addr, state }
    }

    /// The base URL clients use (`.../v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every chat request received, as JSON.
    pub fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The headers of every chat request received (names in lower case).
    pub fn request_headers(&self) -> Vec<HashMap<String, String>> {
        self.state.headers.lock().unwrap().clone()
    }
}

fn router(state: Arc<MockState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        // What the model was sent, for tests that run it as a process.
        .route(
            "/mock/requests",
            get(|State(state): State<Arc<MockState>>| async move {
                axum::Json(Value::Array(state.requests.lock().unwrap().clone()))
            }),
        )
        .route(
            "/v1/models",
            get(|| async {
                axum::Json(json!({"object": "list", "data": [
                    {"id": "mock-model", "object": "model", "created": 0, "owned_by": "mock"},
                    {"id": "mock-text-model", "object": "model", "created": 0, "owned_by": "mock"},
                ]}))
            }),
        )
        .with_state(state)
}

/// Serves the scripted model on `listener` until the process ends.
pub async fn serve_forever(listener: tokio::net::TcpListener) {
    let app = router(Arc::new(MockState::default()));
    let _ = axum::serve(listener, app).await;
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message, "type": "mock_error", "code": status.as_u16().to_string()}})),
    )
        .into_response()
}

/// The `[[mock:...]]` directives of a text.
fn directives(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = text;
    while let Some(start) = rest.find("[[mock:") {
        let after = &rest[start + 7..];
        let Some(end) = after.find("]]") else { break };
        for part in after[..end].split_whitespace() {
            let (k, v) = part.split_once('=').unwrap_or((part, ""));
            out.insert(k.to_owned(), v.to_owned());
        }
        rest = &after[end..];
    }
    out
}

/// `(verb, name, arguments)` for every `call|fix|loop|then NAME {json}`.
fn script(text: &str) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    let words = ["call ", "fix ", "loop ", "then ", "next "];
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let Some((verb, at)) = words
            .iter()
            .filter_map(|w| rest.find(w).map(|p| (*w, p)))
            .min_by_key(|(_, p)| *p)
        else {
            break;
        };
        let after = &rest[at + verb.len()..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        let json_part = after[name.len()..].trim_start();
        let mut consumed = 0;
        if !name.is_empty() && json_part.starts_with('{') {
            let mut de = serde_json::Deserializer::from_str(json_part).into_iter::<Value>();
            if let Some(Ok(args)) = de.next() {
                out.push((verb.trim().to_owned(), name.clone(), args));
                // Skip the arguments: a script nested in them is not ours.
                consumed = (after.len() - json_part.len()) + de.byte_offset();
            }
        }
        i += at + verb.len() + consumed;
    }
    out
}

/// A user's words without the context a client adds to them: Gemini
/// CLI's `<session_context>` (the date, the system, the workspace).
fn without_client_context(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<session_context>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</session_context>") {
            Some(end) => rest = &rest[start + end + "</session_context>".len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

fn content_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The model's decision for this request.
struct Reply {
    content: Option<String>,
    calls: Vec<(String, Value)>,
}

/// What the scripted model answers a chat-completions request (`req`):
/// its text, or its calls (name and arguments). The fakes of other
/// protocols ask it with their request written in chat completions' shape.
pub fn scripted(req: &Value) -> (Option<String>, Vec<(String, Value)>) {
    let r = decide(req);
    (r.content, r.calls)
}

fn decide(req: &Value) -> Reply {
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    // The script is the last real user message (structured-prompt tool
    // results also arrive as user messages, and a user message right after
    // tool results carries what came with them, e.g. Claude Code's text
    // next to its `tool_result` blocks).
    let last_user = messages
        .iter()
        .enumerate()
        .rposition(|(i, m)| {
            m["role"] == "user"
                && !content_text(m).trim_start().starts_with("<tool_response>")
                && (i == 0 || messages[i - 1]["role"] != "tool")
        })
        .unwrap_or(0);
    let user_text = messages
        .get(last_user)
        .map(|m| without_client_context(&content_text(m)))
        .unwrap_or_default();
    let offered: Vec<String> = req["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| {
                    t.pointer("/function/name")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
        .unwrap_or_default();
    let text_tools = offered_in_prompt(&messages);
    let is_offered = |n: &str| offered.iter().any(|o| o == n) || text_tools.iter().any(|o| o == n);
    let steps = script(&user_text);
    // Tool results since the user spoke, by tool name, in order.
    let after = &messages[last_user + 1..];
    let mut names_by_id: HashMap<String, String> = HashMap::new();
    for m in after.iter().filter(|m| m["role"] == "assistant") {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            names_by_id.insert(
                c["id"].as_str().unwrap_or_default().to_owned(),
                c.pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    let mut results: Vec<(String, String)> = after
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let name = names_by_id
                .get(m["tool_call_id"].as_str().unwrap_or_default())
                .cloned()
                .unwrap_or_else(|| "tool".into());
            (name, content_text(m))
        })
        .collect();
    // Structured-prompt upstreams get results back as plain text:
    // `<tool_response>{"name": ..., "content": ...}</tool_response>` blocks.
    for m in after.iter().filter(|m| m["role"] == "user") {
        let t = content_text(m);
        for block in t.split("<tool_response>").skip(1) {
            let body = block
                .split("</tool_response>")
                .next()
                .unwrap_or_default()
                .trim();
            match serde_json::from_str::<Value>(body) {
                Ok(v) => results.push((
                    v["name"].as_str().unwrap_or("tool").to_owned(),
                    v["content"]
                        .as_str()
                        .map_or_else(|| v["content"].to_string(), str::to_owned),
                )),
                Err(_) => results.push(("tool".into(), body.to_owned())),
            }
        }
    }
    let assistant_turns = after.iter().filter(|m| m["role"] == "assistant").count();

    let looping: Vec<(String, Value)> = steps
        .iter()
        .filter(|(v, n, _)| v == "loop" && is_offered(n))
        .map(|(_, n, a)| (n.clone(), a.clone()))
        .collect();
    if !looping.is_empty() {
        return Reply {
            content: None,
            calls: looping,
        };
    }
    if results.is_empty() && assistant_turns == 0 {
        let calls: Vec<(String, Value)> = steps
            .iter()
            .filter(|(v, n, _)| v == "call" && is_offered(n))
            .map(|(_, n, a)| (n.clone(), a.clone()))
            .collect();
        if !calls.is_empty() {
            return Reply {
                content: None,
                calls,
            };
        }
        if steps.is_empty()
            && let Some(call) = asked_for(req, &user_text)
        {
            return Reply {
                content: None,
                calls: vec![call],
            };
        }
        return Reply {
            content: Some(format!("Hello! You said: {}", user_text.trim())),
            calls: Vec::new(),
        };
    }
    // Several calls of tools an earlier result made known, in one turn.
    let next: Vec<&(String, String, Value)> =
        steps.iter().filter(|(v, _, _)| v == "next").collect();
    if !next.is_empty()
        && !results.is_empty()
        && next.iter().all(|(_, n, _)| is_offered(n))
        && !next
            .iter()
            .any(|(_, n, _)| results.iter().any(|(r, _)| r == n))
    {
        return Reply {
            content: None,
            calls: next
                .iter()
                .map(|(_, n, a)| (n.clone(), a.clone()))
                .collect(),
        };
    }
    // Tools an earlier result made known, one per turn.
    if let Some((_, n, a)) = steps
        .iter()
        .find(|(v, n, _)| v == "then" && is_offered(n) && !results.iter().any(|(r, _)| r == n))
    {
        return Reply {
            content: None,
            calls: vec![(n.clone(), a.clone())],
        };
    }
    // Correct a failed call once.
    if let Some((name, _)) = results.iter().rev().find(|(_, r)| r.starts_with("Error")) {
        let fixes_done = results.iter().filter(|(n, _)| n == name).count();
        if fixes_done < 2
            && let Some((_, n, a)) = steps.iter().find(|(v, n, _)| v == "fix" && n == name)
        {
            return Reply {
                content: None,
                calls: vec![(n.clone(), a.clone())],
            };
        }
    }
    let summary: Vec<String> = results.iter().map(|(n, r)| format!("[{n}] {r}")).collect();
    Reply {
        content: Some(format!("Tool results: {}", summary.join(" | "))),
        calls: Vec::new(),
    }
}

/// Without a script, a question that names exactly one offered tool of
/// the form `verb_noun` (every word after the verb, e.g. "weather" for
/// `get_weather`) is answered by calling it, each required string
/// parameter set to the question: a model that uses the one tool asked for.
fn asked_for(req: &Value, text: &str) -> Option<(String, Value)> {
    const VERBS: [&str; 6] = ["get", "list", "search", "find", "fetch", "lookup"];
    let said: Vec<String> = text
        .to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_owned)
        .collect();
    let mut named = req["tools"].as_array()?.iter().filter(|t| {
        let name = t
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut words = name.split('_');
        VERBS.contains(&words.next().unwrap_or_default())
            && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            && words.clone().count() > 0
            && words.all(|w| said.iter().any(|s| s == w))
    });
    let tool = named.next()?;
    if named.next().is_some() {
        return None;
    }
    let params = tool.pointer("/function/parameters")?;
    let mut args = serde_json::Map::new();
    for required in params["required"].as_array().into_iter().flatten() {
        let key = required.as_str()?;
        if params["properties"][key]["type"] == "string" {
            args.insert(key.to_owned(), json!(text.trim()));
        }
    }
    let name = tool.pointer("/function/name")?.as_str()?.to_owned();
    Some((name, Value::Object(args)))
}

/// Tool names a structured prompt offered (in the system message's JSON).
fn offered_in_prompt(messages: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for m in messages.iter().filter(|m| m["role"] == "system") {
        let text = content_text(m);
        let mut rest = text.as_str();
        while let Some(at) = rest.find("\"name\"") {
            let after = rest[at + 6..]
                .trim_start()
                .trim_start_matches(':')
                .trim_start();
            if let Some(stripped) = after.strip_prefix('"') {
                let name: String = stripped.chars().take_while(|c| *c != '"').collect();
                out.push(name);
            }
            rest = &rest[at + 6..];
        }
    }
    out
}

fn tokens(s: &str) -> u64 {
    (s.len() as u64).div_ceil(4).max(1)
}

/// Tool calls written as text, in one of the families models use.
fn calls_as_text(format: &str, calls: &[(String, Value)]) -> String {
    match format {
        "json" => {
            let arr: Vec<Value> = calls
                .iter()
                .map(|(n, a)| json!({"name": n, "arguments": a}))
                .collect();
            if arr.len() == 1 {
                arr[0].to_string()
            } else {
                Value::Array(arr).to_string()
            }
        }
        "pythonic" => {
            let parts: Vec<String> = calls
                .iter()
                .map(|(n, a)| {
                    let args: Vec<String> = a
                        .as_object()
                        .map(|o| o.iter().map(|(k, v)| format!("{k}={v}")).collect())
                        .unwrap_or_default();
                    format!("{n}({})", args.join(", "))
                })
                .collect();
            format!("[{}]", parts.join(", "))
        }
        // BFCL's attribute-style XML, values escaped.
        "xml-attrs" => calls
            .iter()
            .map(|(n, a)| {
                let params: String = a
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        let v = v
                            .replace('&', "&amp;")
                            .replace('<', "&lt;")
                            .replace('"', "&quot;");
                        format!("<param name=\"{k}\" value=\"{v}\" type=\"string\"/>")
                    })
                    .collect();
                format!("<function name=\"{n}\"><params>{params}</params></function>")
            })
            .collect(),
        // Element-style XML with every `</param>` forgotten (a model's slip).
        "xml-unclosed" => calls
            .iter()
            .map(|(n, a)| {
                let params: String = a
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        format!("<param name=\"{k}\">{}", v.replace('&', "&amp;"))
                    })
                    .collect();
                format!("<function name=\"{n}\">{params}</function>")
            })
            .collect(),
        "mistral" => {
            let arr: Vec<Value> = calls
                .iter()
                .map(|(n, a)| json!({"name": n, "arguments": a}))
                .collect();
            format!("[TOOL_CALLS]{}", Value::Array(arr))
        }
        _ => calls
            .iter()
            .map(|(n, a)| {
                format!(
                    "<tool_call>\n{}\n</tool_call>",
                    json!({"name": n, "arguments": a})
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

async fn chat(
    State(state): State<Arc<MockState>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    state.headers.lock().unwrap().push(
        headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    );
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    state.requests.lock().unwrap().push(req.clone());
    let messages = req["messages"].as_array().cloned().unwrap_or_default();
    let user_text = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(content_text)
        .unwrap_or_default();
    let first_user = messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(content_text)
        .unwrap_or_default();
    let d = directives(&first_user);

    if let Some(ms) = d.get("latency").and_then(|v| v.parse().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    if d.contains_key("hang") {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if let Some(spec) = d.get("fail-first") {
        let (n, status) = spec.split_once(':').unwrap_or((spec, "503"));
        let n: usize = n.parse().unwrap_or(1);
        let key = format!("{}#{}", first_user, messages.len());
        let attempt = {
            let mut a = state.attempts.lock().unwrap();
            let e = a.entry(key).or_insert(0);
            *e += 1;
            *e
        };
        if attempt <= n {
            let status = StatusCode::from_u16(status.parse().unwrap_or(503))
                .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return error(status, &format!("scripted failure {attempt} of {n}"));
        }
    }
    if let Some(status) = d.get("status").and_then(|s| s.parse::<u16>().ok()) {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = error(status, &format!("scripted {status}"));
        if let Some(ra) = d.get("retry-after") {
            resp.headers_mut()
                .insert("retry-after", ra.parse().unwrap());
        }
        return resp;
    }
    if d.contains_key("reject-tools")
        && req
            .get("tools")
            .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
    {
        return error(
            StatusCode::BAD_REQUEST,
            "this model does not support tools (function calling is not enabled)",
        );
    }
    if let Some(reply) = hostile(&d, &req, &headers) {
        return reply;
    }
    if d.contains_key("malformed") {
        return (
            StatusCode::OK,
            [("content-type", "application/json")],
            "{\"id\": \"x\", \"choices\": [",
        )
            .into_response();
    }

    let reply = decide(&req);
    // Tools that came through the prompt (no `tools` field) are called in
    // text, as a model without function calling would.
    let tools_in_request = req
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let text_format = d
        .get("text")
        .cloned()
        .or_else(|| (!tools_in_request).then(|| "hermes".to_owned()))
        // Told its call could not be read, it writes it right.
        .map(|f| {
            let told = messages
                .iter()
                .any(|m| content_text(m).contains("could not be read"));
            if f == "xml-unclosed" && told {
                "xml-attrs".to_owned()
            } else {
                f
            }
        });
    let model = req["model"].as_str().unwrap_or("mock-model").to_owned();
    let (content, calls) = match (&text_format, reply.calls.is_empty()) {
        (Some(fmt), false) => (Some(calls_as_text(fmt, &reply.calls)), Vec::new()),
        _ => (reply.content, reply.calls),
    };
    let prompt_tokens: u64 = messages.iter().map(|m| tokens(&content_text(m))).sum();
    let completion_tokens = tokens(content.as_deref().unwrap_or("")) + calls.len() as u64 * 10;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens});
    let turn = messages.len();
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (n, a))| json!({"id": format!("call_{turn}_{i}"), "type": "function", "function": {"name": n, "arguments": a.to_string()}}))
        .collect();
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let _ = user_text;

    if req["stream"] == json!(true) {
        let include_usage = req.pointer("/stream_options/include_usage") == Some(&json!(true));
        let broken = d.contains_key("broken-stream");
        return stream_reply(
            model,
            content,
            tool_calls,
            finish,
            usage,
            include_usage,
            broken,
        );
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(tool_calls);
    }
    axum::Json(json!({
        "id": format!("chatcmpl-mock-{turn}"),
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }))
    .into_response()
}

/// The hostile answers (see the module's header).
fn hostile(
    d: &HashMap<String, String>,
    req: &Value,
    headers: &axum::http::HeaderMap,
) -> Option<Response> {
    let stream = req["stream"] == json!(true);
    let sse = |events: futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>| {
        Response::builder()
            .header(
                "content-type",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .body(Body::from_stream(events))
            .unwrap()
    };
    if d.contains_key("echo-auth") {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        return Some(error(
            StatusCode::BAD_REQUEST,
            &format!(
                "invalid request; you sent Authorization: {auth} (json: {})",
                json!(auth)
            ),
        ));
    }
    if let Some(bytes) = d.get("huge").and_then(|v| v.parse::<usize>().ok()) {
        const PIECE: usize = 64 * 1024;
        let pieces = bytes.div_ceil(PIECE);
        let body: futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>> = if stream {
            let event = format!(
                "data: {}\n\n",
                json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x".repeat(PIECE)}, "finish_reason": null}]})
            );
            Box::pin(futures::stream::iter(
                (0..pieces).map(move |_| Ok(Bytes::from(event.clone()))),
            ))
        } else {
            let head = futures::stream::iter([Ok(Bytes::from_static(
                br#"{"id":"x","object":"chat.completion","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":""#,
            ))]);
            let middle =
                futures::stream::iter((0..pieces).map(|_| Ok(Bytes::from(vec![b'x'; PIECE]))));
            let tail = futures::stream::iter([Ok(Bytes::from_static(b"\"}}]}"))]);
            Box::pin(futures::StreamExt::chain(
                futures::StreamExt::chain(head, middle),
                tail,
            ))
        };
        return Some(sse(body));
    }
    if let Some(ms) = d.get("trickle").and_then(|v| v.parse::<u64>().ok()) {
        let body = futures::stream::unfold(0u64, move |n| async move {
            if n > 0 {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let byte = match (stream, n) {
                (true, _) => Bytes::from_static(b":"),
                (false, 0) => Bytes::from_static(b"{"),
                (false, _) => Bytes::from_static(b" "),
            };
            Some((Ok(byte), n + 1))
        });
        return Some(sse(Box::pin(body)));
    }
    if d.contains_key("huge-index") && stream {
        let event = json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1_000_000_000u64, "id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}]}, "finish_reason": null}]});
        let events = [
            format!("data: {event}\n\n"),
            format!(
                "data: {}\n\ndata: [DONE]\n\n",
                json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
            ),
        ];
        return Some(sse(Box::pin(futures::stream::iter(
            events.map(|e| Ok(Bytes::from(e))),
        ))));
    }
    if let Some(n) = d.get("many-calls").and_then(|v| v.parse::<usize>().ok()) {
        let calls: Vec<Value> = (0..n)
            .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"1+1\"}"}}))
            .collect();
        return Some(
            axum::Json(json!({
                "id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
            }))
            .into_response(),
        );
    }
    None
}

fn stream_reply(
    model: String,
    content: Option<String>,
    tool_calls: Vec<Value>,
    finish: &'static str,
    usage: Value,
    include_usage: bool,
    broken: bool,
) -> Response {
    let chunk = |delta: Value, finish: Option<&str>| json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    let mut events: Vec<String> =
        vec![chunk(json!({"role": "assistant", "content": ""}), None).to_string()];
    if let Some(text) = content {
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(8) {
            events.push(
                chunk(json!({"content": piece.iter().collect::<String>()}), None).to_string(),
            );
        }
    }
    for (i, c) in tool_calls.iter().enumerate() {
        events.push(chunk(json!({"tool_calls": [{"index": i, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": ""}}]}), None).to_string());
        let args = c["function"]["arguments"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mid = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(args.len(), |(i, _)| i);
        for part in [&args[..mid], &args[mid..]] {
            events.push(
                chunk(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                    None,
                )
                .to_string(),
            );
        }
    }
    events.push(chunk(json!({}), Some(finish)).to_string());
    if include_usage {
        events.push(json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 1_700_000_000, "model": model, "choices": [], "usage": usage}).to_string());
    }
    events.push("[DONE]".to_owned());
    if broken {
        let half = events.len() / 2;
        events.truncate(half.max(1));
    }
    let stream = futures::stream::iter(
        events
            .into_iter()
            .map(|e| Ok::<_, std::io::Error>(Bytes::from(format!("data: {e}\n\n")))),
    );
    // A broken stream ends the connection abruptly after the partial events.
    // (after a pause, so the partial events are flushed first).
    let tail =
        futures::StreamExt::filter_map(futures::stream::iter([broken]), |broken| async move {
            if !broken {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            Some(Err(std::io::Error::other("broken stream")))
        });
    let body = Body::from_stream(futures::StreamExt::chain(stream, tail));
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}
