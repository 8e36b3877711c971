//! toolgate's engine: everything between a decoded request and the
//! model's final answer, with no HTTP server in it. Its folders are its
//! layers, lowest first (each refers only to the ones before it; the
//! layering test holds it):
//!
//! 1. [`support`] (metrics, secrets, trace context, templates, embeddings,
//!    the replicas' shared state) and [`conversation`] (the one typed
//!    conversation every face decodes into);
//! 2. [`identity`] (keys, tokens, users' credentials) and [`model`]
//!    (model protocols, upstreams and routes, formatters, sampling);
//! 3. [`governance`] (policies, approvals, guards, limits, audit) and
//!    [`tools`] (the tool kinds, code mode, tool search);
//! 4. [`catalog`]: the configuration validated into tools, tool sets and
//!    routes;
//! 5. [`executor`]: one tool call through every check to its result;
//! 6. [`chat`]: a request planned and run as a tool loop, its events and
//!    answer, which the faces above encode.

pub mod catalog;
pub mod chat;
pub mod conversation;
pub mod executor;
pub mod governance;
pub mod identity;
pub mod model;
pub mod support;
pub mod tools;
