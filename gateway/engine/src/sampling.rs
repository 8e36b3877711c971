//! An MCP server's sampling requests (it asks a model to answer during a
//! call) answered by the gateway's own model, for a server whose
//! declaration allows it (`sampling: {model: NAME}`; off by default) and a
//! call whose client cannot answer: a chat face's, the tool API's, an MCP
//! client without the capability.
//!
//! The request becomes one chat completion of the route that serves the
//! model, without tools: the server's system prompt, its messages (text,
//! and images as data URLs; other content described in words), its
//! temperature and stop sequences, and at most the declaration's
//! `max_tokens`. The answer's text becomes the server's result. An answer
//! larger than `limits.max_response_bytes`, an upstream error, or a model
//! that answers no text fails the sampling request with a sentence, which
//! the server sees.
#![allow(deprecated)] // sampling (SEP-2577), still carried

use std::sync::Arc;

use bytes::Bytes;
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult};
use serde_json::{Value, json};

use crate::upstream::Resolved;

/// The gateway's own model, as a relay's way to answer sampling.
pub fn answerer(
    resolved: Resolved,
    max_tokens: u32,
    max_bytes: usize,
) -> Arc<
    dyn Fn(CreateMessageRequestParams) -> toolgate_mcp_client::relay::Reply<CreateMessageResult>
        + Send
        + Sync,
> {
    let resolved = Arc::new(resolved);
    Arc::new(move |params| {
        let resolved = Arc::clone(&resolved);
        Box::pin(async move { answer(&resolved, max_tokens, max_bytes, &params).await })
    })
}

async fn answer(
    resolved: &Resolved,
    max_tokens: u32,
    max_bytes: usize,
    params: &CreateMessageRequestParams,
) -> Result<CreateMessageResult, rmcp::ErrorData> {
    let failed = |why: String| rmcp::ErrorData::internal_error(why, None);
    let asked = serde_json::to_value(params)
        .map_err(|e| failed(format!("the sampling request cannot be read: {e}")))?;
    let body = chat_body(&resolved.model, max_tokens, &asked);
    let body = serde_json::to_vec(&body)
        .map_err(|e| failed(format!("the sampling request cannot be written: {e}")))?;
    let upstream = &resolved.upstream;
    let reply = upstream
        .chat(Bytes::from(body))
        .await
        .map_err(|e| failed(format!("the gateway's model did not answer: {e}")))?;
    let bytes = upstream
        .read_body(reply, max_bytes)
        .await
        .map_err(|e| failed(format!("the gateway's model did not answer: {e}")))?;
    let answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
        failed(format!(
            "the gateway's model answered something unreadable: {e}"
        ))
    })?;
    result(&resolved.model, &answer).map_err(failed)
}

/// The chat completion asked for `asked` (a `sampling/createMessage`'s
/// params as JSON).
fn chat_body(model: &str, max_tokens: u32, asked: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = asked.get("systemPrompt").and_then(Value::as_str) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in asked
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let role = match message.get("role").and_then(Value::as_str) {
            Some("assistant") => "assistant",
            _ => "user",
        };
        let blocks = match message.get("content") {
            Some(Value::Array(blocks)) => blocks.iter().collect::<Vec<_>>(),
            Some(block) => vec![block],
            None => Vec::new(),
        };
        let parts: Vec<Value> = blocks.into_iter().map(part).collect();
        messages.push(json!({"role": role, "content": parts}));
    }
    let asked_tokens = asked
        .get("maxTokens")
        .and_then(Value::as_u64)
        .and_then(|t| u32::try_from(t).ok())
        .unwrap_or(max_tokens);
    let mut body = json!({
        "model": model,
        "messages": messages,
        "max_tokens": asked_tokens.clamp(1, max_tokens.max(1)),
        "stream": false,
    });
    if let Some(temperature) = asked.get("temperature").filter(|t| t.is_number()) {
        body["temperature"] = temperature.clone();
    }
    if let Some(stop) = asked.get("stopSequences").filter(|s| s.is_array()) {
        body["stop"] = stop.clone();
    }
    body
}

/// One content block of a sampling message as a chat content part.
fn part(block: &Value) -> Value {
    let text = |t: &str| json!({"type": "text", "text": t});
    match block.get("type").and_then(Value::as_str) {
        Some("text") => text(
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
            json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}})
        }
        Some(other) => text(&format!("[{other} content left out]")),
        None => text("[content left out]"),
    }
}

/// The model's chat completion as the server's sampling result.
fn result(model: &str, answer: &Value) -> Result<CreateMessageResult, String> {
    let choice = answer
        .pointer("/choices/0")
        .ok_or_else(|| "the gateway's model answered without a choice".to_owned())?;
    let text = choice
        .pointer("/message/content")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| "the gateway's model answered without text".to_owned())?;
    let stop = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("length") => CreateMessageResult::STOP_REASON_END_MAX_TOKEN,
        _ => CreateMessageResult::STOP_REASON_END_TURN,
    };
    let used = answer.get("model").and_then(Value::as_str).unwrap_or(model);
    serde_json::from_value(json!({
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": used,
        "stopReason": stop,
    }))
    .map_err(|e| format!("the gateway's model's answer cannot be given to the server: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampling_request_becomes_one_chat_completion_within_the_cap() {
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
        let body = chat_body("small", 256, &asked);
        assert_eq!(body["model"], "small");
        assert_eq!(body["max_tokens"], 256, "the declaration's cap");
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["stop"], json!(["\n\n"]));
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(
            body["messages"][1]["content"][0]["text"],
            "What is in this picture?"
        );
        assert_eq!(
            body["messages"][2]["content"][0]["image_url"]["url"],
            "data:image/jpeg;base64,AAAA"
        );
        assert_eq!(
            body["messages"][2]["content"][1]["text"],
            "[audio content left out]"
        );
        assert_eq!(body["messages"][3]["role"], "assistant");
        let fewer = chat_body("small", 256, &json!({"messages": [], "maxTokens": 10}));
        assert_eq!(
            fewer["max_tokens"], 10,
            "a request asking for fewer gets fewer"
        );
    }

    #[test]
    fn the_model_s_text_is_the_server_s_result_and_no_text_is_an_error() {
        let answered = json!({"model": "small-2", "choices": [{"message": {"role": "assistant", "content": "Paris."}, "finish_reason": "length"}]});
        let given = serde_json::to_value(result("small", &answered).unwrap()).unwrap();
        assert_eq!(given["content"]["text"], "Paris.");
        assert_eq!(given["model"], "small-2");
        assert_eq!(given["stopReason"], "maxTokens");
        assert_eq!(given["role"], "assistant");
        let silent = json!({"choices": [{"message": {"role": "assistant", "content": null}}]});
        assert!(
            result("small", &silent)
                .unwrap_err()
                .contains("without text")
        );
        assert!(result("small", &json!({})).is_err());
    }
}
