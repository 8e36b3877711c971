//! What a server sends the client of its session: its notifications (list
//! changes, resource updates, progress) and the requests it makes beside a
//! call (elicitation, sampling, roots).

use std::sync::Arc;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::Notify;

/// Receives the server's notifications on the client side.
pub(super) struct Handler {
    pub(super) server: String,
    pub(super) list_changed: Arc<Notify>,
    /// Where resource updates go: the gateway's own session only (a
    /// caller's session's updates are theirs, and not relayed).
    pub(super) updates: Option<tokio::sync::broadcast::Sender<String>>,
    pub(super) progress: crate::progress::Dispatcher,
    pub(super) running: Arc<crate::relay::Running>,
}

impl ClientHandler for Handler {
    /// The gateway answers a server's elicitation (its caller's client,
    /// or a decline), roots (the client's, or none) and sampling (the
    /// client's model, or a failed call saying no one can): see `relay`.
    #[allow(deprecated)] // roots and sampling (SEP-2577), still carried
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.roots = Some(Default::default());
        capabilities.sampling = Some(Default::default());
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(updates) = &self.updates {
            // As the gateway offers the URI; no face session listening is
            // not an error.
            let uri = crate::extras::app_uri(&self.server, &params.uri).unwrap_or(params.uri);
            let _ = updates.send(uri);
        }
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.handle(params).await;
    }

    // A server of an older revision asks beside the call: the one call
    // running gets the question (see `relay`), or it is answered as the
    // gateway alone can.
    #[allow(deprecated)] // sampling, roots and logging (SEP-2577), still carried
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.running
            .only()
            .unwrap_or_default()
            .elicit(request)
            .await
    }

    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.running
            .only()
            .unwrap_or_default()
            .sample(params, &self.server)
            .await
    }

    #[allow(deprecated)]
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        self.running.only().unwrap_or_default().roots().await
    }

    // Log messages never reach here: `Inbound` hands them over as they
    // arrive.
}
