//! `POST /v1/responses` (and `GET`/`DELETE /v1/responses/{id}`): OpenAI's
//! Responses API as a face of the same tool loop. The input (a string or
//! items: messages with text, image and file parts, `function_call`,
//! `function_call_output`) and `instructions`, client function and
//! `namespace` tools, `tool_choice`, `text.format` and the sampling fields
//! are translated to the engine's chat request; what cannot be served
//! (hosted tools, items of tools the server ran) is left out with a
//! notice. The answer or the loop's events are encoded as a response object
//! or as Responses stream events.
//!
//! The gateway's own tool calls appear as `mcp_call` output items (the
//! Responses API's item for a tool the server ran, with its output), so a
//! client sees what ran and never mistakes them for calls it must make;
//! client tools end the turn as `function_call` items (with their
//! `namespace` when they were offered in one). A response is kept unless
//! `store: false` (`toolgate_engine::conversations`, per API key), and
//! `previous_response_id` continues its conversation.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use toolgate_engine::chat::{Answer, CallRecord, ChatError, Event, FinishReason, Summary};
use toolgate_engine::formatter::Call;

use super::common::{self, Notices, Translated};
use crate::http::{ApiError, AppState, Caller, body_error};
use base64::Engine as _;
use toolgate_engine::chat::{DeferredTools, NO_TOOL_SET};
use toolgate_engine::conversations::{Conversations, Stored};

pub async fn responses(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let Prepared {
        the_loop,
        places,
        notices,
        skeleton,
    } = prepare(&state, &caller, &headers, &body, None).await?;
    let mut stream = StreamEncoder::new(skeleton.clone());
    let response = common::respond(
        the_loop,
        places,
        |answer| skeleton.complete(answer),
        move |e| stream.encode(e).into_iter().map(sse).collect(),
    )
    .await?;
    Ok(notices.attach(response))
}

/// A stream event (its `type` names it) as a server-sent event.
fn sse(data: Value) -> SseEvent {
    let kind = data["type"].as_str().unwrap_or("message").to_owned();
    SseEvent::default().event(kind).data(data.to_string())
}

/// A request planned and ready to run, with the response it will fill.
struct Prepared {
    the_loop: toolgate_engine::chat::Loop,
    places: common::Places,
    notices: Notices,
    skeleton: Skeleton,
}

/// Plans a Responses request: the conversation it continues (from
/// `local`, a WebSocket connection's own responses, then the store), the
/// translation, and where the answer will be kept.
async fn prepare(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
    local: Option<&Conversations>,
) -> Result<Prepared, ApiError> {
    let mut offered = Offered::default();
    let owner = caller.key_name();
    // The stored conversation a request continues, looked up first (the
    // shared state may have it).
    #[derive(serde::Deserialize)]
    struct Continues {
        previous_response_id: Option<String>,
    }
    let previous = match serde_json::from_slice::<Continues>(body) {
        Ok(Continues {
            previous_response_id: Some(id),
        }) => {
            let here = match local {
                Some(local) => local.get(&id, owner.as_deref()).await,
                None => None,
            };
            let found = match here {
                Some(found) => Some(found),
                None => state.conversations.get(&id, owner.as_deref()).await,
            };
            Some(found.ok_or_else(|| {
                ApiError::not_found(
                    "previous_response_not_found",
                    format!("no stored response `{id}` for this API key (responses are kept an hour; with `store: false`, only on the WebSocket connection that made them)"),
                )
                .param("previous_response_id")
            })?)
        }
        _ => None,
    };
    let (original, the_loop, places, notices) =
        common::plan_translated(state, caller, headers, body, |req| {
            let earlier = previous.as_ref().map_or(&[][..], |p| p.messages.as_slice());
            to_chat_request(req, &mut offered, earlier)
        })
        .await?;
    let echo = Echo::of(&original);
    let model = the_loop.request.model.clone();
    // Kept unless the request says `store: false` (then, on a WebSocket,
    // by the connection alone): the conversation before the answer
    // (instructions are not carried over), and its input items.
    let store = if original.get("store") == Some(&Value::Bool(false)) {
        local.cloned()
    } else {
        Some(state.conversations.clone())
    };
    let keep = store.map(|store| {
        let mut history = the_loop.request.messages();
        if original
            .get("instructions")
            .and_then(Value::as_str)
            .is_some()
            && !history.is_empty()
        {
            history.remove(0);
        }
        Keep {
            stored: original.get("store") != Some(&Value::Bool(false)),
            store,
            owner: owner.clone(),
            history,
            input_items: input_items(&original),
        }
    });
    Ok(Prepared {
        the_loop,
        places,
        notices,
        skeleton: Skeleton::new(&model, echo, offered, keep),
    })
}

/// What the model is asked to write when a conversation is compacted.
const COMPACT_PROMPT: &str = "Summarize the conversation so far so that it can be continued from \
    the summary alone: the user's goals, the decisions and facts established, names, numbers and \
    code words exactly as given, what was done and what remains. Write only the summary.";

/// `POST /v1/responses/compact`: a conversation (its `input`, after the
/// response `previous_response_id` names) made short enough to start a
/// new chain: the user's messages as they were and a `compaction` item
/// holding a summary the model writes. A later request sends the output
/// back as its input; the item becomes the summary again. The item's
/// `encrypted_content` is the summary encoded, not encrypted: it is the
/// client's own conversation.
pub async fn compact(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let original: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
    let obj = original
        .as_object()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?;
    let mut input = match obj.get("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        Some(_) => {
            return Err(
                ApiError::bad_request("`input` must be a string or an array of items")
                    .param("input"),
            );
        }
    };
    let kept: Vec<Value> = input
        .iter()
        .filter(|i| i["role"] == "user" && i["type"].as_str().is_none_or(|t| t == "message"))
        .map(|i| {
            let content = match &i["content"] {
                Value::String(text) => json!([{"type": "input_text", "text": text}]),
                other => other.clone(),
            };
            json!({"type": "message", "id": item_id("msg"), "role": "user", "status": "completed", "content": content})
        })
        .collect();
    input.push(json!({"role": "user", "content": COMPACT_PROMPT}));
    let mut summary_request = json!({
        "model": model, "input": input, "store": false, "tool_set": NO_TOOL_SET,
    });
    for field in ["instructions", "previous_response_id"] {
        if let Some(v) = obj.get(field).filter(|v| !v.is_null()) {
            summary_request[field] = v.clone();
        }
    }
    let body = summary_request.to_string();
    let Prepared {
        the_loop, places, ..
    } = prepare(&state, &caller, &headers, body.as_bytes(), None).await?;
    let answer = the_loop.run().await?;
    drop(places);
    let summary = answer.content.unwrap_or_default();
    let encoded = base64::engine::general_purpose::STANDARD
        .encode(json!({"toolgate_summary": summary}).to_string());
    let mut output = kept;
    output.push(json!({"type": "compaction", "id": item_id("cmp"), "encrypted_content": encoded}));
    Ok(axum::Json(json!({
        "id": format!("resp_{}", uuid::Uuid::new_v4().simple()),
        "object": "response.compaction",
        "created_at": common::unix_now(),
        "output": output,
        "usage": usage(&answer.summary.usage),
    }))
    .into_response())
}

/// The summary a `compaction` item of this gateway's holds.
fn compaction_summary(item: &Value) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(item["encrypted_content"].as_str()?)
        .ok()?;
    let inner: Value = serde_json::from_slice(&bytes).ok()?;
    inner["toolgate_summary"].as_str().map(str::to_owned)
}

/// `GET /v1/responses` upgraded to a WebSocket (the Responses API's
/// WebSocket mode): each `response.create` message runs like a streamed
/// `POST /v1/responses`, one at a time, its events sent as messages; a
/// `store: false` response is kept by the connection alone, so a
/// continuation on the same connection finds it and one on another does
/// not (`previous_response_not_found`). A failed continuation forgets the
/// response it continued.
pub async fn websocket(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    upgrade: Result<
        axum::extract::ws::WebSocketUpgrade,
        axum::extract::ws::rejection::WebSocketUpgradeRejection,
    >,
) -> Response {
    let upgrade = match upgrade {
        Ok(u) => u,
        Err(e) => {
            return ApiError::new(
                e.status(),
                "websocket_required",
                format!(
                    "GET /v1/responses is the WebSocket mode ({}); create a response with POST",
                    e.body_text()
                ),
            )
            .into_response();
        }
    };
    let limit = state.catalog().settings.limits.max_request_bytes;
    upgrade
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |socket| websocket_session(socket, state, caller, headers))
}

/// Responses a WebSocket connection keeps for itself (`store: false`).
const CONNECTION_KEEPS_BYTES: u64 = 16 * 1024 * 1024;

async fn websocket_session(
    mut socket: axum::extract::ws::WebSocket,
    state: AppState,
    caller: Caller,
    headers: HeaderMap,
) {
    use axum::extract::ws::Message;
    let local = Conversations::new(
        CONNECTION_KEEPS_BYTES,
        toolgate_engine::conversations::DEFAULT_TTL,
    );
    // A connection that says nothing for this long is closed.
    let idle = std::time::Duration::from_secs(600);
    loop {
        let message = match tokio::time::timeout(idle, socket.recv()).await {
            Ok(Some(Ok(m))) => m,
            _ => break,
        };
        let text = match message {
            Message::Text(t) => t,
            Message::Close(_) => break,
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Binary(_) => {
                let e = ApiError::bad_request("send `response.create` events as text messages");
                if send(&mut socket, ws_error(&e)).await.is_err() {
                    break;
                }
                continue;
            }
        };
        if websocket_turn(
            &mut socket,
            &state,
            &caller,
            &headers,
            &local,
            text.as_bytes(),
        )
        .await
        .is_err()
        {
            break;
        }
    }
}

async fn send(socket: &mut axum::extract::ws::WebSocket, event: Value) -> Result<(), axum::Error> {
    socket
        .send(axum::extract::ws::Message::Text(event.to_string().into()))
        .await
}

/// An error as the WebSocket mode's `error` event.
fn ws_error(e: &ApiError) -> Value {
    json!({"type": "error", "status": e.status.as_u16(), "error": e.openai_error()})
}

/// One `response.create`: its events sent as they come. `Err` only when
/// the connection is gone.
async fn websocket_turn(
    socket: &mut axum::extract::ws::WebSocket,
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    local: &Conversations,
    text: &[u8],
) -> Result<(), axum::Error> {
    let mut event: Value = match serde_json::from_slice(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            let e = ApiError::bad_request("a message is a JSON `response.create` event");
            return send(socket, ws_error(&e)).await;
        }
    };
    if event["type"] != "response.create" {
        let e = ApiError::bad_request(format!(
            "unknown event type {}: send `response.create`",
            event["type"]
        ))
        .param("type");
        return send(socket, ws_error(&e)).await;
    }
    // Each turn is a request: it spends one of the key's requests per
    // minute, as an HTTP request does.
    if let Some(key) = &caller.key
        && let Err(e) = crate::http::spend_request(state, key).await
    {
        return send(socket, ws_error(&e)).await;
    }
    let continues = event["previous_response_id"].as_str().map(str::to_owned);
    let owner = caller.key_name();
    // A failed continuation forgets what it continued.
    let forget = || async {
        if let Some(id) = &continues {
            local.remove(id, owner.as_deref()).await;
        }
    };
    if let Some(obj) = event.as_object_mut() {
        obj.remove("type");
        obj.insert("stream".into(), json!(true));
    }
    let body = event.to_string();
    let prepared = match prepare(state, caller, headers, body.as_bytes(), Some(local)).await {
        Ok(p) => p,
        Err(e) => {
            forget().await;
            return send(socket, ws_error(&e)).await;
        }
    };
    let Prepared {
        the_loop,
        places,
        skeleton,
        ..
    } = prepared;
    let events = match the_loop.start_stream().await {
        Ok(events) => events,
        Err(e) => {
            forget().await;
            return send(socket, ws_error(&ApiError::from(e))).await;
        }
    };
    let mut encoder = StreamEncoder::new(skeleton);
    let mut events = std::pin::pin!(events);
    while let Some(e) = futures::StreamExt::next(&mut events).await {
        let failed = matches!(e, Event::Failed(_));
        for data in encoder.encode(e) {
            send(socket, data).await?;
        }
        if failed {
            forget().await;
        }
    }
    drop(places);
    Ok(())
}

/// `GET /v1/responses/{id}`: a stored response of the caller's key.
pub async fn retrieve(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let stored = kept(&state, &caller, &id).await?;
    Ok(axum::Json(stored.response.clone()).into_response())
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    if !state
        .conversations
        .remove(&id, caller.key_name().as_deref())
        .await
    {
        return Err(not_kept(&id));
    }
    Ok(axum::Json(json!({"id": id, "object": "response", "deleted": true})).into_response())
}

/// `GET /v1/responses/{id}/input_items`: the request's input items, each
/// with an id.
pub async fn input_items_of(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Response, ApiError> {
    let stored = kept(&state, &caller, &id).await?;
    let data: Vec<Value> = stored
        .input_items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let mut item = item.clone();
            if item.get("id").is_none()
                && let Some(o) = item.as_object_mut()
            {
                o.insert("id".into(), json!(format!("{id}_in_{i}")));
            }
            item
        })
        .collect();
    Ok(axum::Json(json!({
        "object": "list",
        "first_id": data.first().map(|d| d["id"].clone()),
        "last_id": data.last().map(|d| d["id"].clone()),
        "has_more": false,
        "data": data,
    }))
    .into_response())
}

async fn kept(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<std::sync::Arc<Stored>, ApiError> {
    state
        .conversations
        .get(id, caller.key_name().as_deref())
        .await
        .ok_or_else(|| not_kept(id))
}

fn not_kept(id: &str) -> ApiError {
    ApiError::not_found(
        "response_not_found",
        format!(
            "no stored response `{id}` for this API key (kept an hour, in the replica that made it)"
        ),
    )
}

/// What the client offered, as the face needs it to give calls back.
///
/// Function tools grouped in `namespace` tools (Codex sends every MCP
/// server it knows as one) are flattened for the model as
/// `namespace__name`; deferred tools (`defer_loading`) are kept as the
/// client defined them, for the `tool_search_output` that loads them.
#[derive(Debug, Clone, Default)]
struct Offered {
    /// Flat name → (namespace, name).
    namespaces: std::collections::HashMap<String, (String, String)>,
    /// Flat name of a deferred tool → its definition as the client sent
    /// it (a namespaced one inside its `namespace`).
    deferred: std::collections::HashMap<String, Value>,
    /// The client runs `tool_search` itself (`execution: "client"`).
    client_search: bool,
}

/// The name of OpenAI's tool search, as the model is offered it.
const TOOL_SEARCH: &str = "tool_search";

impl Offered {
    /// The name the model sees for `name` in `namespace`.
    fn flat(namespace: &str, name: &str) -> String {
        format!("{namespace}__{name}")
    }

    /// The name the model knows a call (or `tool_choice`) by: its `name`,
    /// flattened with its `namespace` when it has one.
    fn flat_name_of(item: &Value) -> String {
        let name = item["name"].as_str().unwrap_or_default();
        match item["namespace"].as_str() {
            Some(ns) => Offered::flat(ns, name),
            None => name.to_owned(),
        }
    }

    /// A call's `namespace` and `name` as the client offered them.
    fn split<'a>(&'a self, flat: &'a str) -> (Option<&'a str>, &'a str) {
        match self.namespaces.get(flat) {
            Some((namespace, name)) => (Some(namespace), name),
            None => (None, flat),
        }
    }

    /// A client call of the client's own `tool_search`.
    fn is_client_search(&self, name: &str) -> bool {
        self.client_search && name == TOOL_SEARCH
    }
}

/// The flat names of the tools an input item loads or shows loaded: a
/// call's tool, and a `tool_search_output`'s tools (with their definitions).
fn loaded_by(item: &Value, out: &mut Vec<(String, Option<Value>)>) {
    match item["type"].as_str() {
        Some("function_call") => {
            let flat = Offered::flat_name_of(item);
            out.push((flat, None));
        }
        Some("tool_search_output") => {
            for t in item["tools"].as_array().into_iter().flatten() {
                match t["type"].as_str() {
                    Some("function") => {
                        out.push((
                            t["name"].as_str().unwrap_or_default().to_owned(),
                            Some(t.clone()),
                        ));
                    }
                    Some("namespace") => {
                        let ns = t["name"].as_str().unwrap_or_default();
                        for inner in t["tools"].as_array().into_iter().flatten() {
                            let name = inner["name"].as_str().unwrap_or_default();
                            out.push((Offered::flat(ns, name), Some(inner.clone())));
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// Input items scanned for the tools they load (the rest are translated
/// all the same; this bounds only the scan).
const MAX_SCANNED_ITEMS: usize = 10_000;

/// A function tool of the request as a chat function.
fn function_tool(t: &Value, name: &str) -> Value {
    let mut f = json!({"name": name, "parameters": t.get("parameters").cloned().unwrap_or(json!({"type": "object"}))});
    if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
        f["description"] = d.clone();
    }
    if let Some(s) = t.get("strict").filter(|s| !s.is_null()) {
        f["strict"] = s.clone();
    }
    json!({"type": "function", "function": f})
}

/// Translates a Responses request into the chat request the engine runs,
/// continuing `earlier` (a stored conversation, for `previous_response_id`);
/// what it cannot carry (hosted tools, items of tools the server ran) is
/// left out with a notice.
fn to_chat_request(
    req: &Value,
    offered: &mut Offered,
    earlier: &[Value],
) -> Result<Translated, ApiError> {
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
    let (mut functions, deferred) = translate_tools(obj, offered, earlier, &mut notices);
    // Programmatic tool calling: served by code mode over the tool set.
    if common::asks_for_programs(obj.get("tools"), |c| c == "programmatic", &mut notices) {
        out.insert("tool_mode".into(), json!("code"));
    }
    let mut messages = Vec::new();
    if let Some(instructions) = obj.get("instructions").and_then(Value::as_str) {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    messages.extend(earlier.iter().cloned());
    match obj.get("input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                translate_item(item, &mut messages, &mut notices).map_err(|e| {
                    ApiError::bad_request(format!("input[{i}]: {e}")).param("input")
                })?;
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "`input` is required: a string or an array of items",
            )
            .param("input"));
        }
    }
    if !earlier.is_empty() {
        check_outputs_answer_calls(&messages)?;
    }
    out.insert("messages".into(), Value::Array(messages));
    if let Some(choice) = tool_choice(obj, offered, &mut functions, &mut notices) {
        out.insert("tool_choice".into(), choice);
    }
    if !functions.is_empty() {
        out.insert("tools".into(), Value::Array(functions));
    }
    if let Some(effort) = obj.get("reasoning").and_then(|r| r["effort"].as_str()) {
        out.insert("reasoning_effort".into(), json!(effort));
    }
    if let Some(format) = obj.get("text").and_then(|t| t.get("format")) {
        match format["type"].as_str() {
            Some("json_schema") => {
                let mut schema = json!({"name": format["name"], "schema": format["schema"]});
                if let Some(s) = format.get("strict").filter(|s| !s.is_null()) {
                    schema["strict"] = s.clone();
                }
                out.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": schema}),
                );
            }
            Some("json_object") => {
                out.insert("response_format".into(), json!({"type": "json_object"}));
            }
            _ => {}
        }
    }
    Ok(Translated {
        fields: common::chat_request(
            obj,
            out,
            &[
                ("max_output_tokens", "max_tokens"),
                ("parallel_tool_calls", "parallel_tool_calls"),
            ],
        ),
        notices,
        deferred,
    })
}

/// The request's tools as chat functions (namespaced ones flattened,
/// those the input loaded included), and its deferred ones with the
/// gateway's search over them; hosted tools are left out unless the tool
/// set serves them.
fn translate_tools(
    obj: &Map<String, Value>,
    offered: &mut Offered,
    earlier: &[Value],
    notices: &mut Notices,
) -> (Vec<Value>, Option<Box<DeferredTools>>) {
    // What the input loads: tools it called or a search loaded.
    let mut loaded = Vec::new();
    if let Some(items) = obj.get("input").and_then(Value::as_array) {
        for item in items.iter().take(MAX_SCANNED_ITEMS) {
            loaded_by(item, &mut loaded);
        }
    }
    for m in earlier {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            if let Some(name) = c["function"]["name"].as_str() {
                loaded.push((name.to_owned(), None));
            }
        }
    }
    let loaded_names: std::collections::HashSet<&str> =
        loaded.iter().map(|(n, _)| n.as_str()).collect();
    let is_loaded = |flat: &str| loaded_names.contains(flat);
    let tools = obj.get("tools").and_then(Value::as_array);
    let search = tools
        .into_iter()
        .flatten()
        .find(|t| t["type"] == TOOL_SEARCH);
    offered.client_search = search.is_some_and(|t| t["execution"] == "client");
    // Tools first: the input's calls are named as the tools are.
    let mut functions = Vec::new();
    let mut deferred = Vec::new();
    // A deferred tool waits for a search when there is one to find it.
    let mut add = |function: Value, flat: &str, defer: bool, definition: &Value| {
        if defer && search.is_some() && !is_loaded(flat) {
            offered.deferred.insert(flat.to_owned(), definition.clone());
            deferred.push(function);
        } else {
            functions.push(function);
        }
    };
    for t in tools.into_iter().flatten() {
        match t["type"].as_str() {
            Some("function") => {
                let name = t["name"].as_str().unwrap_or_default();
                add(
                    function_tool(t, name),
                    name,
                    t["defer_loading"] == json!(true),
                    t,
                );
            }
            Some("namespace") => {
                let namespace = t["name"].as_str().unwrap_or_default();
                for inner in t["tools"].as_array().into_iter().flatten() {
                    if inner["type"] != "function" {
                        notices.add(format!(
                            "tools of type `{}` in namespace `{namespace}` are not served here and were left out",
                            inner["type"].as_str().unwrap_or("?")
                        ));
                        continue;
                    }
                    let name = inner["name"].as_str().unwrap_or_default();
                    let flat = Offered::flat(namespace, name);
                    offered
                        .namespaces
                        .insert(flat.clone(), (namespace.to_owned(), name.to_owned()));
                    let mut definition = t.clone();
                    definition["tools"] = json!([inner]);
                    let defer =
                        inner["defer_loading"] == json!(true) || t["defer_loading"] == json!(true);
                    add(function_tool(inner, &flat), &flat, defer, &definition);
                }
            }
            Some(TOOL_SEARCH) => {}
            // A hosted tool is served by the tool set's tool of its name
            // (`web_search` for every version of it), else left out.
            Some(kind) => {
                let gateway_name = if kind.starts_with("web_search") {
                    "web_search"
                } else {
                    kind
                };
                notices.unless_served(gateway_name, format!(
                    "`{kind}` tools are hosted tools this gateway does not run; left out (a tool set with a gateway tool named `{gateway_name}` serves it)"
                ));
            }
            None => notices.add("a tool without `type` was left out"),
        }
    }
    // Tools a client's search loaded that the request no longer lists.
    let mut listed: std::collections::HashSet<String> = functions
        .iter()
        .filter_map(|f| f["function"]["name"].as_str().map(str::to_owned))
        .collect();
    for (flat, definition) in &loaded {
        if let Some(d) = definition
            && listed.insert(flat.clone())
        {
            functions.push(function_tool(d, flat));
        }
    }
    let deferred = match search {
        Some(t) if offered.client_search => {
            // The client's own search: a tool like its others.
            let mut f = json!({"name": TOOL_SEARCH,
                "parameters": t.get("parameters").filter(|p| !p.is_null()).cloned()
                    .unwrap_or(json!({"type": "object", "properties": {"query": {"type": "string"}}}))});
            if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
                f["description"] = d.clone();
            }
            functions.push(json!({"type": "function", "function": f}));
            None
        }
        Some(_) if !deferred.is_empty() => Some(Box::new(DeferredTools {
            search: TOOL_SEARCH.to_owned(),
            tools: deferred,
        })),
        _ => None,
    };
    (functions, deferred)
}

/// `tool_choice` as chat completions has it; `allowed_tools` also keeps
/// `functions` to the listed ones.
fn tool_choice(
    obj: &Map<String, Value>,
    offered: &Offered,
    functions: &mut Vec<Value>,
    notices: &mut Notices,
) -> Option<Value> {
    match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(json!(s)),
        Some(c) if c["type"] == "function" => {
            let name = Offered::flat_name_of(c);
            Some(json!({"type": "function", "function": {"name": name}}))
        }
        Some(c) if c["type"] == "allowed_tools" => {
            // Only the listed tools, called as `mode` says.
            let allowed: Vec<String> = c["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
            functions.retain(|f| {
                let flat = f["function"]["name"].as_str().unwrap_or_default();
                let (_, name) = offered.split(flat);
                allowed.iter().any(|a| a == flat || a == name)
            });
            Some(json!(c["mode"].as_str().unwrap_or("auto")))
        }
        Some(c) => {
            notices.add(format!(
                "`tool_choice` of type `{}` names a tool this gateway does not run; `auto` instead",
                c["type"].as_str().unwrap_or("?")
            ));
            None
        }
    }
}

/// Continuing a response, a tool output answers one of its calls (or of
/// the input's): one that answers none is a mistake the model must not be
/// shown.
fn check_outputs_answer_calls(messages: &[Value]) -> Result<(), ApiError> {
    let calls: std::collections::HashSet<&str> = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().into_iter().flatten())
        .filter_map(|c| c["id"].as_str())
        .collect();
    match messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str())
        .find(|id| !calls.contains(id))
    {
        Some(orphan) => Err(ApiError::bad_request(format!(
            "no tool call found for function call output with call_id `{orphan}`"
        ))
        .param("input")),
        None => Ok(()),
    }
}

/// Content parts (`input_text`, `output_text`, `input_image`,
/// `input_file`) as a chat message's content: a string when all text,
/// else parts (images as `image_url`, files as `file`).
fn parts_content(parts: &[Value], notices: &mut Notices) -> Value {
    let mut out = Vec::new();
    for p in parts {
        match p["type"].as_str() {
            Some("input_text") | Some("output_text") | Some("text") | Some("refusal") => {
                let text = p["text"].as_str().or_else(|| p["refusal"].as_str());
                out.push(json!({"type": "text", "text": text.unwrap_or_default()}));
            }
            Some("input_image") => match p["image_url"].as_str() {
                Some(url) => {
                    let mut image = json!({"url": url});
                    if let Some(detail) = p["detail"].as_str() {
                        image["detail"] = json!(detail);
                    }
                    out.push(json!({"type": "image_url", "image_url": image}));
                }
                None => notices.add("an `input_image` given by `file_id` was left out (send it as `image_url`: a URL or a data URL)"),
            },
            Some("input_file") => {
                let mut file = Map::new();
                for k in ["file_data", "file_id", "filename"] {
                    if let Some(v) = p.get(k).filter(|v| !v.is_null()) {
                        file.insert(k.into(), v.clone());
                    }
                }
                match p["file_url"].as_str() {
                    Some(url) if file.is_empty() || !file.contains_key("file_data") => {
                        out.push(json!({"type": "text", "text": format!("[file: {url}]")}));
                        notices.add("an `input_file` given by `file_url` is passed to the model as its URL only");
                    }
                    _ => out.push(json!({"type": "file", "file": file})),
                }
            }
            Some(other) => notices.add(format!("content parts of type `{other}` were left out")),
            None => {}
        }
    }
    if out.iter().all(|p| p["type"] == "text") {
        let text: Vec<&str> = out.iter().filter_map(|p| p["text"].as_str()).collect();
        return json!(text.join(""));
    }
    Value::Array(out)
}

/// One input item as chat messages: a message as a message, a
/// `function_call` as an assistant's tool call (consecutive calls in one
/// assistant message; a namespaced call by its flat name), a
/// `function_call_output` as a tool message (its images as a user message
/// after it).
fn translate_item(item: &Value, out: &mut Vec<Value>, notices: &mut Notices) -> Result<(), String> {
    // An item reference may leave out its `type`: it has an `id` and no role.
    let kind = match item["type"].as_str() {
        None if item.get("role").is_none() && item.get("id").is_some() => Some("item_reference"),
        kind => kind,
    };
    match kind {
        None | Some("message") => {
            let role = match item["role"].as_str() {
                Some("developer") | Some("system") => "system",
                Some("user") => "user",
                Some("assistant") => "assistant",
                other => {
                    return Err(format!(
                        "role {other:?} is not user, assistant, system or developer"
                    ));
                }
            };
            let content = match &item["content"] {
                Value::String(s) => json!(s),
                Value::Array(parts) => parts_content(parts, notices),
                _ => return Err("`content` must be a string or an array of parts".into()),
            };
            out.push(json!({"role": role, "content": content}));
        }
        Some("function_call") => {
            let name = Offered::flat_name_of(item);
            let call = json!({
                "id": item["call_id"],
                "type": "function",
                "function": {"name": name, "arguments": item["arguments"]},
            });
            match out.last_mut() {
                // The calls join the assistant message they follow.
                Some(last) if last["role"] == "assistant" => {
                    match last["tool_calls"].as_array_mut() {
                        Some(calls) => calls.push(call),
                        None => last["tool_calls"] = json!([call]),
                    }
                }
                _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        Some("function_call_output") => {
            // A string, or content parts (what the Agents SDK sends for an
            // MCP tool's result, or an image a tool made).
            let (output, media) = match &item["output"] {
                Value::String(s) => (s.clone(), None),
                Value::Array(parts) => match parts_content(parts, notices) {
                    Value::String(s) => (s, None),
                    Value::Array(parts) => {
                        let (text, media): (Vec<Value>, Vec<Value>) =
                            parts.into_iter().partition(|p| p["type"] == "text");
                        let text: Vec<&str> =
                            text.iter().filter_map(|p| p["text"].as_str()).collect();
                        (text.join(""), Some(media))
                    }
                    _ => (String::new(), None),
                },
                other => (other.to_string(), None),
            };
            out.push(json!({"role": "tool", "tool_call_id": item["call_id"], "content": output}));
            if let Some(media) = media.filter(|m| !m.is_empty()) {
                out.push(json!({"role": "user", "content": media}));
            }
        }
        // A search of deferred tools (the client's or the gateway's) and
        // what it loaded: a call and its tool message.
        Some("tool_search_call") => {
            let call = json!({
                "id": call_id_of(item),
                "type": "function",
                "function": {"name": TOOL_SEARCH, "arguments": item["arguments"].to_string()},
            });
            match out.last_mut() {
                Some(last) if last["role"] == "assistant" => {
                    match last["tool_calls"].as_array_mut() {
                        Some(calls) => calls.push(call),
                        None => last["tool_calls"] = json!([call]),
                    }
                }
                _ => out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
            }
        }
        // A conversation compacted here: its summary, where it stood.
        Some("compaction") => match compaction_summary(item) {
            Some(summary) => out.push(json!({"role": "user",
                "content": format!("Summary of the conversation so far:\n{summary}")})),
            None => notices.add("a `compaction` item made by another server cannot be read here and was left out"),
        },
        Some("tool_search_output") => {
            let mut names = Vec::new();
            loaded_by(item, &mut names);
            let tools: Vec<Value> = names.iter().map(|(n, _)| json!({"name": n})).collect();
            out.push(json!({"role": "tool", "tool_call_id": call_id_of(item),
                            "content": json!({"tools": tools}).to_string()}));
        }
        // The model's own reasoning stays with the upstream that made it;
        // the gateway's own calls are in the conversation as the model saw
        // them only while the loop runs.
        Some("reasoning") | Some("mcp_call") | Some("mcp_list_tools") => {}
        Some(other) => notices.add(format!(
            "input items of type `{other}` (a tool this gateway does not run, or a stored item) were left out"
        )),
    }
    Ok(())
}

/// A search item's `call_id`, or (a server search's may have none) the
/// id its call and output share.
fn call_id_of(item: &Value) -> Value {
    match item["call_id"].as_str() {
        Some(id) => json!(id),
        None => json!(
            item["id"]
                .as_str()
                .and_then(|id| id.get(4..))
                .unwrap_or("tool_search")
        ),
    }
}

/// Request fields a response repeats back, with the API's defaults where
/// the request has none (the response object has every field).
#[derive(Debug, Clone)]
struct Echo(Map<String, Value>);

impl Echo {
    fn of(req: &Value) -> Echo {
        let defaults = [
            ("instructions", Value::Null),
            ("tools", json!([])),
            ("tool_choice", json!("auto")),
            ("parallel_tool_calls", json!(true)),
            ("temperature", json!(1.0)),
            ("top_p", json!(1.0)),
            ("presence_penalty", json!(0.0)),
            ("frequency_penalty", json!(0.0)),
            ("top_logprobs", json!(0)),
            ("max_output_tokens", Value::Null),
            ("max_tool_calls", Value::Null),
            ("metadata", json!({})),
            ("text", json!({"format": {"type": "text"}})),
            ("reasoning", Value::Null),
            ("previous_response_id", Value::Null),
            ("service_tier", json!("default")),
            ("safety_identifier", Value::Null),
            ("prompt_cache_key", Value::Null),
        ];
        let mut echo = Map::new();
        for (k, default) in defaults {
            let v = req
                .get(k)
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(default);
            echo.insert(k.into(), v);
        }
        // Function tools with every field of their type.
        if let Some(tools) = echo.get_mut("tools").and_then(Value::as_array_mut) {
            for t in tools.iter_mut().filter(|t| t["type"] == "function") {
                if let Some(t) = t.as_object_mut() {
                    for k in ["description", "parameters", "strict"] {
                        t.entry(k).or_insert(Value::Null);
                    }
                }
            }
        }
        Echo(echo)
    }
}

/// The response object's fixed parts, filled in as the answer comes.
#[derive(Debug, Clone)]
struct Skeleton {
    id: String,
    created_at: u64,
    model: String,
    echo: Echo,
    offered: Offered,
    /// Where the response is kept, when the request asks.
    keep: Option<Keep>,
}

/// What a response is kept with (`store`, on unless `false`).
#[derive(Debug, Clone)]
struct Keep {
    /// `store` in the response object: kept for the key, not only by a
    /// WebSocket connection.
    stored: bool,
    store: Conversations,
    owner: Option<String>,
    /// The conversation before the answer, as chat messages.
    history: Vec<Value>,
    input_items: Vec<Value>,
}

impl Keep {
    /// Keeps `response` with the conversation it ends (its text and the
    /// client's calls as the assistant's message).
    fn save(&self, response: &Value) {
        let mut text = String::new();
        let mut calls = Vec::new();
        for item in response["output"].as_array().into_iter().flatten() {
            match item["type"].as_str() {
                Some("message") => {
                    for part in item["content"].as_array().into_iter().flatten() {
                        text.push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
                Some("function_call") => {
                    let name = Offered::flat_name_of(item);
                    calls.push(json!({"id": item["call_id"], "type": "function",
                        "function": {"name": name, "arguments": item["arguments"]}}));
                }
                Some("tool_search_call") if item["execution"] == "client" => {
                    calls.push(json!({"id": item["call_id"], "type": "function",
                        "function": {"name": TOOL_SEARCH, "arguments": item["arguments"].to_string()}}));
                }
                _ => {}
            }
        }
        let mut answer =
            json!({"role": "assistant", "content": (!text.is_empty()).then_some(text)});
        if !calls.is_empty() {
            answer["tool_calls"] = Value::Array(calls);
        }
        let mut messages = self.history.clone();
        messages.push(answer);
        let id = response["id"].as_str().unwrap_or_default();
        let kept = self.store.put(
            id,
            Stored {
                owner: self.owner.clone(),
                messages,
                input_items: self.input_items.clone(),
                response: response.clone(),
            },
        );
        if !kept {
            tracing::info!("response {id} is too large to keep");
        }
    }
}

/// A request's `input` as items (a string is one user message).
fn input_items(req: &Value) -> Vec<Value> {
    match req.get("input") {
        Some(Value::String(text)) => vec![json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}]})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

impl Skeleton {
    fn new(model: &str, echo: Echo, offered: Offered, keep: Option<Keep>) -> Skeleton {
        Skeleton {
            id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
            created_at: common::unix_now(),
            model: model.to_owned(),
            echo,
            offered,
            keep,
        }
    }

    /// The response object with `status`, `output` and what else is known.
    fn object(&self, status: &str, output: Vec<Value>, summary: Option<&Summary>) -> Value {
        let mut r = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": null,
            "status": status,
            "model": self.model,
            "output": output,
            "error": null,
            "incomplete_details": null,
            "store": self.keep.as_ref().is_some_and(|k| k.stored),
            "background": false,
            "truncation": "disabled",
            "usage": null,
        });
        if let Some(obj) = r.as_object_mut() {
            obj.extend(self.echo.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(s) = summary {
            r["usage"] = usage(&s.usage);
            r["toolgate"] = common::report(s);
            r["completed_at"] = json!(common::unix_now());
            if s.finish == FinishReason::Length {
                r["status"] = json!("incomplete");
                r["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
        }
        r
    }

    /// A whole answer as a response object.
    fn complete(&self, answer: Answer) -> Value {
        let mut output: Vec<Value> = answer
            .summary
            .report
            .tool_calls
            .iter()
            .flat_map(|c| self.gateway_items(c))
            .collect();
        if let Some(text) = answer.content.filter(|t| !t.is_empty()) {
            output.push(message_item(&item_id("msg"), &text, "completed"));
        }
        output.extend(
            answer
                .client_calls
                .iter()
                .map(|c| self.client_item(c, "completed")),
        );
        let response = self.object("completed", output, Some(&answer.summary));
        if let Some(keep) = &self.keep {
            keep.save(&response);
        }
        response
    }
}

fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

impl Skeleton {
    /// A gateway call as output items: the search of deferred tools as
    /// OpenAI's own (`tool_search_call` and the `tool_search_output` that
    /// loads the tools found, as the client defined them), any other as an
    /// `mcp_call`.
    fn gateway_items(&self, c: &CallRecord) -> Vec<Value> {
        if c.function.name != TOOL_SEARCH || self.offered.deferred.is_empty() {
            return vec![mcp_call(c, "completed")];
        }
        let arguments: Value = serde_json::from_str(&c.function.arguments).unwrap_or(json!({}));
        let tools: Vec<Value> = toolgate_engine::discovery::found_names(&c.result)
            .filter_map(|n| self.offered.deferred.get(n).cloned())
            .collect();
        let status = if c.success { "completed" } else { "incomplete" };
        vec![
            json!({"type": "tool_search_call", "id": format!("tsc_{}", c.id), "call_id": c.id,
                   "execution": "server", "status": status, "arguments": arguments}),
            json!({"type": "tool_search_output", "id": format!("tso_{}", c.id), "call_id": c.id,
                   "execution": "server", "status": status, "tools": tools}),
        ]
    }

    /// A client call as an output item: a `function_call` (with its
    /// `namespace` when the tool was offered in one), or the client's own
    /// `tool_search` as a `tool_search_call`.
    fn client_item(&self, c: &Call, status: &str) -> Value {
        if self.offered.is_client_search(&c.name) {
            let arguments: Value = serde_json::from_str(&c.arguments).unwrap_or(json!({}));
            return json!({"type": "tool_search_call", "id": item_id("tsc"), "call_id": c.id,
                          "execution": "client", "status": status, "arguments": arguments});
        }
        function_call(&item_id("fc"), c, status, &self.offered)
    }
}

/// A client call as a `function_call` item, with its `namespace` when the
/// tool was offered in one.
fn function_call(id: &str, c: &Call, status: &str, offered: &Offered) -> Value {
    let (namespace, name) = offered.split(&c.name);
    let mut item = json!({"type": "function_call", "id": id, "call_id": c.id, "name": name, "arguments": c.arguments, "status": status});
    if let Some(ns) = namespace {
        item["namespace"] = json!(ns);
    }
    item
}

/// A gateway tool call as the item of a tool the server ran.
fn mcp_call(c: &CallRecord, status: &str) -> Value {
    let mut item = json!({
        "type": "mcp_call",
        "id": format!("mcp_{}", c.id),
        "server_label": "toolgate",
        "name": c.function.name,
        "arguments": c.function.arguments,
        "status": status,
        "output": null,
        "error": null,
    });
    if c.success {
        item["output"] = match &c.result {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        };
    } else {
        item["error"] = json!(c.result.as_str().unwrap_or("the call failed"));
    }
    item
}

fn usage(usage: &Value) -> Value {
    let input = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let output = usage["completion_tokens"].as_u64().unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output,
    })
}

/// Encodes a loop's events as Responses stream events.
struct StreamEncoder {
    skeleton: Skeleton,
    sequence: u64,
    started: bool,
    /// Output items so far (for `response.completed`).
    output: Vec<Value>,
    /// The message item being written: its id and text.
    text: Option<(String, String)>,
}

impl StreamEncoder {
    fn new(skeleton: Skeleton) -> StreamEncoder {
        StreamEncoder {
            skeleton,
            sequence: 0,
            started: false,
            output: Vec::new(),
            text: None,
        }
    }

    fn event(&mut self, kind: &str, mut data: Value) -> Value {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        data
    }

    /// Adds `item` as a finished output item (added, then done).
    fn whole_item(&mut self, item: Value, out: &mut Vec<Value>) {
        let index = self.output.len();
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
    }

    fn close_text(&mut self, out: &mut Vec<Value>) {
        let Some((id, text)) = self.text.take() else {
            return;
        };
        let index = self.output.len();
        let part = json!({"type": "output_text", "text": text, "annotations": []});
        out.push(self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
        ));
        out.push(self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
        ));
        let item = message_item(&id, &text, "completed");
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.output.push(item);
    }

    fn encode(&mut self, event: Event) -> Vec<Value> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            let created = self.skeleton.object("in_progress", Vec::new(), None);
            out.push(self.event("response.created", json!({"response": created})));
            let progress = self.skeleton.object("in_progress", Vec::new(), None);
            out.push(self.event("response.in_progress", json!({"response": progress})));
        }
        match event {
            Event::Content(delta) => {
                let index = self.output.len();
                if self.text.is_none() {
                    let id = item_id("msg");
                    let item = json!({"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    ));
                    self.text = Some((id, String::new()));
                }
                let id = match &mut self.text {
                    Some((id, text)) => {
                        text.push_str(&delta);
                        id.clone()
                    }
                    None => String::new(),
                };
                out.push(self.event(
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
                ));
            }
            Event::Reasoning(_) | Event::ToolProgress(_) => {}
            Event::ToolCallStarted(_) => self.close_text(&mut out),
            Event::ToolCallDone(record) => {
                self.close_text(&mut out);
                for item in self.skeleton.gateway_items(&record) {
                    self.whole_item(item, &mut out);
                }
            }
            Event::ClientCalls(calls) => {
                self.close_text(&mut out);
                for c in &calls {
                    if self.skeleton.offered.is_client_search(&c.name) {
                        let item = self.skeleton.client_item(c, "completed");
                        self.whole_item(item, &mut out);
                        continue;
                    }
                    let index = self.output.len();
                    let id = item_id("fc");
                    let mut item = function_call(&id, c, "in_progress", &self.skeleton.offered);
                    item["arguments"] = json!("");
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    out.push(self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": c.arguments}),
                    ));
                    out.push(self.event(
                        "response.function_call_arguments.done",
                        json!({"item_id": id, "output_index": index, "arguments": c.arguments}),
                    ));
                    let item = function_call(&id, c, "completed", &self.skeleton.offered);
                    out.push(self.event(
                        "response.output_item.done",
                        json!({"output_index": index, "item": item}),
                    ));
                    self.output.push(item);
                }
            }
            Event::Done(summary) => {
                self.close_text(&mut out);
                let output = std::mem::take(&mut self.output);
                let response = self.skeleton.object("completed", output, Some(&summary));
                if let Some(keep) = &self.skeleton.keep {
                    keep.save(&response);
                }
                let kind = match response["status"].as_str() {
                    Some("incomplete") => "response.incomplete",
                    _ => "response.completed",
                };
                out.push(self.event(kind, json!({"response": response})));
            }
            Event::Failed(e) => {
                self.close_text(&mut out);
                out.push(self.failed(&e));
            }
        }
        out
    }

    /// A failure after the stream started: `response.failed`.
    fn failed(&mut self, e: &ChatError) -> Value {
        tracing::warn!("stream failed: {e}");
        let output = std::mem::take(&mut self.output);
        let mut response = self.skeleton.object("failed", output, None);
        response["error"] = json!({"code": e.code(), "message": e.to_string()});
        self.event("response.failed", json!({"response": response}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_translate_to_chat_messages() {
        let req = json!({
            "model": "m", "instructions": "be brief",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"role": "assistant", "content": "let me look"},
                {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "t", "arguments": "{\"a\":1}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
                {"type": "reasoning", "summary": []},
            ],
            "tools": [{"type": "function", "name": "t", "parameters": {"type": "object"}}],
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
            "max_output_tokens": 50,
        });
        let out = Value::Object(
            to_chat_request(&req, &mut Offered::default(), &[])
                .unwrap()
                .fields,
        );
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2, "{}", m[2]);
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "one"})
        );
        // Content parts, as the Agents SDK sends an MCP tool's output.
        assert_eq!(m[4]["content"], "two");
        assert_eq!(m.len(), 5);
        assert_eq!(out["tools"][0]["function"]["name"], "t");
        assert_eq!(out["response_format"]["type"], "json_schema");
        assert_eq!(out["max_tokens"], 50);
        // A stored conversation goes between the instructions and the input.
        let earlier = [json!({"role": "user", "content": "before"})];
        let out = to_chat_request(&req, &mut Offered::default(), &earlier).unwrap();
        assert_eq!(out.fields["messages"][1], earlier[0]);
    }

    mod fuzz {
        use super::super::*;
        use crate::faces::common::fuzzing::{json_value, mutate};
        use proptest::prelude::*;

        const SEED: &str = include_str!("../../../../tests/fixtures/faces/responses-codex.json");

        proptest! {
            #[test]
            fn fuzz_any_responses_request_is_translated_or_refused(
                edits in prop::collection::vec((any::<usize>(), json_value()), 0..8),
                whole in json_value(),
            ) {
                let _ = to_chat_request(&mutate(SEED, &edits), &mut Offered::default(), &[]);
                let _ = to_chat_request(&whole, &mut Offered::default(), &[]);
            }
        }
    }
}
