//! The MCP server of a tool set (rmcp's `ServerHandler`): `tools/list` and
//! `tools/call` over the catalog in service, list changes pushed to
//! clients that listen.
//!
//! The handler holds no per-client state: which set a request is for, and
//! whose key it carries, come with each request ([`Target`], put in the
//! HTTP request by the endpoint, or fixed for stdio). A call runs through
//! the executor like every other call (validation, timeout, cache, output
//! cap, audit, metrics, the key's tool-call rate).

use std::time::Duration;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, DiscoverResult, ErrorCode,
    Implementation, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, ServerNotification,
    SubscriptionFilter, ToolListChangedNotification,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::SessionRestoreMarker;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::wire;
use crate::api::{AppState, Caller};
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{ToolCall, ToolResult};
use toolgate_engine::tool::ToolError;
use toolgate_engine::tool::context::CallContext;

/// How often a listening client's set is compared with what it was, to
/// catch changes that come without a reload (an MCP server's tools).
const LIST_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Which set a request is for, and who sends it.
#[derive(Debug, Clone)]
pub struct Target {
    pub set: String,
    pub caller: Caller,
}

/// The MCP server of the gateway's tool sets.
#[derive(Debug, Clone)]
pub struct ToolSetServer {
    state: AppState,
    /// The one target of a stdio server; HTTP requests bring theirs.
    fixed: Option<Target>,
}

impl ToolSetServer {
    /// A server whose requests bring their target (HTTP).
    pub fn new(state: AppState) -> Self {
        ToolSetServer { state, fixed: None }
    }

    /// A server of one set, for one local client (stdio).
    pub fn fixed(state: AppState, target: Target) -> Self {
        ToolSetServer {
            state,
            fixed: Some(target),
        }
    }

    fn target(&self, extensions: &rmcp::model::Extensions) -> Result<Target, McpError> {
        if let Some(t) = &self.fixed {
            return Ok(t.clone());
        }
        extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Target>())
            .cloned()
            .ok_or_else(|| McpError::internal_error("the request names no tool set", None))
    }

    /// The set's tools as `tools/list` entries, in the set's order.
    fn list(&self, catalog: &Catalog, target: &Target) -> Result<Vec<rmcp::model::Tool>, McpError> {
        let set = catalog
            .usable_set(&target.set, target.caller.key.as_deref())
            .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
        catalog
            .tools_in(set)
            .map(|t| {
                wire::tool(&t).map_err(|e| {
                    McpError::internal_error(
                        format!("tool `{}` cannot be listed: {e}", t.name),
                        None,
                    )
                })
            })
            .collect()
    }

    /// A digest of the set's list as a client sees it.
    fn fingerprint(&self, target: &Target) -> Option<[u8; 32]> {
        let tools = self.list(&self.state.catalog(), target).ok()?;
        let json = serde_json::to_vec(&tools).ok()?;
        Some(Sha256::digest(&json).into())
    }

    /// Waits until the set's list differs from `seen` (a reload, an MCP
    /// server's change), then returns the new fingerprint; `None` when
    /// the gateway is stopping.
    async fn next_change(&self, target: &Target, seen: &mut Option<[u8; 32]>) -> Option<()> {
        let mut changes = self.state.live().subscribe();
        let mut tick = tokio::time::interval(LIST_CHECK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                r = changes.changed() => r.ok()?,
                _ = tick.tick() => {}
            }
            let now = self.fingerprint(target);
            if now != *seen {
                *seen = now;
                return Some(());
            }
        }
    }

    async fn call(&self, request: CallToolRequestParams, target: &Target) -> ToolResult {
        let catalog = self.state.catalog();
        let name = request.name.to_string();
        let context = CallContext::new()
            .with_request_id(target.caller.request_id.clone())
            .with_key(target.caller.key_name())
            .with_tool_set(Some(target.set.clone()));
        let call = ToolCall {
            id: format!("mcp-{}", target.caller.request_id),
            name,
            arguments: Value::Object(request.arguments.unwrap_or_default()),
        };
        self.state.executor.run(&catalog, &call, &context).await
    }
}

/// `true` when `name` is a tool of the set (usable or not) for this caller.
fn in_set(catalog: &Catalog, target: &Target, name: &str) -> Result<bool, McpError> {
    let set = catalog
        .usable_set(&target.set, target.caller.key.as_deref())
        .map_err(|e| McpError::invalid_request(e.to_string(), None))?;
    Ok(set.tools.iter().any(|t| t == name)
        || set.unavailable.iter().any(|t| t == name)
        || set.mcp.iter().any(|p| p.matches(name)))
}

impl ServerHandler for ToolSetServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")).with_title("toolgate"),
        )
    }

    async fn initialize(
        &self,
        mut request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // A session re-created on this replica from its signed id: the
        // client's version is in its `MCP-Protocol-Version` header.
        if context.extensions.get::<SessionRestoreMarker>().is_some()
            && let Some(version) = context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|p| p.headers.get("mcp-protocol-version"))
                .and_then(|v| v.to_str().ok())
                .and_then(|v| serde_json::from_value::<ProtocolVersion>(Value::from(v)).ok())
        {
            request.protocol_version = version;
        }
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        if let Ok(target) = self.target(&context.extensions)
            && let Some(set) = self.state.catalog().set(&target.set)
            && let Some(description) = &set.description
        {
            result = result.with_instructions(description.clone());
        }
        Ok(result)
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let mut info = self.get_info();
        if let Ok(target) = self.target(&context.extensions)
            && let Some(set) = self.state.catalog().set(&target.set)
        {
            info.instructions = set.description.clone();
        }
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            info,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let target = self.target(&context.extensions)?;
        let catalog = self.state.catalog();
        let ttl = catalog.settings.mcp.list_ttl;
        let tools = self.list(&catalog, &target)?;
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX))
            // What a key may list is the key's: never shared between keys.
            .with_cache_scope(CacheScope::Private))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let target = self.target(&context.extensions)?;
        let catalog = self.state.catalog();
        if !in_set(&catalog, &target, &request.name)? {
            return Err(McpError::new(
                ErrorCode::INVALID_PARAMS,
                format!("Unknown tool: {}", request.name),
                None,
            ));
        }
        let started = std::time::Instant::now();
        let name = request.name.to_string();
        let result = tokio::select! {
            result = self.call(request, &target) => result,
            () = context.ct.cancelled() => {
                // Dropping the call cancels it (an MCP server's call gets
                // `notifications/cancelled`); the audit log still hears of it.
                let result = ToolResult::failure(
                    ToolError::Failed("the client cancelled the call".into()),
                    started,
                );
                let call = ToolCall { id: format!("mcp-{}", target.caller.request_id), name, arguments: Value::Null };
                let context = CallContext::new()
                    .with_request_id(target.caller.request_id.clone())
                    .with_key(target.caller.key_name())
                    .with_tool_set(Some(target.set.clone()));
                self.state.executor.record(&catalog, &call, &context, &result).await;
                return Err(McpError::new(ErrorCode::INTERNAL_ERROR, "cancelled", None));
            }
        };
        let result: CallToolResult = wire::result(&result).map_err(|e| {
            McpError::internal_error(format!("the result cannot be encoded: {e}"), None)
        })?;
        Ok(CallToolResponse::Complete(result))
    }

    /// 2025-11-25 sessions (and stdio): tell the client when the set's
    /// list changes, for as long as the session lasts.
    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let Ok(target) = self.target(&context.extensions) else {
            return;
        };
        let server = self.clone();
        let peer = context.peer;
        tokio::spawn(async move {
            let mut seen = server.fingerprint(&target);
            while server.next_change(&target, &mut seen).await.is_some() {
                if peer.is_transport_closed() || peer.notify_tool_list_changed().await.is_err() {
                    break;
                }
                tracing::debug!(tool_set = %target.set, "told an MCP client the tool list changed");
            }
        });
    }

    /// 2026-07-28: `subscriptions/listen` for tool list changes.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let target = self.target(&context.request_context().extensions)?;
        let mut seen = self.fingerprint(&target);
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                changed = self.next_change(&target, &mut seen) => {
                    if changed.is_none() {
                        return Ok(());
                    }
                    if context.accepted().tools_list_changed == Some(true) {
                        let note = ServerNotification::ToolListChangedNotification(
                            ToolListChangedNotification::default(),
                        );
                        if context.sink().send(note).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}
