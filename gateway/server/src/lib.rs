//! toolgate's server: the HTTP faces onto the engine, serving, hot reload
//! and the command line.
//!
//! [`api`] is the router (layers: request id, auth, limits, metrics) and
//! the tool API; [`chat`] is the OpenAI chat-completions face and
//! [`messages`] the Anthropic Messages face, each encoding the engine's
//! answers and events; [`server`] runs the HTTP server (accept
//! loop, signals, graceful shutdown); [`reload`] swaps in a new catalog when
//! the configuration changes; [`cli`] (clap) is the `toolgate` command.

pub mod api;
pub mod chat;
pub mod cli;
pub mod face;
pub mod messages;
pub mod reload;
pub mod server;
