//! Models: the protocols the conversation is written in for them
//! ([`protocol`]), the upstreams that serve them ([`upstream`]) and the
//! routes to them ([`routing`]), how tools reach a model with or without function
//! calling ([`formatter`], [`prompt`]), and the gateway's own model
//! answering MCP servers' sampling requests ([`sampling`]).

pub mod formatter;
pub mod prompt;
pub mod protocol;
pub mod routing;
pub mod sampling;
pub mod upstream;
