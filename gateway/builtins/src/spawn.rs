//! `spawn`: sub-agents (the seeds' `spawn`/`multi_agent`). Each task runs as
//! its own tool loop against the same model, with the same tool set minus
//! `spawn` itself (so sub-agents cannot spawn), with at most
//! `builtins.spawn.max_iterations` model calls, `builtins.spawn.concurrency`
//! at a time. The answer is each task's answer or error.
//!
//! Sub-agents need a model, so the chat loop runs this tool itself
//! (`chat/subagent.rs`); this function is what runs anywhere else (the tool
//! API, the CLI), where there is no model to run them against.

use serde_json::Value;
use toolgate::tool;

use toolgate::ToolError;

/// Run sub-agents: give each task to a separate assistant that has the same
/// tools as you (except this one) and works on it on its own. Use it to do
/// independent pieces of work in parallel. Returns each task's answer.
#[tool(category = "agents")]
pub fn spawn(
    /// The tasks, each a complete, self-contained instruction.
    #[schemars(length(min = 1))]
    tasks: Vec<String>,
) -> Result<Value, ToolError> {
    let _ = tasks;
    Err(ToolError::Failed(
        "`spawn` runs sub-agents against the model of a chat completion; call it from a model through /v1/chat/completions".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_chat_loop_it_says_where_it_works() {
        let err = spawn(vec!["x".into()]).unwrap_err();
        assert!(err.to_string().contains("/v1/chat/completions"), "{err}");
    }
}
