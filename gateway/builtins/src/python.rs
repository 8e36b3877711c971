//! `execute_python`: Python code in a separate `python3 -I` process, at one
//! of the seeds' strictness levels:
//!
//! | level | timeout | modules | builtins |
//! | --- | --- | --- | --- |
//! | `lenient` | 30 s | any | all |
//! | `standard` | 10 s | an allow-list (+ `extra_modules.standard`) | `open`, `exec`, `eval`, `compile`, ... removed; dunder attributes refused |
//! | `strict` | 5 s | pure computation only (+ `extra_modules.strict`) | also `getattr`, `setattr`, ...; every `_` attribute refused |
//!
//! Every level runs the code in its own process group with a clean
//! environment, the workspace as working directory, and memory, CPU-time and
//! file-size limits (set by the runner before the code starts); on timeout
//! the whole group is killed.
//!
//! **The in-process allow-list is defence in depth, not a security
//! boundary.** Python can reach almost anything from almost anything; the
//! runner's checks stop honest mistakes and casual misuse, nothing more.
//! What bounds the code is the process, its limits, and the rights of the
//! user running the gateway: run the gateway in a container or under a
//! dedicated user when the code is untrusted.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate::tool;

use super::process::{self, ChildSpec};
use super::workspace::Workspace;
use toolgate::ToolError;
use toolgate::context::ToolContext;
use toolgate_config::format::Strictness;

/// The runner script (see its header for the policy).
const RUNNER: &str = include_str!("python_runner.py");

/// The runner's exit code when the policy refused the code.
const REFUSED: i32 = 3;

/// Modules the `standard` level allows.
pub const STANDARD_MODULES: &[&str] = &[
    "abc",
    "array",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "collections",
    "colorsys",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "hmac",
    "itertools",
    "json",
    "math",
    "numbers",
    "operator",
    "pprint",
    "random",
    "re",
    "statistics",
    "string",
    "textwrap",
    "time",
    "typing",
    "unicodedata",
    "uuid",
    "zoneinfo",
];

/// Modules the `strict` level allows: pure computation.
pub const STRICT_MODULES: &[&str] = &[
    "bisect",
    "cmath",
    "collections",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "itertools",
    "json",
    "math",
    "numbers",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "typing",
];

/// Builtins removed at `standard` (and `strict`).
const STANDARD_BANNED: &[&str] = &[
    "open",
    "exec",
    "eval",
    "compile",
    "input",
    "breakpoint",
    "exit",
    "quit",
    "help",
    "globals",
    "locals",
    "vars",
    "memoryview",
    "copyright",
    "credits",
    "license",
];

/// Builtins also removed at `strict`.
const STRICT_BANNED: &[&str] = &["getattr", "setattr", "delattr", "dir"];

/// Names the code may not even mention below `lenient`.
const BANNED_NAMES: &[&str] = &["__builtins__", "__import__", "__loader__", "__spec__"];

/// The timeout of a level.
pub fn level_timeout(level: Strictness) -> Duration {
    Duration::from_secs(match level {
        Strictness::Lenient => 30,
        Strictness::Standard => 10,
        Strictness::Strict => 5,
    })
}

/// `true` for `name` or `package.module` made of Python identifiers.
pub fn is_module_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// Run Python 3 code in a separate process and return what it printed.
/// Print the values you want to see. Modules and builtins are restricted by
/// the gateway's configured strictness; the code runs in the workspace folder
/// with a timeout and memory limits.
#[tool(category = "code")]
pub async fn execute_python(
    ctx: &ToolContext,
    /// The code (a whole script; use print() for output).
    code: String,
    /// A stricter level to run at (`standard` or `strict`); never looser
    /// than the gateway's configured level.
    strictness: Option<Strictness>,
) -> Result<Value, ToolError> {
    let settings = &crate::settings(ctx)?.python;
    // A caller may tighten the level, never loosen it.
    let level = strictness.map_or(settings.strictness, |asked| asked.max(settings.strictness));
    let timeout = level_timeout(level);
    let (allowed, banned): (Option<Vec<String>>, Vec<&str>) = match level {
        Strictness::Lenient => (None, Vec::new()),
        Strictness::Standard => (
            Some(modules(STANDARD_MODULES, &settings.extra_modules.standard)),
            STANDARD_BANNED.to_vec(),
        ),
        Strictness::Strict => (
            Some(modules(STRICT_MODULES, &settings.extra_modules.strict)),
            STANDARD_BANNED
                .iter()
                .chain(STRICT_BANNED)
                .copied()
                .collect(),
        ),
    };
    let config = json!({
        "level": level,
        "allowed": allowed,
        "banned_builtins": banned,
        "banned_names": if level == Strictness::Lenient { Vec::new() } else { BANNED_NAMES.to_vec() },
        "memory_bytes": settings.memory_mb.saturating_mul(1024 * 1024),
        "cpu_seconds": timeout.as_secs() + 1,
    });
    let ws = Workspace::of(ctx)?;
    let out = process::run(ChildSpec {
        program: settings.interpreter.clone(),
        args: vec!["-I".into(), "-c".into(), RUNNER.into(), config.to_string()],
        stdin: Some(code.into_bytes()),
        cwd: ws.cwd(),
        env: process::base_env(ws.root()),
        timeout,
        max_chars: settings.max_output_chars,
        sandbox: crate::settings(ctx)?.sandbox()?.clone(),
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
        Some(REFUSED) => Err(ToolError::Refused(out.stderr.trim().to_owned())),
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

fn modules(base: &[&str], extra: &[String]) -> Vec<String> {
    base.iter()
        .map(|m| (*m).to_owned())
        .chain(extra.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert!(is_module_name("numpy"));
        assert!(is_module_name("os.path"));
        assert!(is_module_name("_private"));
        assert!(!is_module_name(""));
        assert!(!is_module_name("a..b"));
        assert!(!is_module_name("1abc"));
        assert!(!is_module_name("a-b"));
        assert!(!is_module_name("os; import sys"));
    }

    #[test]
    fn strict_is_a_subset_of_standard() {
        for m in STRICT_MODULES {
            assert!(STANDARD_MODULES.contains(m), "{m}");
        }
        for m in [
            "os",
            "sys",
            "subprocess",
            "socket",
            "io",
            "importlib",
            "shutil",
            "pathlib",
        ] {
            assert!(!STANDARD_MODULES.contains(&m), "{m}");
        }
    }
}
