//! `POST /v1/messages`: Anthropic's Messages API as a face of the same tool
//! loop. The request is translated to the chat-completions request the
//! engine runs (system, text, `tool_use` and `tool_result` blocks, client
//! tools, `tool_choice`), the tool set is picked as for chat completions,
//! and the loop's answer or events are encoded as a message or as
//! Anthropic's stream events. Errors use Anthropic's error body.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use toolgate_engine::chat::{Answer, CallRecord, ChatError, Event, FinishReason};
use toolgate_engine::formatter::Call;

use super::common::{self, Notices, Translated};
use crate::http::{ApiError, AppState, Caller, ErrorShape, body_error};
use toolgate_engine::chat::DeferredTools;

pub async fn messages(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, caller, &uri, headers, body)
        .await
        .unwrap_or_else(|e| e.into_shaped(ErrorShape::Anthropic))
}

/// `true` when the client speaks the beta surface (an `anthropic-beta`
/// header, or the `?beta=true` the TypeScript SDK's `beta` namespace adds;
/// Claude Code sends both), whose types include the blocks of tools the
/// server ran: the gateway's own calls are shown as `mcp_tool_use` /
/// `mcp_tool_result`. The stable surface has no such blocks, so there they
/// are only in the `toolgate` report.
fn beta(uri: &axum::http::Uri, headers: &HeaderMap) -> bool {
    headers.contains_key("anthropic-beta")
        || uri
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "beta=true"))
}

async fn handle(
    state: AppState,
    caller: Caller,
    uri: &axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let (_, the_loop, places, notices) =
        common::plan_translated(&state, &caller, &headers, &body, to_chat_request).await?;
    let model = the_loop.request.model.clone();
    let shown = Shown {
        calls: beta(uri, &headers),
        search: the_loop.deferred.as_ref().map(|d| d.search.clone()),
    };
    let mut encoder = StreamEncoder::new(&model, shown.clone());
    let response = common::respond(
        the_loop,
        places,
        |answer| message(answer, &model, &shown),
        move |e| encoder.encode(e),
    )
    .await?;
    Ok(notices.attach(response))
}

/// `POST /v1/messages/count_tokens`: the request's input tokens. The
/// upstreams speak chat completions, which has no counting endpoint, so
/// this is an estimate: the translated request's system, messages and
/// tools as JSON, one token per four bytes (rounded up), the rule of thumb
/// for English text and code.
pub async fn count_tokens(
    State(_): State<AppState>,
    Extension(_): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let count = || -> Result<Value, ApiError> {
        let body = body.map_err(body_error)?;
        let original: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
        let translated = to_chat_request(&original)?;
        let mut bytes = 0;
        for field in ["messages", "tools"] {
            if let Some(v) = translated.fields.get(field) {
                bytes += v.to_string().len();
            }
        }
        Ok(json!({"input_tokens": bytes.div_ceil(4)}))
    };
    match count() {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_shaped(ErrorShape::Anthropic),
    }
}

/// The MCP server name the gateway's own tool calls carry in the stream
/// (`mcp_tool_use` / `mcp_tool_result` blocks, as Anthropic shows tools it
/// runs on the server side).
const SERVER_NAME: &str = "toolgate";

/// Translates a Messages request into the chat-completions request the
/// engine runs. Fields the engine does not use are not forwarded; blocks
/// and tools it cannot carry are left out with a notice.
fn to_chat_request(req: &Value) -> Result<Translated, ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    let mut notices = Notices::default();
    let mut out = Map::new();
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?;
    out.insert("model".into(), json!(model));
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(system) => {
            let text =
                text_of(system, "system").map_err(|e| ApiError::bad_request(e).param("system"))?;
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let input = obj
        .get("messages")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("`messages` is required and must be a non-empty array")
                .param("messages")
        })?;
    let mut referenced = std::collections::HashSet::new();
    for (i, m) in input.iter().enumerate() {
        // A system message that clears at the next user message is gone
        // once one follows it.
        if m["role"] == "system"
            && m["clear_at"] == "next_user_message"
            && input[i + 1..].iter().any(|later| later["role"] == "user")
        {
            continue;
        }
        translate_message(m, &mut messages, &mut referenced, &mut notices)
            .map_err(|e| ApiError::bad_request(format!("messages[{i}]: {e}")).param("messages"))?;
    }
    out.insert("messages".into(), Value::Array(messages));
    let mut deferred = Vec::new();
    let mut search = None;
    let mut programs = common::asks_for_programs(
        obj.get("tools"),
        |c| c.starts_with("code_execution_"),
        &mut notices,
    );
    if let Some(tools) = obj.get("tools").and_then(Value::as_array) {
        let mut functions = Vec::new();
        for t in tools {
            match t["type"].as_str() {
                None | Some("custom") => {}
                // Anthropic's tool search, run by the gateway over the
                // deferred tools (any model can use it).
                Some(kind) if kind.starts_with("tool_search_tool_") => {
                    search = Some(t["name"].as_str().unwrap_or(kind).to_owned());
                    continue;
                }
                // Anthropic's code execution: the gateway's code mode over
                // the request's tool set (`run_code`), for any model.
                Some(kind) if kind.starts_with("code_execution_") => {
                    programs = true;
                    notices.add(format!(
                        "`{kind}` is served by the gateway's code mode: the model writes Python that calls the tool set's tools (`run_code`) on the gateway's interpreter; there is no shell, file system or container"
                    ));
                    continue;
                }
                // A tool Anthropic runs is served by the tool set's tool of
                // its name (`web_search`, `web_fetch`), else left out.
                Some(kind) => {
                    let name = t["name"].as_str().unwrap_or(kind);
                    notices.unless_served(name, format!(
                        "tool `{name}` of type `{kind}` (a tool Anthropic runs or defines) is not served here and was left out (a tool set with a gateway tool named `{name}` serves it)"
                    ));
                    continue;
                }
            }
            let function = json!({"type": "function", "function": {
                "name": t["name"],
                "description": t.get("description").cloned().unwrap_or(json!("")),
                "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
            }});
            // A deferred tool is offered once a `tool_reference` (or a
            // call of it) loaded it; until then a search finds it.
            let name = t["name"].as_str().unwrap_or_default();
            if t["defer_loading"] == json!(true) && !referenced.contains(name) {
                deferred.push(function);
                continue;
            }
            functions.push(function);
        }
        if !functions.is_empty() {
            out.insert("tools".into(), Value::Array(functions));
        }
    }
    // Without a search, deferred tools wait for a `tool_reference` (the
    // client's own search, as Claude Code's).
    let deferred = match search {
        Some(search) if !deferred.is_empty() => Some(Box::new(DeferredTools {
            search,
            tools: deferred,
        })),
        _ => None,
    };
    if programs {
        out.insert("tool_mode".into(), json!("code"));
    }
    if obj
        .get("mcp_servers")
        .is_some_and(|s| s.as_array().is_some_and(|a| !a.is_empty()))
    {
        notices.add("`mcp_servers` (the MCP connector) is not served here; declare the servers in the gateway and they are its tools");
    }
    if let Some(choice) = obj.get("tool_choice").filter(|c| !c.is_null()) {
        let translated = match choice["type"].as_str() {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => json!({"type": "function", "function": {"name": choice["name"]}}),
            _ => {
                return Err(ApiError::bad_request(
                    "`tool_choice.type` must be auto, any, tool or none",
                )
                .param("tool_choice"));
            }
        };
        out.insert("tool_choice".into(), translated);
        if choice["disable_parallel_tool_use"] == json!(true) {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    Ok(Translated {
        fields: common::chat_request(
            obj,
            out,
            &[("max_tokens", "max_tokens"), ("stop_sequences", "stop")],
        ),
        notices,
        deferred,
    })
}

/// A chat message being built from a Messages message's blocks, in order.
#[derive(Default)]
struct Pending {
    parts: Vec<Value>,
    calls: Vec<Value>,
}

impl Pending {
    fn has_text_only(&self) -> bool {
        self.parts.iter().all(|p| p["type"] == "text")
    }

    /// The content: a string when it is all text, else the parts.
    fn content(&mut self) -> Value {
        let parts = std::mem::take(&mut self.parts);
        if parts.is_empty() {
            return Value::Null;
        }
        if parts.iter().all(|p| p["type"] == "text") {
            let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
            return json!(text.join(""));
        }
        Value::Array(parts)
    }

    /// Pushes what is pending as one message of `role`, if anything is.
    fn flush(&mut self, role: &str, out: &mut Vec<Value>) {
        if self.parts.is_empty() && self.calls.is_empty() {
            return;
        }
        let mut msg = json!({"role": role, "content": self.content()});
        if !self.calls.is_empty() {
            msg["tool_calls"] = Value::Array(std::mem::take(&mut self.calls));
        }
        out.push(msg);
    }
}

/// An image or document block as chat-completions content parts (`None`
/// when its source cannot be carried).
fn media_part(b: &Value) -> Option<Value> {
    let source = &b["source"];
    match (b["type"].as_str(), source["type"].as_str()) {
        (Some("image"), Some("base64")) => Some(json!({"type": "image_url", "image_url": {
            "url": format!("data:{};base64,{}", source["media_type"].as_str()?, source["data"].as_str()?)
        }})),
        (Some("image"), Some("url")) => {
            Some(json!({"type": "image_url", "image_url": {"url": source["url"].as_str()?}}))
        }
        (Some("document"), Some("base64")) => Some(json!({"type": "file", "file": {
            "filename": b["title"].as_str().unwrap_or("document.pdf"),
            "file_data": format!("data:{};base64,{}", source["media_type"].as_str()?, source["data"].as_str()?),
        }})),
        (Some("document"), Some("text")) => {
            let title = b["title"]
                .as_str()
                .map(|t| format!("{t}\n\n"))
                .unwrap_or_default();
            Some(json!({"type": "text", "text": format!("{title}{}", source["data"].as_str()?)}))
        }
        (Some("document"), Some("content")) => Some(json!({"type": "text",
            "text": text_of(&source["content"], "document").ok()?})),
        _ => None,
    }
}

/// A `search_result` block as text.
fn search_result_text(b: &Value) -> String {
    let body = text_of(&b["content"], "search_result").unwrap_or_default();
    format!(
        "{} ({})\n{body}",
        b["title"].as_str().unwrap_or_default(),
        b["source"].as_str().unwrap_or_default()
    )
}

/// A tool result's content: its text for the tool message, and its images
/// and documents (which a chat tool message cannot hold: they follow as a
/// user message).
fn tool_result_content(
    content: &Value,
    referenced: &mut std::collections::HashSet<String>,
    notices: &mut Notices,
) -> Result<(String, Vec<Value>), String> {
    let blocks = match content {
        Value::Null => return Ok((String::new(), Vec::new())),
        Value::String(s) => return Ok((s.clone(), Vec::new())),
        Value::Array(b) => b,
        _ => return Err("`tool_result.content` must be a string or an array of blocks".into()),
    };
    let mut text = Vec::new();
    let mut media = Vec::new();
    for b in blocks {
        match b["type"].as_str() {
            Some("text") => text.push(b["text"].as_str().unwrap_or_default().to_owned()),
            Some("image") | Some("document") => match media_part(b) {
                Some(part) => {
                    text.push(format!(
                        "[{} attached below]",
                        b["type"].as_str().unwrap_or("file")
                    ));
                    media.push(part);
                }
                None => notices.add(format!(
                    "a {} in a tool result whose source is not base64, text or a URL was left out",
                    b["type"].as_str().unwrap_or("block")
                )),
            },
            Some("search_result") => text.push(search_result_text(b)),
            Some("tool_reference") => {
                if let Some(name) = b["tool_name"].as_str() {
                    referenced.insert(name.to_owned());
                    text.push(format!("Tool `{name}` is now available."));
                }
            }
            Some(other) => notices.add(format!(
                "`{other}` blocks in tool results are not carried and were left out"
            )),
            None => {}
        }
    }
    Ok((text.join("\n"), media))
}

/// One Messages message as chat messages, its blocks in order:
/// - text, images and documents as content parts (images as `image_url`,
///   PDFs as `file`), search results as text;
/// - an assistant's `tool_use` blocks as its `tool_calls`, and the
///   gateway's own `mcp_tool_use` / `mcp_tool_result` pairs (as it streamed
///   them) as a call and its tool message;
/// - a user's `tool_result` blocks as tool messages (first, as they answer
///   the calls before), their images as a user message after them;
/// - a system message (Claude Code ends its requests with one) as a
///   system message where it stands;
/// - thinking, and blocks of tools Anthropic runs, left out (notices for
///   what the model could have used).
fn translate_message(
    m: &Value,
    out: &mut Vec<Value>,
    referenced: &mut std::collections::HashSet<String>,
    notices: &mut Notices,
) -> Result<(), String> {
    let role = m["role"].as_str().ok_or("`role` is required")?;
    if !matches!(role, "user" | "assistant" | "system") {
        return Err(format!(
            "role {role:?} is neither user, assistant nor system"
        ));
    }
    let blocks: Vec<Value> = match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => return Err("`content` must be a string or an array of blocks".into()),
    };
    let chat_role = role;
    let mut pending = Pending::default();
    // Tool messages come first in a user message; its images after them.
    let mut tool_messages = Vec::new();
    let mut tool_media = Vec::new();
    for b in &blocks {
        match b["type"].as_str() {
            Some("text") => pending
                .parts
                .push(json!({"type": "text", "text": b["text"].as_str().unwrap_or_default()})),
            Some("image") | Some("document") if role != "assistant" => match media_part(b) {
                Some(part) => pending.parts.push(part),
                None => notices.add(format!(
                    "a {} whose source is a file id or unknown was left out (send it as base64, text or a URL)",
                    b["type"].as_str().unwrap_or("block")
                )),
            },
            Some("search_result") => pending
                .parts
                .push(json!({"type": "text", "text": search_result_text(b)})),
            // A tool the model called is loaded from then on.
            Some("tool_use") if role == "assistant" => {
                if let Some(name) = b["name"].as_str() {
                    referenced.insert(name.to_owned());
                }
                pending.calls.push(call_of(b));
            }
            // The gateway's search of deferred tools, as it showed it.
            Some("server_tool_use")
                if role == "assistant"
                    && b["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("tool_search_tool")) =>
            {
                pending.calls.push(call_of(b));
            }
            Some("tool_search_tool_result") if role == "assistant" => {
                pending.flush("assistant", out);
                let names: Vec<String> = b["content"]["tool_references"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["tool_name"].as_str().map(str::to_owned))
                    .collect();
                let text = match &b["content"]["error_code"] {
                    Value::String(code) => format!("Error: the search failed ({code})"),
                    _ => json!({"tools": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()})
                        .to_string(),
                };
                referenced.extend(names);
                out.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text}));
            }
            Some("mcp_tool_use") if role == "assistant" && b["server_name"] == SERVER_NAME => {
                pending.calls.push(call_of(b));
            }
            Some("mcp_tool_result") if role == "assistant" => {
                // The gateway's call and its result: the assistant message so
                // far, then the tool message.
                pending.flush("assistant", out);
                let (mut text, _) = tool_result_content(&b["content"], referenced, notices)?;
                if b["is_error"] == json!(true) {
                    text = format!("Error: {text}");
                }
                out.push(json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text}));
            }
            Some("tool_result") if role == "user" => {
                let (mut text, media) = tool_result_content(&b["content"], referenced, notices)?;
                if b["is_error"] == json!(true) {
                    text = format!("Error: {text}");
                }
                tool_messages.push(
                    json!({"role": "tool", "tool_call_id": b["tool_use_id"], "content": text}),
                );
                tool_media.extend(media);
            }
            // The model's own reasoning stays with the upstream that made it.
            Some("thinking") | Some("redacted_thinking") => {}
            Some(other) => notices.add(format!(
                "`{other}` blocks are not carried to the model and were left out"
            )),
            None => {}
        }
    }
    out.extend(tool_messages);
    if !tool_media.is_empty() {
        out.push(json!({"role": "user", "content": tool_media}));
    }
    if chat_role == "system" {
        // Text only; an empty one (an effort statement) says nothing.
        if pending.has_text_only() {
            let content = pending.content();
            if content.as_str().is_some_and(|t| !t.is_empty()) {
                out.push(json!({"role": "system", "content": content}));
            }
        }
        return Ok(());
    }
    if role == "assistant" && pending.parts.is_empty() && pending.calls.is_empty() {
        return Ok(());
    }
    pending.flush(chat_role, out);
    Ok(())
}

/// A `tool_use`-shaped block (`id`, `name`, `input`) as a chat tool call.
fn call_of(b: &Value) -> Value {
    json!({
        "id": b["id"],
        "type": "function",
        "function": {"name": b["name"], "arguments": b["input"].to_string()},
    })
}

/// The text of a string or of an array of text blocks.
fn text_of(v: &Value, what: &str) -> Result<String, String> {
    match v {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => Ok(blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")),
        _ => Err(format!(
            "`{what}` must be a string or an array of text blocks"
        )),
    }
}

/// Anthropic's `stop_reason` for how the loop ended (a spent tool budget
/// ends with an answer: `end_turn`; the precise reason is in the report).
fn stop_reason(finish: &FinishReason) -> &'static str {
    match finish {
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        _ => "end_turn",
    }
}

fn usage(usage: &Value) -> Value {
    json!({
        "input_tokens": usage["prompt_tokens"].as_u64().unwrap_or(0),
        "output_tokens": usage["completion_tokens"].as_u64().unwrap_or(0),
    })
}

fn tool_use(c: &Call) -> Value {
    let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input})
}

fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::new_v4().simple())
}

/// A gateway tool call as Anthropic shows a tool it ran: `mcp_tool_use`.
fn mcp_tool_use(id: &str, name: &str, arguments: &str) -> Value {
    let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
    json!({"type": "mcp_tool_use", "id": id, "name": name, "server_name": SERVER_NAME, "input": input})
}

/// Which of the gateway's own calls a client is shown.
#[derive(Debug, Clone)]
struct Shown {
    /// Every call, as `mcp_tool_use` / `mcp_tool_result` (the beta surface).
    calls: bool,
    /// The search of the client's deferred tools, always shown as
    /// Anthropic's own (`server_tool_use` / `tool_search_tool_result`), so
    /// the client keeps what it loaded.
    search: Option<String>,
}

impl Shown {
    fn is_search(&self, name: &str) -> bool {
        self.search.as_deref() == Some(name)
    }

    fn shows(&self, name: &str) -> bool {
        self.calls || self.is_search(name)
    }

    /// The block that opens a gateway call.
    fn call_block(&self, id: &str, name: &str, arguments: &str) -> Value {
        if self.is_search(name) {
            let input: Value = serde_json::from_str(arguments).unwrap_or_else(|_| json!({}));
            return json!({"type": "server_tool_use", "id": id, "name": name, "input": input});
        }
        mcp_tool_use(id, name, arguments)
    }

    /// The block of a gateway call's result.
    fn result_block(&self, record: &CallRecord) -> Value {
        if !self.is_search(&record.function.name) {
            return mcp_tool_result(record);
        }
        let content = if record.success {
            let references: Vec<Value> = toolgate_engine::discovery::found_names(&record.result)
                .map(|n| json!({"type": "tool_reference", "tool_name": n}))
                .collect();
            json!({"type": "tool_search_tool_search_result", "tool_references": references})
        } else {
            json!({"type": "tool_search_tool_result_error", "error_code": "invalid_tool_input"})
        };
        json!({"type": "tool_search_tool_result", "tool_use_id": record.id, "content": content})
    }
}

/// A gateway tool call's result as `mcp_tool_result`.
fn mcp_tool_result(record: &CallRecord) -> Value {
    let text = match &record.result {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    json!({"type": "mcp_tool_result", "tool_use_id": record.id, "is_error": !record.success,
           "content": [{"type": "text", "text": text}]})
}

/// A whole answer as a Messages response: the gateway's own tool calls
/// and their results first (as `mcp_tool_use` / `mcp_tool_result`, when
/// `show_calls`), then the answer's text and the client's tool calls.
fn message(answer: Answer, model: &str, shown: &Shown) -> Value {
    let mut content = Vec::new();
    for record in &answer.summary.report.tool_calls {
        if !shown.shows(&record.function.name) {
            continue;
        }
        content.push(shown.call_block(
            &record.id,
            &record.function.name,
            &record.function.arguments,
        ));
        content.push(shown.result_block(record));
    }
    if let Some(text) = answer.content.filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    content.extend(answer.client_calls.iter().map(tool_use));
    let summary = answer.summary;
    json!({
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(&summary.finish),
        "stop_sequence": null,
        "usage": usage(&summary.usage),
        "toolgate": common::report(&summary),
    })
}

/// Encodes a loop's events as Anthropic's stream events.
struct StreamEncoder {
    id: String,
    model: String,
    /// `message_start` was sent.
    started: bool,
    /// The index of the next content block.
    next_block: usize,
    /// A text block is open.
    text_open: bool,
    /// Which gateway calls are shown as blocks.
    shown: Shown,
}

impl StreamEncoder {
    fn new(model: &str, shown: Shown) -> StreamEncoder {
        StreamEncoder {
            id: message_id(),
            model: model.to_owned(),
            started: false,
            next_block: 0,
            text_open: false,
            shown,
        }
    }

    fn event(name: &str, data: Value) -> SseEvent {
        SseEvent::default().event(name).data(data.to_string())
    }

    fn start(&self) -> SseEvent {
        Self::event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        )
    }

    /// A block sent whole: its start (with all its content) and its stop.
    fn whole_block(&mut self, block: Value, out: &mut Vec<SseEvent>) {
        let index = self.next_block;
        self.next_block += 1;
        out.push(Self::event(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        out.push(Self::event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }

    fn close_text(&mut self, out: &mut Vec<SseEvent>) {
        if self.text_open {
            self.text_open = false;
            out.push(Self::event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next_block - 1}),
            ));
        }
    }

    fn encode(&mut self, event: Event) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.start());
        }
        match event {
            Event::Content(text) => {
                if !self.text_open {
                    self.text_open = true;
                    out.push(Self::event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": self.next_block,
                               "content_block": {"type": "text", "text": ""}}),
                    ));
                    self.next_block += 1;
                }
                out.push(Self::event(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.next_block - 1,
                           "delta": {"type": "text_delta", "text": text}}),
                ));
            }
            // Reasoning has no signed thinking block to go in.
            Event::Reasoning(_) | Event::ToolProgress(_) => {}
            Event::ToolCallStarted(call) if !self.shown.shows(&call.name) => {}
            Event::ToolCallDone(record) if !self.shown.shows(&record.function.name) => {}
            // The gateway's own calls, as Anthropic shows tools it runs.
            Event::ToolCallStarted(call) => {
                self.close_text(&mut out);
                let block = self.shown.call_block(&call.id, &call.name, &call.arguments);
                self.whole_block(block, &mut out);
            }
            Event::ToolCallDone(record) => {
                self.close_text(&mut out);
                let block = self.shown.result_block(&record);
                self.whole_block(block, &mut out);
            }
            Event::ClientCalls(calls) => {
                self.close_text(&mut out);
                for c in &calls {
                    let index = self.next_block;
                    self.next_block += 1;
                    out.push(Self::event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
                    ));
                    out.push(Self::event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": index,
                               "delta": {"type": "input_json_delta", "partial_json": c.arguments}}),
                    ));
                    out.push(Self::event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ));
                }
            }
            Event::Done(summary) => {
                self.close_text(&mut out);
                let mut delta = json!({"type": "message_delta",
                    "delta": {"stop_reason": stop_reason(&summary.finish), "stop_sequence": null},
                    "usage": usage(&summary.usage)});
                delta["toolgate"] = common::report(&summary);
                out.push(Self::event("message_delta", delta));
                out.push(Self::event("message_stop", json!({"type": "message_stop"})));
            }
            Event::Failed(e) => out.push(stream_error(&e)),
        }
        out
    }
}

/// A failure after the stream started: Anthropic's `error` event.
fn stream_error(e: &ChatError) -> SseEvent {
    tracing::warn!("stream failed: {e}");
    StreamEncoder::event(
        "error",
        json!({"type": "error", "error": {"type": "api_error", "message": e.to_string()}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_translate_to_chat_completions() {
        let req = json!({
            "model": "m", "max_tokens": 100, "system": "be brief",
            "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "tu1", "name": "t", "input": {"a": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "42"}]},
                    {"type": "text", "text": "thanks"}]},
            ],
        });
        let out = Value::Object(to_chat_request(&req).unwrap().fields);
        assert_eq!(out["tool_choice"], "required");
        assert_eq!(
            out["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "tu1", "content": "42"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "thanks"}));
        let bad = json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]});
        let e = to_chat_request(&bad).unwrap_err();
        assert!(e.message.contains("messages[0]"), "{}", e.message);
    }

    mod fuzz {
        use super::super::*;
        use crate::faces::common::fuzzing::{json_value, mutate};
        use proptest::prelude::*;

        const SEED: &str =
            include_str!("../../../../tests/fixtures/faces/messages-claude-code.json");

        proptest! {
            #[test]
            fn fuzz_any_messages_request_is_translated_or_refused(
                edits in prop::collection::vec((any::<usize>(), json_value()), 0..8),
                whole in json_value(),
            ) {
                let _ = to_chat_request(&mutate(SEED, &edits));
                let _ = to_chat_request(&whole);
            }
        }
    }
}
