//! The end-to-end tests, one binary of modules (one link step for all):
//! each module tests one face or part of toolgate through its public
//! interfaces — real processes, real HTTP, real MCP servers where users
//! have them.

#[macro_use]
mod mcp_support;

mod attacks;
mod builtins;
mod chat;
mod cli;
mod code_mode;
mod config_errors;
mod custom_tools;
mod discovery;
mod escapes;
mod golden;
mod http_tools;
mod layering;
mod mcp;
mod mcp_config;
mod mcp_faults;
mod mcp_lists;
mod mcp_messages;
mod mcp_oauth;
mod native_faults;
mod native_registry;
mod openapi;
mod ops;
mod parser_bfcl;
mod routing;
mod scale;
mod search_public;
mod secrets_public;
mod serve;
mod spend;
mod structured;
mod subagents;
mod traces;
