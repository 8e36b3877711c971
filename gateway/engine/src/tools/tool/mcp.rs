//! MCP tools: the gateway's tools made of what declared MCP servers list.
//! The client itself (declarations, sessions, OAuth, the registry) is the
//! `toolgate-mcp-client` crate; this module makes a [`Tool`] of each listed
//! tool and runs a call with the gateway's trace context, its result in
//! the gateway's uniform shape.

use std::sync::Arc;

use serde_json::Value;

use super::{Annotations, Output, ProgressSink, Tool, ToolKind, ToolSpec};
use crate::tools::tool::context::CallContext;
pub use toolgate_mcp_client::{
    AskError, Asked, Expected, Gap, PinStore, ServerReport, ServerSpec, extras, oauth, relay,
    result, session, spec,
};

/// One tool of an MCP server, as the gateway calls it.
pub type McpTool = toolgate_mcp_client::McpTool<Tool>;

/// The MCP servers of a catalog and the tools they offer now.
pub type McpRegistry = toolgate_mcp_client::McpRegistry<Tool>;

impl toolgate_mcp_client::Offer for Tool {
    fn offer(
        spec: &ServerSpec,
        name: &str,
        t: &rmcp::model::Tool,
        handle: McpTool,
    ) -> Result<Tool, String> {
        let remote = handle.remote_name();
        let mut parameters = Value::Object((*t.input_schema).clone());
        if let Some(obj) = parameters.as_object_mut() {
            obj.entry("type").or_insert_with(|| Value::from("object"));
        }
        let description = t
            .description
            .as_deref()
            .map(str::to_owned)
            .or_else(|| t.title.clone())
            .filter(|d| !d.trim().is_empty())
            .unwrap_or_else(|| format!("Tool `{remote}` of MCP server `{}`.", spec.name));
        Tool::new(
            ToolSpec {
                name: name.to_owned(),
                description,
                category: Some(format!("mcp:{}", spec.name)),
                parameters,
                timeout: spec.timeout,
                cache_ttl: spec.cache_ttl.filter(|_| handle.read_only),
                annotations: annotations(t),
                output_schema: t
                    .output_schema
                    .as_ref()
                    .map(|s| Value::Object((**s).clone())),
                origin: format!("{} (MCP server `{}`)", spec.origin(), spec.name),
            },
            ToolKind::Mcp(handle),
        )
        .map_err(|e| format!("its input schema is unusable: {e}"))
    }

    fn description(&self) -> &str {
        &self.description
    }
}

/// The server's annotations of a tool, its `title` first.
fn annotations(t: &rmcp::model::Tool) -> Annotations {
    let a = t.annotations.as_ref();
    Annotations {
        title: t.title.clone().or_else(|| a.and_then(|a| a.title.clone())),
        read_only_hint: a.and_then(|a| a.read_only_hint),
        destructive_hint: a.and_then(|a| a.destructive_hint),
        idempotent_hint: a.and_then(|a| a.idempotent_hint),
        open_world_hint: a.and_then(|a| a.open_world_hint),
    }
}

/// Calls `tool` with the current span's trace context (when traces are
/// exported); its result as the model reads it, and the server's whole
/// result for clients that read it (the MCP face).
/// `bearer`: the caller's token for a server called as each caller.
pub async fn call(
    tool: &McpTool,
    args: &Value,
    ctx: &CallContext,
    progress: Option<&ProgressSink>,
    bearer: Option<&str>,
) -> Result<Output, toolgate_mcp_client::NoAnswer> {
    let mut trace = http::HeaderMap::new();
    if crate::support::telemetry::enabled() {
        crate::support::telemetry::inject(&mut trace);
    }
    let answer = tool.call(args, ctx, &trace, progress, bearer).await?;
    Ok(Output {
        data: answer.data,
        mcp_result: Some(Arc::clone(&answer.wire)),
    })
}
