//! `POST /v1/messages`: Anthropic's Messages API as a face of the same tool
//! loop. The request is decoded into the engine's conversation (`decode`:
//! system, text, thinking, `tool_use` and `tool_result` blocks, client
//! tools, `tool_choice`; the conversation of a request without tools only
//! once a loop needs it), the tool set is picked as for chat completions,
//! and the loop's answer or events are encoded as a message or as
//! Anthropic's stream events (`encode`). Errors use Anthropic's error body.

mod decode;
mod encode;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_engine::conversation::Protocol;

use super::common::{self, Planned};
use crate::http::{ApiError, AppState, Caller, ErrorShape, body_error};
use encode::{Shown, StreamEncoder};
use toolgate_engine::chat::Passthrough;

pub async fn messages(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // The URI, like the head and the body, is a slice of the connection's
    // read buffer: not held for the answer (see `handle`).
    let beta = beta(&uri, &headers);
    drop(uri);
    handle(state, caller, beta, headers, body)
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
    beta: bool,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let sent = protocol_headers(&headers);
    let translated = {
        let mut translated = decode::decode_body(&body)?;
        translated.request.headers = sent;
        translated
    };
    // Boxed, as the answer below: this future lives as long as the answer,
    // and would otherwise be sized for its largest step.
    let planned = Box::pin(common::plan_translated(
        &state,
        &caller,
        &headers,
        &body,
        Passthrough::Allowed,
        translated,
    ))
    .await?;
    let (the_loop, places, notices) = match planned {
        Planned::Proxied(response) => return Ok(response),
        Planned::Loop {
            the_loop,
            places,
            notices,
        } => (the_loop, places, notices),
    };
    // The request's bytes and headers are slices of the connection's read
    // buffer: held for the loop's whole answer, they would keep that
    // buffer and make the connection read into a new one.
    drop((body, headers));
    let model = the_loop.request.model.clone();
    let shown = Shown {
        calls: beta,
        search: the_loop.deferred.as_ref().map(|d| d.search.clone()),
        thinking: the_loop.resolved.upstream.protocol == Protocol::Anthropic,
    };
    let mut encoder = StreamEncoder::new(&model, shown.clone());
    Box::pin(common::respond(
        the_loop,
        places,
        notices,
        |answer| axum::Json(encode::message(answer, &model, &shown)).into_response(),
        move |e| encoder.encode(e),
    ))
    .await
}

/// The headers of Anthropic's API a client sent (`anthropic-version`,
/// `anthropic-beta`): they go to an upstream of the same protocol. Copied:
/// a value is a slice of the connection's read buffer, and the request
/// lives as long as its answer.
fn protocol_headers(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    ["anthropic-version", "anthropic-beta"]
        .iter()
        .filter_map(|name| {
            let value = HeaderValue::from_bytes(headers.get(*name)?.as_bytes()).ok()?;
            Some((HeaderName::from_static(name), value))
        })
        .collect()
}

/// `POST /v1/messages/count_tokens`: the request's input tokens, estimated
/// (no upstream is asked; see `common::estimate_tokens`).
pub async fn count_tokens(
    State(_): State<AppState>,
    Extension(_): Extension<Caller>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let count = || -> Result<Value, ApiError> {
        let body = body.map_err(body_error)?;
        let original: Value = serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
        let translated = decode::decode(&original)?;
        Ok(json!({"input_tokens": common::estimate_tokens(&translated.request)}))
    };
    match count() {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_shaped(ErrorShape::Anthropic),
    }
}

/// The MCP server name the gateway's own tool calls carry in the stream
/// (`mcp_tool_use` / `mcp_tool_result` blocks, as Anthropic shows tools it
/// runs on the server side).
pub const SERVER_NAME: &str = "toolgate";

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE_CODE: &str =
        include_str!("../../../../../tests/fixtures/faces/messages-claude-code.json");

    /// Requests without tools: Claude Code's without its tools, and ones
    /// with every field the top-level reading covers.
    fn without_tools() -> Vec<String> {
        let mut claude: Value = serde_json::from_str(CLAUDE_CODE).unwrap();
        claude.as_object_mut().unwrap().remove("tools");
        vec![
            claude.to_string(),
            json!({"model": "m", "max_tokens": 9, "tools": [], "system": [{"type": "text", "text": "Be brief."}],
                   "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
                                {"role": "user", "content": [{"type": "text", "text": "and?"}, {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}],
                   "temperature": 0.5, "top_p": 0.9, "stop_sequences": ["END", 3], "stream": true,
                   "tool_choice": {"type": "none", "disable_parallel_tool_use": true},
                   "mcp_servers": [{"type": "url", "url": "https://example.com/mcp", "name": "x"}],
                   "metadata": {"user_id": "u"}, "service_tier": "auto"})
            .to_string(),
            r#"{"model": "m", "tools": null, "tool_set": "none", "max_tool_iterations": 3, "messages": [{"role": "system", "content": "gone", "clear_at": "next_user_message"}, {"role": "user", "content": "x"}], "zeta": 1, "alpha": 2, "zeta": 3}"#.to_owned(),
        ]
    }

    #[test]
    fn a_request_without_tools_decodes_the_same_deferred_as_whole() {
        for body in without_tools() {
            let whole = decode::decode(&serde_json::from_str(&body).unwrap()).unwrap();
            let mut deferred = decode::decode_body(&Bytes::from(body.clone())).unwrap();
            assert!(deferred.request.turns().is_empty(), "deferred: {body}");
            // Counted as the whole decoding counts turns (for the limit
            // on messages): the system prompt is one; a system message
            // cleared later is counted until the conversation is read.
            let sent: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                deferred.request.message_count,
                sent["messages"].as_array().unwrap().len() + usize::from(!sent["system"].is_null())
            );
            if !body.contains("clear_at") {
                assert_eq!(deferred.request.message_count, whole.request.message_count);
            }
            deferred.request.decode_rest().unwrap();
            let (w, d) = (&whole.request, &deferred.request);
            assert_eq!(d.turns(), w.turns(), "{body}");
            assert_eq!(d.model, w.model);
            assert_eq!(d.params, w.params, "{body}");
            assert_eq!(d.stream, w.stream);
            assert_eq!(d.include_usage, w.include_usage);
            assert_eq!(d.tool_choice, w.tool_choice);
            assert_eq!(d.tool_set, w.tool_set);
            assert_eq!(d.max_tool_iterations, w.max_tool_iterations);
            assert_eq!(d.modified, w.modified);
            assert_eq!(d.untyped, w.untyped, "{body}");
            assert!(d.tools.is_empty() && w.tools.is_empty() && d.hosted.is_empty());
            let mut notices = deferred.notices.clone();
            notices.extend(d.notices.clone());
            assert_eq!(notices, whole.notices, "{body}");
            let parsed = |f: &toolgate_engine::conversation::RawFields| {
                f.iter()
                    .map(|(k, v)| (k.clone(), serde_json::from_str::<Value>(v.get()).unwrap()))
                    .collect::<std::collections::BTreeMap<_, _>>()
            };
            assert_eq!(parsed(&d.fields), parsed(&w.fields), "{body}");
        }
    }

    #[test]
    fn what_the_top_level_reading_would_misread_is_decoded_whole() {
        // Tools, or a field the whole decoding refuses: the same answer
        // as decoding it whole.
        for body in [
            r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "t", "input_schema": {"type": "object"}}]}"#,
            r#"{"model": "m", "messages": []}"#,
            r#"{"model": 3, "messages": [{"role": "user", "content": "x"}]}"#,
            r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_set": 4}"#,
            r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "some"}}"#,
            r#"[1]"#,
        ] {
            let whole = serde_json::from_str::<Value>(body)
                .map_err(|e| e.to_string())
                .and_then(|v| decode::decode(&v).map_err(|e| e.message.clone()));
            let read = decode::decode_body(&Bytes::from(body)).map_err(|e| e.message.clone());
            match (whole, read) {
                (Err(a), Err(b)) => assert_eq!(a, b, "{body}"),
                (Ok(a), Ok(b)) => {
                    assert_eq!(a.request.turns(), b.request.turns(), "{body}");
                    assert_eq!(a.request.tools.len(), b.request.tools.len());
                }
                (a, b) => panic!("{body}: {a:?} against {b:?}"),
            }
        }
    }

    mod fuzz {
        use super::super::*;
        use crate::faces::common::fuzzing::{json_value, mutate};
        use proptest::prelude::*;

        const SEED: &str =
            include_str!("../../../../../tests/fixtures/faces/messages-claude-code.json");

        proptest! {
            #[test]
            fn fuzz_any_messages_request_is_translated_or_refused(
                edits in prop::collection::vec((any::<usize>(), json_value()), 0..8),
                whole in json_value(),
            ) {
                let _ = decode::decode(&mutate(SEED, &edits));
                let _ = decode::decode(&whole);
                // Read from its top-level fields, its conversation later.
                for body in [mutate(SEED, &edits), whole] {
                    if let Ok(mut t) = decode::decode_body(&Bytes::from(body.to_string())) {
                        let _ = t.request.decode_rest();
                    }
                }
            }
        }
    }
}
