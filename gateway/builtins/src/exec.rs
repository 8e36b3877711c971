//! `exec`: a shell command in the workspace, with a timeout that kills the
//! command's whole process group, captured stdout/stderr cut at a
//! configured size, and the exit code. Off unless named in
//! `builtins.enabled`.
//!
//! The child gets a clean environment (no secrets of the gateway), the
//! workspace (or the project's folder) as working directory and `HOME`, and
//! runs in the sandbox of [`super::process`]: its own PID namespace (where
//! the machine allows), a process limit, and an unprivileged user when the
//! gateway runs as root.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate::tool;

use super::process::{self, ChildSpec};
use super::workspace::Workspace;
use toolgate::ToolError;
use toolgate::context::ToolContext;

/// Run a shell command in the workspace folder and return its exit code,
/// stdout and stderr (cut when long). The command is killed, with every
/// process it started, when it runs out of time.
#[tool(category = "system")]
pub async fn exec(
    ctx: &ToolContext,
    /// The command line, run by `sh -c`.
    command: String,
    /// Seconds before the command is killed (at most the configured timeout, 60 by default).
    #[schemars(range(min = 1))]
    timeout_seconds: Option<u64>,
) -> Result<Value, ToolError> {
    if command.trim().is_empty() {
        return Err(ToolError::Failed("the command is empty".into()));
    }
    let settings = &crate::settings(ctx)?.exec;
    let timeout = match timeout_seconds {
        Some(s) => Duration::from_secs(s.max(1)).min(settings.timeout),
        None => settings.timeout,
    };
    let ws = Workspace::of(ctx)?;
    let out = process::run(ChildSpec {
        program: settings.shell.clone(),
        args: vec!["-c".into(), command],
        stdin: None,
        cwd: ws.cwd(),
        workspace: ws.root().to_path_buf(),
        env: process::base_env(ws.root()),
        timeout,
        max_chars: settings.max_output_chars,
        sandbox: crate::settings(ctx)?.sandbox()?.clone(),
    })
    .await?;
    if out.timed_out {
        return Err(ToolError::Timeout(timeout));
    }
    let mut result = json!({
        "exit_code": out.exit_code,
        "stdout": out.stdout,
        "stderr": out.stderr,
    });
    if let Some(signal) = out.signal {
        result["signal"] = json!(signal);
    }
    if out.truncated {
        result["truncated"] = json!(true);
    }
    Ok(result)
}
