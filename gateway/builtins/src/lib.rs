//! The builtin tools: `#[tool]` functions shipped with the gateway, offered
//! when named in `builtins.enabled` of `toolgate.yaml`.
//!
//! | tool | module |
//! | --- | --- |
//! | `calculator` | [`calculator`] (a recursive-descent parser, no eval) |
//! | `text_process`, `json_process` | [`text`], [`json`] |
//! | `file_*` | [`files`], confined by [`workspace`] |
//! | `exec`, `execute_python` | [`exec`], [`python`], children run by [`process`] |
//! | `web_fetch` | [`web_fetch`], addresses checked by [`address`] |
//! | `get_weather` | [`weather`] (simulated) |

pub mod address;
pub mod calculator;
pub mod exec;
pub mod files;
pub mod json;
pub mod process;
pub mod python;
pub mod spawn;
pub mod text;
pub mod weather;
pub mod web_fetch;
pub mod workspace;

use std::path::{Path, PathBuf};
use std::time::Duration;

use toolgate::native::NativeTool;
use toolgate::{ToolContext, ToolError};
use toolgate_config::format::{BuiltinsDecl, ExecDecl, PythonDecl, WebFetchDecl};

/// The builtins' settings attached to a call by the gateway. A call
/// without them is refused rather than run with defaults the configuration
/// may have tightened.
pub fn settings(ctx: &ToolContext) -> Result<&BuiltinSettings, ToolError> {
    ctx.get::<BuiltinSettings>().ok_or_else(|| {
        ToolError::Failed(format!(
            "`{}` needs the builtins' settings, which this call was not given",
            ctx.tool
        ))
    })
}

/// Every builtin, in a fixed order (the order of listings).
pub fn all() -> Vec<NativeTool> {
    toolgate::tools![
        calculator::calculator,
        text::text_process,
        json::json_process,
        files::file_read,
        files::file_write,
        files::file_edit,
        files::file_list,
        files::file_exists,
        files::file_mkdir,
        files::file_delete,
        exec::exec,
        python::execute_python,
        web_fetch::web_fetch,
        weather::get_weather,
        spawn::spawn,
    ]
    .into_iter()
    .map(NativeTool::into_builtin)
    .collect()
}

/// The most a builtin produces, in bytes of text or JSON: work whose
/// result would be larger is refused *before* it is done (the executor's
/// output cap applies afterwards, too late to protect memory).
pub const MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;

/// The error of a result that would exceed [`MAX_RESULT_BYTES`].
pub fn too_large(what: &str, bytes: usize) -> toolgate::ToolError {
    toolgate::ToolError::Refused(format!(
        "{what} would be {bytes} bytes or more, over the {MAX_RESULT_BYTES} bytes a builtin produces; narrow the input"
    ))
}

/// The size of `value` as JSON text (pretty or compact), or `None` when it
/// exceeds `limit`: counted without building the text, stopping at the
/// limit.
pub fn json_size_within(value: &serde_json::Value, pretty: bool, limit: usize) -> Option<usize> {
    struct Counter {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter { n: 0, limit };
    let written = if pretty {
        serde_json::to_writer_pretty(&mut c, value)
    } else {
        serde_json::to_writer(&mut c, value)
    };
    written.ok().map(|()| c.n)
}

/// Time a tool's own timeout is given before the executor's cuts it off,
/// so the tool can kill its child and say what happened.
pub const GRACE: Duration = Duration::from_secs(5);

/// The builtins' settings, resolved against the configuration folder.
#[derive(Debug, Clone)]
pub struct BuiltinSettings {
    /// The workspace folder (absolute).
    pub workspace: PathBuf,
    pub exec: ExecDecl,
    pub python: PythonDecl,
    pub web_fetch: WebFetchDecl,
    fetcher: web_fetch::Fetcher,
    /// How children are contained, or why that could not be resolved (then
    /// `exec` and `execute_python` refuse to run: never unconfined).
    sandbox: Result<process::Sandbox, String>,
}

impl Default for BuiltinSettings {
    fn default() -> Self {
        BuiltinSettings::new(&BuiltinsDecl::default(), Path::new("."))
    }
}

impl BuiltinSettings {
    /// The settings of `decl`; a relative workspace is relative to
    /// `config_dir`.
    pub fn new(decl: &BuiltinsDecl, config_dir: &Path) -> BuiltinSettings {
        let joined = config_dir.join(&decl.workspace);
        let workspace = std::path::absolute(&joined).unwrap_or(joined);
        BuiltinSettings {
            workspace,
            exec: decl.exec.clone(),
            python: decl.python.clone(),
            web_fetch: decl.web_fetch.clone(),
            fetcher: web_fetch::Fetcher::new(&decl.web_fetch),
            sandbox: process::Sandbox::resolve(&decl.sandbox),
        }
    }

    /// How child processes are contained.
    pub fn sandbox(&self) -> Result<&process::Sandbox, toolgate::ToolError> {
        self.sandbox
            .as_ref()
            .map_err(|e| toolgate::ToolError::Failed(format!("builtins.sandbox: {e}")))
    }

    /// The same settings with another workspace folder (tests, embedders).
    pub fn with_workspace(mut self, workspace: PathBuf) -> BuiltinSettings {
        self.workspace = workspace;
        self
    }

    /// The HTTP client of `web_fetch`, with its address policy.
    pub fn fetcher(&self) -> &web_fetch::Fetcher {
        &self.fetcher
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_valid() {
        let tools = all();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name).collect();
        assert!(names.iter().all(|n| toolgate::is_valid_name(n)));
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(tools.iter().all(|t| t.builtin));
    }
}
