//! The toolgate tool SDK: what a tool author needs to write tools for
//! toolgate as plain Rust functions.
//!
//! ```ignore
//! use toolgate::{ToolError, tool};
//!
//! /// Adds two numbers.
//! #[tool]
//! fn add(a: f64, b: f64) -> Result<f64, ToolError> {
//!     Ok(a + b)
//! }
//!
//! // Handed to the gateway as a list: `toolgate::tools![add]`.
//! ```
//!
//! - [`tool`]: the attribute that turns a function into a [`NativeTool`];
//! - [`tools!`]: a list of them, checked at compile time;
//! - [`ToolContext`]: the call's context (request id, project, typed
//!   extensions the gateway adds), for a tool that declares a `ctx` parameter;
//! - [`ToolError`]: why a call failed, as the model reads it;
//! - [`strict`]: OpenAI's strict rendering of a tool's JSON Schema;
//! - [`canonical_json`], [`truncate_chars`]: helpers every layer shares.

extern crate self as toolgate;

pub mod context;
mod error;
mod json;
pub mod native;
pub mod strict;

pub use context::{
    BearerToken, CallContext, ClientLink, Extensions, Progress, ProgressSink, ToolContext,
};
pub use error::{ArgError, ErrorRepr, ToolError, is_valid_name};
pub use json::{canonical_json, truncate_chars};
pub use native::NativeTool;
pub use tool_macros::tool;
