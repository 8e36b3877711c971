//! Native tools: Rust functions annotated with `#[tool]` (from the
//! `tool-macros` crate).
//!
//! The macro turns a function into a [`NativeTool`]: its name, description,
//! argument schema (from a generated args struct deriving `Deserialize` and
//! `JsonSchema`) and a [`Handler`] that deserializes the arguments, calls the
//! function (sync functions on the blocking pool) and serializes the result.
//! The helpers below are what the generated code calls; they are public
//! because the code is generated in the user's crate.
//!
//! Registration is explicit: `calculator::tool()` returns the registration
//! of the function `calculator`, and a list of them ([`tools!`](crate::tools))
//! is handed to the catalog.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::ToolContext;
use crate::{ArgError, ToolError};

/// The future a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

/// Runs one call: validated arguments and the call's context in, JSON out.
pub type Handler = fn(Value, ToolContext) -> HandlerFuture;

/// A native tool's registration, as `#[tool]` generates it.
#[derive(Clone)]
pub struct NativeTool {
    /// The name the model calls (checked at compile time).
    pub name: &'static str,
    /// What the tool does, for the model.
    pub description: String,
    pub category: Option<&'static str>,
    /// Per-tool timeout; `None` uses the configured default.
    pub timeout: Option<Duration>,
    /// The tool has no side effects; its results may be cached.
    pub read_only: bool,
    /// How long results stay cached (only for `read_only` tools).
    pub cache_ttl: Option<Duration>,
    /// The function takes a context parameter.
    pub takes_context: bool,
    /// A builtin of the gateway (rather than a tool of the user's crate).
    pub builtin: bool,
    /// Where the function is defined: `file:line`.
    pub origin: &'static str,
    /// The canonical JSON Schema of the arguments.
    pub schema: fn() -> Value,
    pub handler: Handler,
}

impl fmt::Debug for NativeTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NativeTool")
            .field("name", &self.name)
            .field("category", &self.category)
            .field("timeout", &self.timeout)
            .field("read_only", &self.read_only)
            .field("takes_context", &self.takes_context)
            .field("builtin", &self.builtin)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl NativeTool {
    /// Runs the function with `args` (already validated against the schema).
    pub async fn call(&self, args: Value, ctx: ToolContext) -> Result<Value, ToolError> {
        (self.handler)(args, ctx).await
    }

    /// The same tool with another timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> NativeTool {
        self.timeout = Some(timeout);
        self
    }

    /// The same tool marked as a builtin of the gateway.
    pub fn into_builtin(mut self) -> NativeTool {
        self.builtin = true;
        self
    }

    /// The canonical schema, made ready for the catalog: the title of the
    /// generated args struct is removed and `properties` always exists.
    pub fn parameters(&self) -> Value {
        let mut schema = (self.schema)();
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("title");
            obj.entry("properties")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
        }
        schema
    }
}

/// A list of native tools: `gateway::tools![calculator, my_mod::search]`
/// is `vec![calculator::tool(), my_mod::search::tool()]`. Removing a
/// function without removing it here is a compile error, never a dangling
/// registration.
#[macro_export]
macro_rules! tools {
    ($($tool:path),* $(,)?) => {
        ::std::vec![$(<$tool>::tool()),*]
    };
}

/// Deserializes validated arguments into the generated args struct.
pub fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| {
        ToolError::InvalidArguments(vec![ArgError {
            path: "/".into(),
            rule: "type".into(),
            message: e.to_string(),
        }])
    })
}

/// Serializes a tool's successful output.
pub fn to_json<T: Serialize>(value: T) -> Result<Value, ToolError> {
    serde_json::to_value(value)
        .map_err(|e| ToolError::Failed(format!("the result cannot be serialized: {e}")))
}

/// Turns a tool's error into a [`ToolError`]: a `ToolError` is kept as it
/// is (so `Refused` stays a refusal); anything else is `Failed` with its
/// message.
pub fn into_tool_error<E: fmt::Display + 'static>(error: E) -> ToolError {
    let mut slot = Some(error);
    let any: &mut dyn std::any::Any = &mut slot;
    if let Some(tool_error) = any.downcast_mut::<Option<ToolError>>() {
        return tool_error
            .take()
            .unwrap_or_else(|| ToolError::Failed("error".into()));
    }
    match slot {
        Some(e) => ToolError::Failed(e.to_string()),
        None => ToolError::Failed("error".into()),
    }
}

/// Sync tool calls running at once: the rest of the blocking pool stays
/// free for the gateway's own work (reloads, file I/O), whatever the tools
/// do.
const MAX_BLOCKING_CALLS: usize = 64;
static BLOCKING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_BLOCKING_CALLS);

/// Runs a sync tool function on the blocking thread pool, so blocking I/O
/// does not stall the server, at most `MAX_BLOCKING_CALLS` at once (a
/// call waits for a slot within its timeout); a panic in `f` goes on in
/// the caller (the gateway reports a tool's panic as `tool_crashed`).
pub async fn blocking<R, F>(f: F) -> Result<R, ToolError>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let permit = BLOCKING
        .acquire()
        .await
        .map_err(|_| ToolError::Failed("the gateway is shutting down".into()))?;
    tokio::task::spawn_blocking(move || {
        let _held = permit;
        f()
    })
    .await
    .map_err(|e| match e.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        Err(_) => ToolError::Failed("the call was cancelled".into()),
    })
}

/// The schema of the generated args struct.
pub fn schema_of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default()
}

/// Compile-time check used by the generated code: the return type must be
/// serializable. (The error points at the function's return type.)
pub fn assert_serialize<T: Serialize + ?Sized>() {}

/// Re-exports the generated code uses, so a user crate needs no direct
/// dependency on serde or schemars. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use ::schemars;
    pub use ::serde;
    pub use ::serde_json;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_errors_keep_their_kind() {
        let e = into_tool_error(ToolError::Refused("no".into()));
        assert_eq!(e.code(), "refused");
        let e = into_tool_error("plain message".to_owned());
        assert_eq!(e.code(), "tool_error");
        assert_eq!(e.to_string(), "plain message");
        let e = into_tool_error(std::io::Error::other("disk"));
        assert_eq!(e.to_string(), "disk");
    }

    #[tokio::test]
    async fn a_panic_in_blocking_goes_on_in_the_caller() {
        let call = tokio::spawn(blocking(|| -> () { panic!("boom") }));
        let panic = call.await.expect_err("the panic goes on").into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"boom"));
        assert_eq!(blocking(|| 2 + 2).await.unwrap(), 4);
    }
}
