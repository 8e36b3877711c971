//! `POST /v1/responses` (and `GET`/`DELETE /v1/responses/{id}`): OpenAI's
//! Responses API as a face of the same tool loop. The input (a string or
//! items: messages with text, image and file parts, `function_call`,
//! `function_call_output`) and `instructions`, client function and
//! `namespace` tools, `tool_choice`, `text.format` and the sampling fields
//! are decoded into the engine's conversation (`decode`); what cannot be
//! served (hosted tools, items of tools the server ran) is left out with a
//! notice. The answer or the loop's events are encoded as a response object
//! or as Responses stream events (`encode`).
//!
//! The gateway's own tool calls appear as `mcp_call` output items (the
//! Responses API's item for a tool the server ran, with its output), so a
//! client sees what ran and never mistakes them for calls it must make;
//! client tools end the turn as `function_call` items (with their
//! `namespace` when they were offered in one). A response is kept unless
//! `store: false` (`toolgate_engine::chat::stored`, per API key), and
//! `previous_response_id` continues its conversation.

mod decode;
mod encode;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_engine::chat::Event;
use toolgate_engine::conversation::Protocol;

use super::common::{self, Notices, Planned};
use crate::http::{ApiError, AppState, Caller, body_error};
use base64::Engine as _;
use decode::Offered;
use encode::{Echo, Keep, Skeleton, StreamEncoder, item_id, usage};
use toolgate_engine::chat::NO_TOOL_SET;
use toolgate_engine::chat::Passthrough;
use toolgate_engine::chat::stored::{Conversations, Stored};

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
    } = match prepare(&state, &caller, &headers, &body, None, Passthrough::Allowed).await? {
        Ready::Loop(prepared) => *prepared,
        Ready::Proxied(response) => return Ok(response),
    };
    let mut stream = StreamEncoder::new(skeleton.clone());
    common::respond(
        the_loop,
        places,
        notices,
        |answer| axum::Json(skeleton.complete(answer)).into_response(),
        move |e| stream.encode(e).into_iter().map(sse).collect(),
    )
    .await
}

/// A stream event (its `type` names it) as a server-sent event.
fn sse(data: Value) -> SseEvent {
    let kind = data["type"].as_str().unwrap_or("message").to_owned();
    SseEvent::default().event(kind).data(data.to_string())
}

/// What a request became.
enum Ready {
    Loop(Box<Prepared>),
    /// Passed to an upstream of the Responses protocol, untouched.
    Proxied(Response),
}

/// A request planned and ready to run, with the response it will fill.
struct Prepared {
    the_loop: Box<toolgate_engine::chat::Loop>,
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
    passthrough: Passthrough,
) -> Result<Ready, ApiError> {
    let mut offered = Offered::default();
    let owner = caller.key_name();
    // The stored conversation a request continues, looked up first (the
    // shared state may have it).
    #[derive(serde::Deserialize)]
    struct Continues {
        previous_response_id: Option<String>,
        model: Option<String>,
    }
    let previous = match serde_json::from_slice::<Continues>(body) {
        Ok(Continues {
            previous_response_id: Some(id),
            model,
        }) => {
            let here = match local {
                Some(local) => local.get(&id, owner.as_deref()).await,
                None => None,
            };
            let found = match here {
                Some(found) => Some(found),
                None => state.conversations.get(&id, owner.as_deref()).await,
            };
            // A response the gateway did not keep may be the model's own,
            // when the model speaks Responses (and only one deployment
            // serves it, whose answers pass through): it goes there as sent.
            let upstream_keeps = model
                .and_then(|m| state.catalog().upstreams.resolve(&m))
                .is_some_and(|r| r.upstream.protocol == Protocol::OpenaiResponses && !r.several());
            match found {
                Some(found) => Some(found),
                None if upstream_keeps => None,
                None => {
                    return Err(ApiError::not_found(
                        "previous_response_not_found",
                        format!("no stored response `{id}` for this API key (responses are kept an hour; with `store: false`, only on the WebSocket connection that made them)"),
                    )
                    .param("previous_response_id"));
                }
            }
        }
        _ => None,
    };
    let body = Bytes::copy_from_slice(body);
    let (original, planned) =
        common::plan_decoded(state, caller, headers, &body, passthrough, |req| {
            let earlier = previous.as_ref().map_or(&[][..], |p| p.turns.as_slice());
            let mut translated = decode::decode(req, &mut offered, earlier)?;
            // Continued here: the model does not know the gateway's id.
            if previous.is_some() {
                translated
                    .request
                    .fields
                    .shift_remove("previous_response_id");
                translated.request.modified = true;
            }
            Ok(translated)
        })
        .await?;
    let (the_loop, places, notices) = match planned {
        Planned::Loop {
            the_loop,
            places,
            notices,
        } => (the_loop, places, notices),
        Planned::Proxied(response) => return Ok(Ready::Proxied(response)),
    };
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
        let mut history = the_loop.request.turns().to_vec();
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
            input_items: encode::input_items(&original),
        }
    });
    Ok(Ready::Loop(Box::new(Prepared {
        the_loop,
        places,
        notices,
        skeleton: Skeleton::new(&model, echo, offered, keep).with_encrypted_reasoning(
            original["include"]
                .as_array()
                .is_some_and(|i| i.iter().any(|v| v == "reasoning.encrypted_content")),
        ),
    })))
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
    } = match prepare(
        &state,
        &caller,
        &headers,
        body.as_bytes(),
        None,
        Passthrough::Never,
    )
    .await?
    {
        Ready::Loop(prepared) => *prepared,
        Ready::Proxied(response) => return Ok(response),
    };
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
        toolgate_engine::chat::stored::DEFAULT_TTL,
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
    let prepared = match prepare(
        state,
        caller,
        headers,
        body.as_bytes(),
        Some(local),
        Passthrough::Never,
    )
    .await
    {
        Ok(Ready::Loop(p)) => *p,
        Ok(Ready::Proxied(_)) => {
            let e = ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "a WebSocket turn was planned as a passthrough",
            );
            return send(socket, ws_error(&e)).await;
        }
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
        Ok((_, events)) => events,
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

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_engine::conversation::{Call, CallResult, Item, Role, Turn};

    #[test]
    fn input_items_decode_into_turns() {
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
        let translated = decode::decode(&req, &mut Offered::default(), &[]).unwrap();
        let request = &translated.request;
        let turns = request.turns();
        assert_eq!(turns[0].role, Role::System);
        assert_eq!(turns[1].items, vec![Item::text("hi")]);
        assert_eq!(turns[3].items, vec![Item::Call(Call::new("c1", "t", "{}"))]);
        assert_eq!(
            turns[5].items,
            vec![Item::Result(CallResult::text("c1", "one"))]
        );
        // Content parts, as the Agents SDK sends an MCP tool's output.
        assert_eq!(
            turns[6].items,
            vec![Item::Result(CallResult::text("c2", "two"))]
        );
        assert!(matches!(&turns[7].items[0], Item::Reasoning(r) if r.opaque.is_none()));
        assert_eq!(turns.len(), 8);
        assert_eq!(request.tools[0].name, "t");
        assert!(request.params.response_format.is_some());
        assert_eq!(request.params.max_tokens, Some(50));
        // A stored conversation goes between the instructions and the input.
        let earlier = [Turn::new(Role::User, vec![Item::text("before")])];
        let translated = decode::decode(&req, &mut Offered::default(), &earlier).unwrap();
        assert_eq!(translated.request.turns()[1], earlier[0]);
    }

    mod fuzz {
        use super::super::*;
        use crate::faces::common::fuzzing::{json_value, mutate};
        use proptest::prelude::*;

        const SEED: &str = include_str!("../../../../../tests/fixtures/faces/responses-codex.json");

        proptest! {
            #[test]
            fn fuzz_any_responses_request_is_translated_or_refused(
                edits in prop::collection::vec((any::<usize>(), json_value()), 0..8),
                whole in json_value(),
            ) {
                let _ = decode::decode(&mutate(SEED, &edits), &mut Offered::default(), &[]);
                let _ = decode::decode(&whole, &mut Offered::default(), &[]);
            }
        }
    }
}
