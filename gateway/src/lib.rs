//! toolgate: a declarative tool gateway for LLM applications.
//!
//! Data flows through the modules in this order: [`config`] reads the YAML
//! files, [`catalog`] validates them into an immutable catalog of [`tool`]s,
//! tool sets and [`upstream`]s; a chat request ([`chat`]) picks a tool set
//! and a route, the model is called through its upstream, and the
//! [`executor`] runs the tool calls it makes. [`api`] (axum), [`openai`]
//! (wire format) and [`cli`] (clap) are the edges users touch.
//!
//! Around that flow, for running it in production: [`server`] runs the
//! HTTP server (signals, graceful shutdown), [`reload`] swaps in a new
//! catalog when the configuration changes, [`auth`] decides who may call
//! with which tool sets, [`limits`] caps concurrency and rates, [`audit`]
//! writes one line per tool call, and [`metrics`] counts everything.

extern crate self as gateway;

pub mod api;
pub mod audit;
pub mod auth;
pub mod builtin;
pub mod catalog;
pub mod chat;
pub mod cli;
pub mod config;
pub mod executor;
pub mod formatter;
pub mod limits;
pub mod metrics;
pub mod openai;
pub mod reload;
pub mod secrets;
pub mod server;
pub mod template;
pub mod tool;
pub mod toolcall;
pub mod upstream;
