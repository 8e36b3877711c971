//! A 2026-07-28 client's answers to a call parked on another replica,
//! forwarded there (see `parked`): the replica that parked the call put
//! its own URL (`mcp.replica_url_env`) in the sealed `requestState`, so a
//! replica that does not hold the call sends the client's request on, as
//! it came (its headers, the same path), and gives the client the answer.
//!
//! The caller's credential, which no other part of the gateway keeps, is
//! kept on such a replica's MCP requests for this (`ForwardCredential`).
//! Only a URL sealed by a replica (under the shared session secret) is
//! ever reached, a forwarded request is never forwarded again, and the
//! answer is bounded in size ([`MAX_ANSWER`]) and time ([`WAIT_AT_MOST`]).

use std::sync::LazyLock;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult, ErrorCode,
    InputRequiredResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};

use crate::http::ForwardCredential;

/// Marks a request forwarded by a replica.
pub const FORWARDED: &str = "x-toolgate-forwarded";

/// The largest answer read from the other replica.
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// How long the other replica may take (the call goes on there, to its
/// result or its next question).
const WAIT_AT_MOST: Duration = Duration::from_secs(10 * 60);

/// Headers not passed on: the connection's own, and those the forwarded
/// request sets. `Host` is passed: the replica that took the request
/// accepted it, so the other one (configured alike) does.
const NOT_PASSED: &[&str] = &[
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "accept-encoding",
];

static CLIENT: LazyLock<Option<reqwest::Client>> = LazyLock::new(|| {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .build()
        .ok()
});

/// Whether the answers of a call parked at `replica` may be forwarded by
/// this replica (reached at `own`): another replica's, by a replica that
/// is itself one of them (it kept the caller's credential for this), and
/// a request not forwarded already.
pub fn may_forward(replica: &str, own: Option<&str>, context: &RequestContext<RoleServer>) -> bool {
    let forwarded = parts(context).is_some_and(|p| p.headers.contains_key(FORWARDED));
    own.is_some_and(|own| own != replica) && !forwarded
}

fn parts(context: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    context.extensions.get::<axum::http::request::Parts>()
}

/// Sends `request` (the client's `tools/call`, with its answers and state)
/// to the replica at `replica`, as the client sent it; its answer.
pub async fn call(
    replica: &str,
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> Result<CallToolResponse, McpError> {
    let unreachable = |why: String| {
        tracing::warn!(
            replica,
            "the answers of a parked MCP call could not be forwarded: {why}"
        );
        McpError::internal_error(
            format!(
                "the call these answers belong to waits on another replica of the gateway, which could not be reached ({why}): call the tool again"
            ),
            None,
        )
    };
    let (Some(parts), Some(client)) = (parts(context), CLIENT.as_ref()) else {
        return Err(unreachable("no HTTP request to forward".into()));
    };
    // The MCP endpoint's own path (`/mcp` or `/mcp/{set}`), as the
    // client reached it.
    let path = parts.uri.path();
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &parts.headers {
        if !NOT_PASSED.contains(&name.as_str()) {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Some(credential) = parts.extensions.get::<ForwardCredential>() {
        headers.insert(reqwest::header::AUTHORIZATION, credential.0.clone());
    }
    headers.insert(
        FORWARDED,
        reqwest::header::HeaderValue::from_static("parked"),
    );
    // The request's `_meta` (its protocol version and the client's
    // capabilities, on the 2026-07-28 revision) is the context's.
    let mut params = serde_json::to_value(request)
        .map_err(|e| unreachable(format!("the request cannot be written: {e}")))?;
    if let (Some(params), Ok(Value::Object(meta))) =
        (params.as_object_mut(), serde_json::to_value(&context.meta))
        && !meta.is_empty()
    {
        let into = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(into) = into.as_object_mut() {
            for (k, v) in meta {
                into.entry(k).or_insert(v);
            }
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let sent = client
        .post(format!("{replica}{path}"))
        .headers(headers)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .json(&body)
        .timeout(WAIT_AT_MOST)
        .send();
    tracing::info!(
        replica,
        "the answers of a parked MCP call are forwarded to the replica that holds it"
    );
    let answer = tokio::select! {
        answer = read(sent) => answer.map_err(unreachable)?,
        () = context.ct.cancelled() => {
            return Err(McpError::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
        }
    };
    response(answer)
}

/// The JSON-RPC answer in the other replica's response (JSON, or the
/// last answer of an event stream).
async fn read(
    sent: impl std::future::Future<Output = reqwest::Result<reqwest::Response>>,
) -> Result<Value, String> {
    let mut response = sent.await.map_err(|e| e.to_string())?;
    let status = response.status();
    let stream = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if bytes.len() + chunk.len() > MAX_ANSWER {
            return Err(format!(
                "its answer is larger than {} MiB",
                MAX_ANSWER >> 20
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        return Err(format!(
            "it answered {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(300)])
        ));
    }
    if !stream {
        return serde_json::from_slice(&bytes).map_err(|e| format!("its answer is not JSON: {e}"));
    }
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .rfind(|message| message.get("result").is_some() || message.get("error").is_some())
        .ok_or_else(|| "its event stream held no answer".to_owned())
}

/// A JSON-RPC answer as the handler's own.
fn response(mut answer: Value) -> Result<CallToolResponse, McpError> {
    let malformed = |e: serde_json::Error| {
        McpError::internal_error(
            format!(
                "the replica that holds the call gave a malformed answer ({e}): call the tool again"
            ),
            None,
        )
    };
    if let Some(error) = answer.get_mut("error") {
        return Err(serde_json::from_value(error.take()).map_err(malformed)?);
    }
    let result = answer
        .get_mut("result")
        .map(Value::take)
        .unwrap_or_default();
    match result.get("resultType").and_then(Value::as_str) {
        Some("input_required") => serde_json::from_value::<InputRequiredResult>(result)
            .map(CallToolResponse::InputRequired)
            .map_err(malformed),
        Some("task") => serde_json::from_value::<CreateTaskResult>(result)
            .map(CallToolResponse::Task)
            .map_err(malformed),
        _ => serde_json::from_value::<CallToolResult>(result)
            .map(CallToolResponse::Complete)
            .map_err(malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_of_every_kind_are_read_back() {
        let done = response(json!({"jsonrpc": "2.0", "id": 1, "result": {
            "content": [{"type": "text", "text": "Hello, Ada!"}], "isError": false
        }}))
        .unwrap();
        let CallToolResponse::Complete(done) = done else {
            panic!("a result")
        };
        assert_eq!(done.content[0].as_text().unwrap().text, "Hello, Ada!");
        let asks = response(json!({"jsonrpc": "2.0", "id": 1, "result": {
            "resultType": "input_required", "requestState": "sealed",
            "inputRequests": {"q": {"method": "elicitation/create", "params": {
                "message": "Again?", "requestedSchema": {"type": "object", "properties": {}}
            }}}
        }}))
        .unwrap();
        assert!(matches!(asks, CallToolResponse::InputRequired(_)));
        let refused = response(json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32602, "message": "no longer waits"
        }}))
        .unwrap_err();
        assert_eq!(refused.code, ErrorCode::INVALID_PARAMS);
        assert!(response(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": 3}})).is_err());
    }
}
