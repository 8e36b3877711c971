//! An MCP server's sampling requests (it asks a model to answer during a
//! call) answered by the gateway's own model, for a server whose
//! declaration allows it (`sampling: {model: NAME}`; off by default) and a
//! call whose client cannot answer: a chat face's, the tool API's, an MCP
//! client without the capability.
//!
//! The request becomes one model call of the route that serves the model
//! (in its protocol), without tools: the server's system prompt, its messages (text,
//! and images as data URLs; other content described in words), its
//! temperature and stop sequences, and at most the declaration's
//! `max_tokens`. The answer's text becomes the server's result. An answer
//! larger than `limits.max_response_bytes`, an upstream error, or a model
//! that answers no text fails the sampling request with a sentence, which
//! the server sees.
#![allow(deprecated)] // sampling (SEP-2577), still carried

use std::sync::Arc;

use rmcp::model::{CreateMessageRequestParams, CreateMessageResult};
use serde_json::{Value, json};

use crate::conversation::{
    FinishReason, Item, Media, MediaKind, Notices, Protocol, Request, Role, Source, Turn, Usage,
};
use crate::model::protocol::{self, Outgoing, Tools};
use crate::model::routing::Resolved;

/// The gateway's own model, as a relay's way to answer sampling.
pub fn answerer(
    resolved: Resolved,
    max_tokens: u32,
    max_bytes: usize,
    counted: Option<Counted>,
) -> Arc<
    dyn Fn(CreateMessageRequestParams) -> toolgate_mcp_client::relay::Reply<CreateMessageResult>
        + Send
        + Sync,
> {
    let resolved = Arc::new(resolved);
    Arc::new(move |params| {
        let resolved = Arc::clone(&resolved);
        let counted = counted.clone();
        Box::pin(async move {
            let began = std::time::Instant::now();
            let (result, usage) = answer(&resolved, max_tokens, max_bytes, &params).await?;
            if let Some(count) = counted {
                count(&resolved.model, &usage, began.elapsed());
            }
            Ok(result)
        })
    })
}

/// Told each answered sampling call's model, usage and time (what counts
/// its spend).
pub type Counted = Arc<dyn Fn(&str, &Usage, std::time::Duration) + Send + Sync>;

async fn answer(
    resolved: &Resolved,
    max_tokens: u32,
    max_bytes: usize,
    params: &CreateMessageRequestParams,
) -> Result<(CreateMessageResult, Usage), rmcp::ErrorData> {
    let failed = |why: String| rmcp::ErrorData::internal_error(why, None);
    let asked = serde_json::to_value(params)
        .map_err(|e| failed(format!("the sampling request cannot be read: {e}")))?;
    let (request, turns) = model_request(&resolved.model, max_tokens, &asked);
    let upstream = &resolved.upstream;
    let call = Outgoing {
        request: &request,
        model: &resolved.model,
        turns: &turns,
        tools: Tools(&[]),
        tool_choice: None,
        stream: false,
    };
    let body = protocol::encode(upstream.protocol, &call, &mut Notices::default());
    let reply = upstream
        .chat(body)
        .await
        .map_err(|e| failed(format!("the gateway's model did not answer: {e}")))?;
    let bytes = upstream
        .read_body(reply, max_bytes)
        .await
        .map_err(|e| failed(format!("the gateway's model did not answer: {e}")))?;
    result(upstream.protocol, &resolved.model, &bytes).map_err(failed)
}

/// The model call asked for `asked` (a `sampling/createMessage`'s params
/// as JSON): its request and its conversation.
fn model_request(model: &str, max_tokens: u32, asked: &Value) -> (Request, Vec<Turn>) {
    let mut turns = Vec::new();
    if let Some(system) = asked.get("systemPrompt").and_then(Value::as_str) {
        turns.push(Turn::new(Role::System, vec![Item::text(system)]));
    }
    for message in asked
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("assistant") => Role::Assistant,
            _ => Role::User,
        };
        let blocks = match message.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().collect::<Vec<_>>(),
            Some(block) => vec![block],
            None => Vec::new(),
        };
        turns.push(Turn::new(role, blocks.into_iter().map(item).collect()));
    }
    let asked_tokens = asked
        .get("maxTokens")
        .and_then(Value::as_u64)
        .and_then(|t| u32::try_from(t).ok())
        .unwrap_or(max_tokens);
    let mut request = Request::new(Protocol::OpenaiChat, model);
    request.params.max_tokens = Some(u64::from(asked_tokens.clamp(1, max_tokens.max(1))));
    request.params.temperature = asked.get("temperature").and_then(Value::as_f64);
    request.params.stop = asked
        .get("stopSequences")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (request, turns)
}

/// One content block of a sampling message as an item.
fn item(block: &Value) -> Item {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => Item::text(
            block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ),
        Some("image") => {
            let mime = block
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("image/png");
            let data = block
                .get("data")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Item::Media {
                media: Media {
                    kind: MediaKind::Image,
                    source: Source::Base64 {
                        mime: mime.to_owned(),
                        data: data.to_owned(),
                    },
                    name: None,
                    detail: None,
                },
            }
        }
        Some(other) => Item::text(format!("[{other} content left out]")),
        None => Item::text("[content left out]"),
    }
}

/// The model's answer as the server's sampling result.
fn result(
    protocol: Protocol,
    model: &str,
    body: &[u8],
) -> Result<(CreateMessageResult, Usage), String> {
    let decoded = protocol::decode(protocol, &bytes::Bytes::copy_from_slice(body))
        .map_err(|e| format!("the gateway's model answered something unreadable: {e}"))?;
    let mut assembly = protocol::Assembly::default();
    for delta in decoded.deltas {
        assembly.push(delta, usize::MAX)?;
    }
    let text = assembly
        .text
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "the gateway's model answered without text".to_owned())?;
    let stop = match assembly.finish {
        Some(FinishReason::Length) => CreateMessageResult::STOP_REASON_END_MAX_TOKEN,
        _ => CreateMessageResult::STOP_REASON_END_TURN,
    };
    let used = decoded.model.as_deref().unwrap_or(model);
    let answer = serde_json::from_value(json!({
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": used,
        "stopReason": stop,
    }))
    .map_err(|e| format!("the gateway's model's answer cannot be given to the server: {e}"))?;
    Ok((answer, assembly.usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(model: &str, max_tokens: u32, asked: &Value) -> Value {
        let (request, turns) = model_request(model, max_tokens, asked);
        let call = Outgoing {
            request: &request,
            model,
            turns: &turns,
            tools: Tools(&[]),
            tool_choice: None,
            stream: false,
        };
        serde_json::from_slice(&protocol::encode(
            Protocol::OpenaiChat,
            &call,
            &mut Notices::default(),
        ))
        .unwrap()
    }

    #[test]
    fn a_sampling_request_becomes_one_model_call_within_the_cap() {
        let asked = json!({
            "systemPrompt": "Be brief.",
            "messages": [
                {"role": "user", "content": {"type": "text", "text": "What is in this picture?"}},
                {"role": "user", "content": [{"type": "image", "data": "AAAA", "mimeType": "image/jpeg"},
                                             {"type": "audio", "data": "BBBB", "mimeType": "audio/wav"}]},
                {"role": "assistant", "content": {"type": "text", "text": "A cat."}}
            ],
            "maxTokens": 5000,
            "temperature": 0.2,
            "stopSequences": ["\n\n"]
        });
        let body = body("small", 256, &asked);
        assert_eq!(body["model"], "small");
        assert_eq!(body["max_tokens"], 256, "the declaration's cap");
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["stop"], json!(["\n\n"]));
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(body["messages"][1]["content"], "What is in this picture?");
        assert_eq!(
            body["messages"][2]["content"][0]["image_url"]["url"],
            "data:image/jpeg;base64,AAAA"
        );
        assert_eq!(
            body["messages"][2]["content"][1]["text"],
            "[audio content left out]"
        );
        assert_eq!(body["messages"][3]["role"], "assistant");
        let fewer = super::tests::body("small", 256, &json!({"messages": [], "maxTokens": 10}));
        assert_eq!(
            fewer["max_tokens"], 10,
            "a request asking for fewer gets fewer"
        );
    }

    #[test]
    fn the_model_s_text_is_the_server_s_result_and_no_text_is_an_error() {
        let answered = br#"{"model": "small-2", "choices": [{"message": {"role": "assistant", "content": "Paris."}, "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}"#;
        let (given, usage) = result(Protocol::OpenaiChat, "small", answered).unwrap();
        assert_eq!((usage.input, usage.output), (5, 2));
        let given = serde_json::to_value(given).unwrap();
        assert_eq!(given["content"]["text"], "Paris.");
        assert_eq!(given["model"], "small-2");
        assert_eq!(given["stopReason"], "maxTokens");
        assert_eq!(given["role"], "assistant");
        let silent = br#"{"choices": [{"message": {"role": "assistant", "content": null}}]}"#;
        assert!(
            result(Protocol::OpenaiChat, "small", silent)
                .unwrap_err()
                .contains("without text")
        );
        assert!(result(Protocol::OpenaiChat, "small", b"{}").is_err());
    }
}
