//! A server's tool list kept fresh by its `ttlMs` (2026-07-28): a server
//! that does not announce list changes but says how long its list stays
//! fresh is listed again when it goes stale (an rmcp server in this test).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::Router;
use rmcp::model::{
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use toolgate_tests::{ConfigDir, load_catalog};

use crate::mcp_support::{eventually, start, tool_without_arguments};

/// Lists `first`, and `second` too once `grown` is set, each list fresh
/// for 100 ms; it never announces a change (and has nothing to call).
#[derive(Clone, Default)]
struct Growing {
    grown: Arc<AtomicBool>,
    listings: Arc<AtomicUsize>,
}

fn tool(name: &'static str) -> Tool {
    tool_without_arguments(name, "A tool.")
}

impl ServerHandler for Growing {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.listings.fetch_add(1, Ordering::SeqCst);
        let mut tools = vec![tool("first")];
        if self.grown.load(Ordering::SeqCst) {
            tools.push(tool("second"));
        }
        let mut result = ListToolsResult::with_all_items(tools);
        result.ttl_ms = Some(100);
        Ok(result)
    }
}

#[tokio::test]
async fn a_list_with_a_ttl_is_listed_again_when_stale() {
    let server = Growing::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let handler = server.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = Router::new().nest_service("/mcp", mcp);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = ConfigDir::new(&[(
        "tools.d/growing.yaml",
        &format!("mcp_servers:\n  - name: growing\n    transport: http\n    url: {url}\n"),
    )]);
    let catalog = load_catalog(dir.path(), &[]);
    start(&catalog).await;
    assert!(catalog.tool("first").is_some());
    assert!(catalog.tool("second").is_none());
    let at_start = server.listings.load(Ordering::SeqCst);

    // The server adds a tool and says nothing: the stale list is listed
    // again (after the gateway's floor of 5 s, not the 100 ms asked).
    server.grown.store(true, Ordering::SeqCst);
    let began = std::time::Instant::now();
    eventually("the new tool is offered", || {
        catalog.tool("second").is_some()
    })
    .await;
    assert!(
        began.elapsed() >= std::time::Duration::from_secs(4),
        "listed again after {:?}: the 5 s floor was not kept",
        began.elapsed()
    );
    assert!(server.listings.load(Ordering::SeqCst) > at_start);
}
