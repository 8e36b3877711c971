//! `POST /v1/messages`: Anthropic's Messages API as a face of the same tool
//! loop. The request is decoded into the engine's conversation (`decode`:
//! system, text, thinking, `tool_use` and `tool_result` blocks, client
//! tools, `tool_choice`), the tool set is picked as for chat completions,
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
    let sent = protocol_headers(&headers);
    let (_, planned) = common::plan_decoded(
        &state,
        &caller,
        &headers,
        &body,
        Passthrough::Allowed,
        |v| {
            decode::decode(v).map(|mut t| {
                t.request.headers = sent;
                t
            })
        },
    )
    .await?;
    let (the_loop, places, notices) = match planned {
        Planned::Proxied(response) => return Ok(response),
        Planned::Loop {
            the_loop,
            places,
            notices,
        } => (*the_loop, places, notices),
    };
    let model = the_loop.request.model.clone();
    let shown = Shown {
        calls: beta(uri, &headers),
        search: the_loop.deferred.as_ref().map(|d| d.search.clone()),
        thinking: the_loop.resolved.upstream.protocol == Protocol::Anthropic,
    };
    let mut encoder = StreamEncoder::new(&model, shown.clone());
    common::respond(
        the_loop,
        places,
        notices,
        |answer| encode::message(answer, &model, &shown),
        move |e| encoder.encode(e),
    )
    .await
}

/// The headers of Anthropic's API a client sent (`anthropic-version`,
/// `anthropic-beta`): they go to an upstream of the same protocol.
fn protocol_headers(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    ["anthropic-version", "anthropic-beta"]
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?;
            Some((HeaderName::from_static(name), value.clone()))
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
            }
        }
    }
}
