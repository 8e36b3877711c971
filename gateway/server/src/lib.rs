//! toolgate's server: the HTTP faces onto the engine, serving, hot reload
//! and the command line.
//!
//! [`api`] is the router (layers: request id, auth, limits, metrics) and
//! the tool API; [`chat`] is the OpenAI chat-completions face and
//! [`messages`] and [`responses`] the Anthropic Messages and OpenAI
//! Responses faces, each encoding the engine's answers and events ([`face`]
//! is what they share); [`server`] runs the HTTP server (accept
//! loop, signals, graceful shutdown); [`reload`] swaps in a new catalog when
//! the configuration changes; [`mcp`] serves tool sets to MCP clients
//! (streamable HTTP and stdio); [`cli`] (clap) is the `toolgate` command.

pub mod api;
pub mod chat;
pub mod cli;
pub mod console;
pub mod face;
pub mod mcp;
pub mod messages;
pub mod reload;
pub mod responses;
pub mod server;
pub mod telemetry;
