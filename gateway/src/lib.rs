//! toolgate: a declarative tool gateway for LLM applications.
//!
//! Data flows through the modules in this order: [`config`] reads the YAML
//! files, [`catalog`] validates them into an immutable catalog of [`tool`]s
//! and tool sets, the [`executor`] runs tool calls against a catalog, and
//! [`api`] (axum) and [`cli`] (clap) are the edges users touch.

pub mod api;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod executor;
pub mod template;
pub mod tool;
