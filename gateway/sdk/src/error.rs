//! Why a tool failed, as the model and the client see it.

use std::time::Duration;

use serde::Serialize;

/// One argument that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgError {
    /// JSON pointer into the arguments (`/` for the whole object).
    pub path: String,
    /// The schema keyword that failed, e.g. `maximum` or `required`.
    pub rule: String,
    pub message: String,
}

/// Why a tool failed, as its author (or the kind of tool: HTTP, MCP,
/// builtin) says it. What the gateway decides about a call around the
/// tool (unknown, unapproved, rate-limited, timed out, crashed, handed to
/// the client) is not a tool's to say: the engine's `CallError` holds it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {}", join_arg_errors(.0))]
    InvalidArguments(Vec<ArgError>),
    /// The tool gave up waiting (on its process, its backend).
    #[error("timed out after {}", humantime_serde::re::humantime::format_duration(*.0))]
    Timeout(Duration),
    /// The backend answered with an error or could not be reached.
    #[error("{0}")]
    Backend(String),
    /// The arguments would make an unsafe request, which was not sent.
    #[error("{0}")]
    Refused(String),
    /// The tool could not do its work (bad template, bad response...).
    #[error("{0}")]
    Failed(String),
    /// The tool acts as the calling user upstream, and the user has no
    /// usable credentials there (not connected, or the upstream refused
    /// them): the message says how to connect.
    #[error("{0}")]
    NotConnected(String),
}

fn join_arg_errors(errors: &[ArgError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {} ({})", e.path, e.message, e.rule))
        .collect::<Vec<_>>()
        .join("; ")
}

impl ToolError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::InvalidArguments(_) => "invalid_arguments",
            ToolError::Timeout(_) => "timeout",
            ToolError::Backend(_) => "backend_error",
            ToolError::Refused(_) => "refused",
            ToolError::Failed(_) => "tool_error",
            ToolError::NotConnected(_) => "not_connected",
        }
    }
}

/// A failed call as JSON: `{"code", "message", "details"?}` (the
/// gateway's own outcomes are written the same way).
#[derive(Serialize)]
pub struct ErrorRepr<'a> {
    pub code: &'a str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<&'a [ArgError]>,
}

impl Serialize for ToolError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ErrorRepr {
            code: self.code(),
            message: self.to_string(),
            details: match self {
                ToolError::InvalidArguments(errors) => Some(errors),
                _ => None,
            },
        }
        .serialize(s)
    }
}

/// `true` when `name` is a valid tool name: 1-64 of `A-Z a-z 0-9 _ -`.
pub fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_valid_name("get_forecast"));
        assert!(is_valid_name("a-B_9"));
        assert!(is_valid_name(&"x".repeat(64)));
        assert!(!is_valid_name(&"x".repeat(65)));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("get forecast"));
        assert!(!is_valid_name("météo"));
        assert!(!is_valid_name("a.b"));
    }
}
