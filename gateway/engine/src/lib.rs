//! toolgate's engine: everything between a parsed request and the model's
//! final answer, with no HTTP server in it.
//!
//! Data flows through the modules in this order: [`catalog`] validates the
//! configuration (read by `toolgate_config`) into an immutable catalog of
//! [`tool`]s, tool sets and [`upstream`]s; a chat ([`chat`]) picks a tool
//! set and a route, calls the model through its upstream in the route's
//! model [`protocol`] — the typed [`conversation`] written for it —, with
//! tools offered by the [`formatter`], and the [`executor`] runs the tool
//! calls it makes. The loop yields typed events;
//! the faces above (chat completions, MCP, ...) encode them.
//!
//! Beside that flow: [`auth`] decides who may call with which tool sets
//! ([`jwt`] checks tokens of an OAuth authorization server),
//! [`limits`] caps concurrency and rates, [`audit`] writes one line per tool
//! call, [`metrics`] counts everything (a leaf: it knows no other module),
//! [`secrets`] keeps configured secrets out of what clients see,
//! [`template`] renders HTTP tools' requests, [`credentials`] gives HTTP
//! tools the calling user's own token for their upstream, and [`sampling`]
//! lets the gateway's model answer an MCP server's sampling requests.

pub mod approvals;
pub mod audit;
pub mod auth;
pub mod catalog;
pub mod chat;
pub mod code;
pub mod conversation;
pub mod conversations;
pub mod credentials;
pub mod discovery;
pub mod embeddings;
pub mod executor;
pub mod formatter;
pub mod guards;
pub mod jwt;
pub mod limits;
pub mod metrics;
pub mod policy;
pub mod prompt;
pub mod protocol;
pub mod sampling;
pub mod secrets;
pub mod shared;
pub mod telemetry;
pub mod template;
pub mod tool;
pub mod upstream;
