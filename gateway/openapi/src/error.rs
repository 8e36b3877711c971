//! Why an import fails as a whole.

use std::path::PathBuf;

/// Why an import failed as a whole (one operation that cannot be a tool is
/// skipped and listed instead).
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path} is neither YAML nor JSON: {message}")]
    Parse { path: PathBuf, message: String },
    #[error(
        "this is not an OpenAPI 3.x or Swagger 2.0 description: it has no `openapi: 3.x` or `swagger: \"2.0\"` field"
    )]
    NotOpenApi,
    #[error(
        "the spec's server URL `{0}` is not an absolute http(s) URL free of `{{`/`}}` (unfilled server variables or template syntax): give the API's address with `server` (`--server https://api.example.com`)"
    )]
    Server(String),
    #[error("`{glob}` is not a valid glob: {message}")]
    Glob { glob: String, message: String },
    #[error(
        "`{0}` is not a valid environment variable name: use A-Z, 0-9 and _, not starting with a digit"
    )]
    EnvName(String),
    #[error("cannot write the tools as YAML: {0}")]
    Yaml(String),
}
