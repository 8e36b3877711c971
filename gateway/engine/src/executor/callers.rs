//! MCP servers called as each caller: their listings made as the caller,
//! and what is asked of them (prompts, resources) on the caller's own
//! session.

use crate::catalog::Catalog;
use crate::tools::tool::ToolError;
use crate::tools::tool::context::CallContext;

use super::Executor;

impl Executor {
    /// Has each MCP server called as each caller (`credentials`) list its
    /// tools to the caller of `ctx`, in their own session and with their
    /// token (renewed once when refused, like a call's), unless their
    /// listing is fresh: from then on what they are offered, and may call,
    /// from that server is what it lists to them. A caller who has not
    /// connected, or a listing that fails, keeps the gateway's view of the
    /// server (a call then says how to connect, or what failed). Every face
    /// calls it before it lists a set's tools or plans a request.
    pub async fn list_as_caller(&self, catalog: &Catalog, ctx: &CallContext) {
        let (Some(subject), Some(connections)) =
            (ctx.subject.as_deref(), catalog.connections.as_deref())
        else {
            return;
        };
        let servers = catalog.mcp().per_caller();
        if servers.is_empty() {
            return;
        }
        let store = connections.store(self.shared.as_ref());
        let store = &store;
        let lists = servers.iter().map(|(server, how)| async move {
            let mcp = catalog.mcp();
            let listed = connections
                .with_token(store, how, ctx, |token| async move {
                    match mcp.list_as(server, subject, &token).await {
                        Ok(()) => (Ok(()), false),
                        Err((why, refused)) => (Err(ToolError::Backend(why)), refused),
                    }
                })
                .await;
            if let Err(e) = listed {
                tracing::debug!(mcp_server = %server, subject, "the caller's own listing was not made: {e}");
            }
        });
        futures::future::join_all(lists).await;
    }

    /// Runs `ask` — a request other than a tool call (`prompts/get`,
    /// `resources/read`, `completion/complete`) about `what` — for the
    /// caller of `ctx`. At a per-caller server that listed its prompts and
    /// resources to them, `ask` gets their subject and token and goes over
    /// their own session (the token renewed once when refused, like a
    /// call's); otherwise it gets `None` and goes over the gateway's.
    pub async fn ask_as_caller<R, F, Fut>(
        &self,
        catalog: &Catalog,
        ctx: &CallContext,
        what: crate::tools::tool::mcp::Asked<'_>,
        mut ask: F,
    ) -> Result<R, rmcp::ErrorData>
    where
        F: FnMut(Option<(String, String)>) -> Fut,
        Fut: std::future::Future<Output = Result<R, crate::tools::tool::mcp::AskError>>,
    {
        let own = match (ctx.subject.as_deref(), catalog.connections.as_deref()) {
            (Some(subject), Some(connections)) => catalog
                .mcp()
                .asked_of(&what, subject)
                .map(|(_, how)| (subject, connections, how)),
            _ => None,
        };
        let Some((subject, connections, how)) = own else {
            return ask(None).await.map_err(rmcp::ErrorData::from);
        };
        let store = connections.store(self.shared.as_ref());
        let asked = connections
            .with_token(&store, &how, ctx, |token| {
                let answer = ask(Some((subject.to_owned(), token)));
                async move {
                    match answer.await {
                        Ok(r) => (Ok::<_, ToolError>(Ok(r)), false),
                        Err(e) => {
                            let refused = e.refused;
                            (Ok(Err(e.error)), refused)
                        }
                    }
                }
            })
            .await;
        match asked {
            Ok(answer) => answer,
            Err(e) => Err(rmcp::ErrorData::invalid_request(e.to_string(), None)),
        }
    }
}
