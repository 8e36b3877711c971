//! `execute_python` at one of three strictness levels:
//!
//! | level | timeout | runs on | reaches |
//! | --- | --- | --- | --- |
//! | `strict` | 5 s | the gateway's interpreter (`toolgate-code`) | nothing outside the program |
//! | `standard` | 10 s | the gateway's interpreter | nothing outside the program |
//! | `lenient` | 30 s | CPython (`python.interpreter`), any module | the workspace, inside the children's sandbox |
//!
//! `standard` and `strict` run on an interpreter with no OS access: files,
//! the environment, the network and processes do not exist for the program
//! (an `open` or `os.getenv` raises `PermissionError`), whatever it imports
//! or reaches through attributes; its process is confined besides. It
//! offers a subset of Python and of the standard library
//! ([`INTERPRETER_MODULES`]). `lenient` is a real CPython in a child process
//! confined like `exec` (see `process.rs`): a workspace-only view of the
//! files, no network unless configured, limits, its whole process tree
//! killed at the end.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate::tool;

use super::process::{self, ChildSpec};
use super::workspace::Workspace;
use toolgate::ToolError;
use toolgate::context::ToolContext;
use toolgate_config::format::Strictness;

/// The runner script of `lenient` (see its header).
const RUNNER: &str = include_str!("python_runner.py");

/// The standard modules the interpreter of `standard` and `strict` has.
pub const INTERPRETER_MODULES: &[&str] = &[
    "asyncio",
    "collections",
    "dataclasses",
    "datetime",
    "itertools",
    "json",
    "math",
    "re",
    "sys",
    "typing",
    "unicodedata",
];

/// The timeout of a level.
pub fn level_timeout(level: Strictness) -> Duration {
    Duration::from_secs(match level {
        Strictness::Lenient => 30,
        Strictness::Standard => 10,
        Strictness::Strict => 5,
    })
}

/// Run Python 3 code and return what it printed (and the value of its last
/// expression). Print the values you want to see. At the gateway's
/// `standard` and `strict` levels the code runs on a sandboxed interpreter
/// with a subset of Python and of its standard library (asyncio,
/// collections, dataclasses, datetime, itertools, json, math, re, typing,
/// unicodedata) and no files, network or environment; at `lenient` it is
/// CPython in the workspace folder.
#[tool(category = "code")]
pub async fn execute_python(
    ctx: &ToolContext,
    /// The code (a whole script; use print() for output).
    code: String,
    /// A stricter level to run at (`standard` or `strict`); never looser
    /// than the gateway's configured level.
    strictness: Option<Strictness>,
) -> Result<Value, ToolError> {
    let builtins = crate::settings(ctx)?;
    let settings = &builtins.python;
    // A caller may tighten the level, never loosen it.
    let level = strictness.map_or(settings.strictness, |asked| asked.max(settings.strictness));
    let timeout = level_timeout(level);
    if level != Strictness::Lenient {
        return interpreted(&code, timeout, settings, builtins.sandbox()?).await;
    }
    let config = json!({
        "memory_bytes": settings.memory_mb.saturating_mul(1024 * 1024),
        "cpu_seconds": timeout.as_secs() + 1,
    });
    let ws = Workspace::of(ctx)?;
    let out = process::run(ChildSpec {
        program: settings.interpreter.clone(),
        args: vec!["-I".into(), "-c".into(), RUNNER.into(), config.to_string()],
        stdin: Some(code.into_bytes()),
        cwd: ws.cwd(),
        workspace: ws.root().to_path_buf(),
        env: process::base_env(ws.root()),
        timeout,
        max_chars: settings.max_output_chars,
        sandbox: builtins.sandbox()?.clone(),
    })
    .await?;
    if out.timed_out {
        return Err(ToolError::Timeout(timeout));
    }
    match out.exit_code {
        Some(0) => {
            let mut result = json!({"stdout": out.stdout});
            if !out.stderr.is_empty() {
                result["stderr"] = json!(out.stderr);
            }
            if out.truncated {
                result["truncated"] = json!(true);
            }
            Ok(result)
        }
        Some(code) => Err(ToolError::Failed(format!(
            "Python exited with code {code}:\n{}{}",
            out.stderr.trim_end(),
            if out.stdout.is_empty() {
                String::new()
            } else {
                format!("\nstdout:\n{}", out.stdout.trim_end())
            }
        ))),
        None => Err(ToolError::Failed(format!(
            "Python was killed by signal {} (a memory or CPU limit?):\n{}",
            out.signal.unwrap_or_default(),
            out.stderr.trim_end()
        ))),
    }
}

/// `standard` and `strict`: the program on the gateway's interpreter, with
/// no functions to call.
async fn interpreted(
    code: &str,
    timeout: Duration,
    settings: &toolgate_config::format::PythonDecl,
    sandbox: &process::Sandbox,
) -> Result<Value, ToolError> {
    let worker = toolgate_code::Worker::current()
        .map_err(ToolError::Failed)?
        .as_user(sandbox.user);
    let limits = toolgate_code::Limits {
        time: timeout,
        memory_bytes: settings.memory_mb.saturating_mul(1024 * 1024),
        max_output: settings.max_output_chars,
        max_calls: 0,
        ..toolgate_code::Limits::default()
    };
    let outcome = worker
        .run(code, &[], &limits, |call| async move {
            Err(format!("`{}` is not a function here", call.name))
        })
        .await;
    let mut result = json!({"stdout": outcome.printed.text});
    if outcome.printed.dropped > 0 {
        result["truncated"] = json!(true);
    }
    match outcome.value {
        Ok(Value::Null) => Ok(result),
        Ok(value) => {
            result["result"] = value;
            Ok(result)
        }
        Err(failure) => {
            let printed = if result["stdout"].as_str().is_some_and(|s| !s.is_empty()) {
                format!(
                    "\nprinted before:\n{}",
                    result["stdout"].as_str().unwrap_or_default()
                )
            } else {
                String::new()
            };
            Err(match failure.kind {
                toolgate_code::FailureKind::Timeout => ToolError::Timeout(timeout),
                _ => ToolError::Failed(format!("{}{printed}", failure.message.trim_end())),
            })
        }
    }
}
