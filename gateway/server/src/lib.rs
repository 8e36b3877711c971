//! toolgate's server: the HTTP faces onto the engine, serving, hot reload
//! and the command line, in the order they build on each other:
//!
//! - [`telemetry`] (logs, traces) and [`reload`] (the catalog in service,
//!   swapped when the configuration changes);
//! - [`http`], the floor: shared state, the error body, the layers around
//!   every handler;
//! - [`ops`] (health, readiness, metrics) and [`faces`] (chat completions,
//!   Responses, Messages, the tool API, MCP, the console);
//! - [`router`]: which path goes where, and the service each connection
//!   runs;
//! - [`server`]: serving (accept loop, signals, graceful shutdown);
//! - [`cli`] (clap): the `toolgate` command.
//!
//! No module refers to one after it in this list, and no files refer to
//! each other in a circle (`tests/tests/e2e/layering.rs`).

pub mod cli;
pub mod faces;
pub mod http;
pub mod ops;
pub mod reload;
pub mod router;
pub mod server;
pub mod telemetry;
