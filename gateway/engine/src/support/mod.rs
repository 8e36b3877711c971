//! What every layer above leans on and that knows nothing of tools or
//! models: metrics (a leaf: it knows no other module), secrets kept out of
//! what clients see, tracing's trace context, the template environment,
//! the search model's embeddings, and the state shared by replicas (Redis).

#[cfg(test)]
pub(crate) mod any_json;
pub mod embeddings;
pub mod metrics;
pub mod secrets;
pub mod shared;
pub mod telemetry;
pub mod template;
