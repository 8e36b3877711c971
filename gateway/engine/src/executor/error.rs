//! Why a call has no result: what the tool said ([`ToolError`]), or what
//! the gateway decided around it.

use std::time::Duration;

use serde::Serialize;

use crate::tools::tool::{ArgError, ToolError};

/// Why a call has no result, as the model and the client see it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The tool ran, or its arguments were refused before it did.
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// The tool did not answer within its timeout.
    #[error("timed out after {}", humantime_serde::re::humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("the tool crashed: {0}")]
    Panicked(String),
    /// The call needs a person's approval, which has not come (yet): it
    /// was not run.
    #[error("{0}")]
    Unapproved(String),
    /// The caller's API key used up its tool calls per minute.
    #[error(
        "the tool-call rate limit of this API key is reached; retry in {} s",
        .0.as_secs_f64().ceil()
    )]
    RateLimited(Duration),
    /// Not a failure: the call goes on with the client (an MCP server
    /// asked the client questions, or runs the call as a task the client
    /// follows, MCP 2026-07-28); the client's next request continues it.
    #[error("{0}")]
    HandedToClient(String),
}

impl From<toolgate_mcp_client::NoAnswer> for CallError {
    fn from(e: toolgate_mcp_client::NoAnswer) -> Self {
        match e {
            toolgate_mcp_client::NoAnswer::Failed(e) => CallError::Tool(e),
            toolgate_mcp_client::NoAnswer::HandedToClient(why) => CallError::HandedToClient(why),
        }
    }
}

impl CallError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            CallError::Tool(e) => e.code(),
            CallError::UnknownTool(_) => "unknown_tool",
            CallError::Timeout(_) => "timeout",
            CallError::Panicked(_) => "tool_crashed",
            CallError::Unapproved(_) => "approval_pending",
            CallError::RateLimited(_) => "rate_limited",
            CallError::HandedToClient(_) => "handed_to_client",
        }
    }

    /// Which arguments were wrong, when that is the reason.
    pub fn arg_errors(&self) -> Option<&[ArgError]> {
        match self {
            CallError::Tool(ToolError::InvalidArguments(errors)) => Some(errors),
            _ => None,
        }
    }

    /// The tool's own failure, `message`.
    pub fn failed(message: impl Into<String>) -> Self {
        CallError::Tool(ToolError::Failed(message.into()))
    }

    /// The arguments refused for one reason, at `path`.
    pub fn invalid_argument(path: &str, rule: &str, message: String) -> Self {
        CallError::Tool(ToolError::InvalidArguments(vec![ArgError {
            path: path.into(),
            rule: rule.into(),
            message,
        }]))
    }
}

impl Serialize for CallError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        toolgate::ErrorRepr {
            code: self.code(),
            message: self.to_string(),
            details: self.arg_errors(),
        }
        .serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_error_keeps_its_code_and_words_and_the_gateways_have_theirs() {
        let e = CallError::from(ToolError::Backend("HTTP 500".into()));
        assert_eq!(
            (e.code(), e.to_string().as_str()),
            ("backend_error", "HTTP 500")
        );
        let e = CallError::RateLimited(Duration::from_millis(1500));
        assert_eq!(e.code(), "rate_limited");
        assert!(e.to_string().ends_with("retry in 2 s"), "{e}");
        let e = CallError::invalid_argument("/q", "type", "not a string".into());
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({
                "code": "invalid_arguments",
                "message": "invalid arguments: /q: not a string (type)",
                "details": [{"path": "/q", "rule": "type", "message": "not a string"}],
            })
        );
        assert_eq!(
            serde_json::to_value(CallError::UnknownTool("x".into())).unwrap(),
            serde_json::json!({"code": "unknown_tool", "message": "unknown tool `x`"})
        );
    }
}
