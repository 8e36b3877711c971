//! toolgate's MCP client: the tools of declared MCP servers, proxied over
//! one persistent session per server (official `rmcp` client, stdio or
//! streamable HTTP, OAuth).
//!
//! The client knows nothing of the gateway's tool type: the registry is
//! generic over it ([`Offer`]), and the engine makes its tools of the
//! listings. A call ([`McpTool::call`]) answers with the server's result
//! mapped for a model and as the server sent it ([`Answer`]).
//!
//! - [`spec`]: a validated server declaration and the naming rules;
//! - [`oauth`]: the gateway authorized at a server (client credentials, or
//!   a person's login saved to a token file);
//! - [`session`]: a server's supervisor (start, list, relist on
//!   `list_changed`, restart with backoff, stderr to the logs);
//! - `registry`: the [`McpRegistry`] of a catalog's servers and what they
//!   offer now, and its requests other than tool calls;
//! - `call`: a tool call, and the input a server asks for during one;
//! - `errors`: an rmcp error in words, and what it says of the connection;
//! - [`extras`]: a server's prompts, resources and resource templates;
//! - [`progress`]: a server's progress reports, routed to their call;
//! - [`relay`]: what a server asks during a call, passed to the call's
//!   client when it can answer;
//! - [`result`]: an MCP result as the gateway's uniform result.
//!
//! Tool names are only known once a server has listed its tools, while the
//! gateway's catalog is validated up front and immutable. The catalog
//! therefore holds an [`McpRegistry`]: the declared servers (validated with
//! the rest of the configuration) and a snapshot of their tools, prompts
//! and resources that the supervisors replace as a whole whenever a server
//! starts, stops or changes its lists. Lookups load the snapshot without a
//! lock.

mod call;
mod errors;
pub mod extras;
pub mod oauth;
pub mod progress;
mod registry;
pub mod relay;
pub mod result;
pub mod session;
pub mod spec;
mod stdio;

pub use call::{Answer, NoAnswer};
pub use registry::{AskError, Asked, Expected, Gap, McpRegistry, ServerReport};
pub use session::listing::McpTool;
pub use session::shared_pins::PinStore;
pub use spec::ServerSpec;

/// The gateway's tool type, as the registry makes and holds it: one for
/// each tool a server lists that its declaration admits.
pub trait Offer: Sized + Send + Sync + 'static {
    /// The gateway's tool for `listed`, a tool of `spec`'s server, named
    /// `name` in the gateway and called through `handle`; `Err` says why
    /// it cannot be offered (e.g. its schema is unusable).
    fn offer(
        spec: &ServerSpec,
        name: &str,
        listed: &rmcp::model::Tool,
        handle: McpTool<Self>,
    ) -> Result<Self, String>;

    /// Its description, for reports.
    fn description(&self) -> &str;
}
