//! Configuration: the YAML formats, reading a configuration folder, and the
//! diagnostics validation produces. serde_yaml stays behind this module.

pub mod diag;
pub mod format;
pub mod load;
pub mod span;

pub use diag::{ConfigErrors, Diagnostic, Severity};
pub use format::{GatewayFile, ToolDecl, ToolFile, ToolSetFile};
pub use load::{RawConfig, load_dir};
pub use span::Pos;
