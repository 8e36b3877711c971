//! MCP sessions (protocol 2025-11-25 and older) that any replica can serve.
//!
//! A session holds nothing another replica could not rebuild: the gateway's
//! MCP server is the same for every client, and each request carries its
//! own API key and tool set. So a session id is a random nonce signed with
//! HMAC-SHA256 under `mcp.session_secret_env` (or a per-process secret),
//! and a replica that meets a signed id it does not hold re-creates the
//! session on the spot (rmcp's session restore, with the signature as the
//! store). Behind a load balancer without affinity, a client keeps its
//! session whichever replica answers. An unsigned or forged id is unknown:
//! 404, and the client starts a new session, as the spec says.
//!
//! Sessions live in memory (rmcp's local manager), closed on `DELETE` or
//! after five idle minutes; their number is capped by `mcp.max_sessions`.
//! A session closed with `DELETE` stays closed (its id is remembered for a
//! day): on the replica that closed it, and, with shared state
//! (`state.redis`), on every replica; without it, another replica would
//! still accept the id.

use std::sync::Arc;

use toolgate_engine::support::shared::Redis;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use rmcp::model::{
    ClientCapabilities, ClientJsonRpcMessage, Implementation, InitializeRequestParams,
    ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager, SessionState, SessionStore,
    SessionStoreError,
};
use sha2::Sha256;

use toolgate_engine::catalog::Secret;

tokio::task_local! {
    /// The key (name) of the request rmcp is handling: sessions are issued
    /// to it, and only its ids verify.
    pub static OWNER: String;
}

fn owner() -> String {
    OWNER.try_with(Clone::clone).unwrap_or_default()
}

/// Bytes of the HMAC kept in an id (128 bits).
const TAG_BYTES: usize = 16;

/// Signs and checks session ids.
#[derive(Clone)]
pub struct Signer {
    key: Arc<[u8]>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// Signs with `secret`, or with a random secret of this process.
    pub fn new(secret: Option<&Secret>) -> Signer {
        let key: Vec<u8> = match secret {
            Some(s) => s.bytes().to_vec(),
            None => [uuid::Uuid::new_v4(), uuid::Uuid::new_v4()]
                .iter()
                .flat_map(|u| u.into_bytes())
                .collect(),
        };
        Signer { key: key.into() }
    }

    fn mac(&self, nonce: &str, owner: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(nonce.as_bytes());
        mac.update(b"\0");
        mac.update(owner.as_bytes());
        mac
    }

    /// The codec of the `requestState` the MCP face hands its clients
    /// (see `input`), under a key derived from the same secret: every
    /// replica that shares the secret opens another's.
    pub fn request_states(&self) -> rmcp::model::RequestStateCodec {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"toolgate MCP requestState");
        rmcp::model::RequestStateCodec::new_unchecked(mac.finalize().into_bytes().to_vec())
    }

    /// A new id for a session of `owner` (the API key's name, empty when
    /// the gateway is open): `<nonce>.<tag>`.
    pub fn issue(&self, owner: &str) -> String {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let tag = self.mac(&nonce, owner).finalize().into_bytes();
        format!("{nonce}.{}", URL_SAFE_NO_PAD.encode(&tag[..TAG_BYTES]))
    }

    /// `true` when `id` was issued under this secret for `owner` (compared
    /// in constant time): another key's session id does not verify.
    pub fn verify(&self, id: &str, owner: &str) -> bool {
        let Some((nonce, tag)) = id.split_once('.') else {
            return false;
        };
        if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        match URL_SAFE_NO_PAD.decode(tag) {
            Ok(tag) if tag.len() == TAG_BYTES => {
                self.mac(nonce, owner).verify_truncated_left(&tag).is_ok()
            }
            _ => false,
        }
    }
}

/// Ids of sessions closed with `DELETE`, remembered so that a closed
/// session stays closed: on the replica that closed it, and with shared
/// state (`state.redis`) on every replica.
#[derive(Debug, Clone)]
pub struct Closed {
    local: moka::sync::Cache<String, ()>,
    shared: Option<Arc<Redis>>,
}

/// The kind of mark a closed session id is in the shared state.
const CLOSED_MARK: &str = "mcp_closed_session";

impl Closed {
    pub fn new(shared: Option<Arc<Redis>>) -> Closed {
        Closed {
            local: moka::sync::Cache::builder()
                .max_capacity(CLOSED_REMEMBERED)
                .time_to_live(CLOSED_FOR)
                .build(),
            shared,
        }
    }

    async fn close(&self, id: &str) {
        self.local.insert(id.to_owned(), ());
        if let Some(redis) = &self.shared
            && redis.mark(CLOSED_MARK, id, CLOSED_FOR).await.is_err()
        {
            toolgate_engine::support::shared::fell_back("mcp_session", "local");
        }
    }

    async fn is_closed(&self, id: &str) -> bool {
        if self.local.contains_key(id) {
            return true;
        }
        let Some(redis) = &self.shared else {
            return false;
        };
        match redis.marked(CLOSED_MARK, id).await {
            Ok(closed) => closed,
            Err(_) => {
                toolgate_engine::support::shared::fell_back("mcp_session", "local");
                false
            }
        }
    }
}

/// How many closed ids are remembered, and for how long.
const CLOSED_REMEMBERED: u64 = 100_000;
const CLOSED_FOR: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The "store" rmcp consults for a session id it does not hold: a valid
/// signature is the whole record, unless the session was closed here. The
/// `initialize` it replays names 2025-11-25; the handler takes the version
/// the client sends in `MCP-Protocol-Version` instead (see
/// `handler::ToolSetServer`).
#[derive(Debug, Clone)]
pub struct SignedStore {
    pub signer: Signer,
    pub closed: Closed,
}

#[async_trait::async_trait]
impl SessionStore for SignedStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        if !self.signer.verify(session_id, &owner()) || self.closed.is_closed(session_id).await {
            return Ok(None);
        }
        let params = InitializeRequestParams::new(
            ClientCapabilities::default(),
            Implementation::new("restored-session", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25);
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, _: &str, _: &SessionState) -> Result<(), SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, _: &str) -> Result<(), SessionStoreError> {
        Ok(())
    }
}

/// rmcp's in-memory session manager, issuing signed ids.
#[derive(Debug)]
pub struct SignedSessions {
    inner: LocalSessionManager,
    signer: Signer,
    closed: Closed,
    /// Sessions held at once, at most.
    max: usize,
}

/// A session could not be created.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    #[error("a session id was issued twice")]
    Collision,
    #[error("the gateway holds as many MCP sessions as mcp.max_sessions allows")]
    Full,
}

impl SignedSessions {
    pub fn new(signer: Signer, closed: Closed, max: usize) -> SignedSessions {
        SignedSessions {
            inner: LocalSessionManager::default(),
            signer,
            closed,
            max,
        }
    }

    /// `true` when `id` is a session id this gateway issued to `owner`,
    /// not closed since (here, or with shared state on any replica).
    pub async fn is_open(&self, id: &str, owner: &str) -> bool {
        self.signer.verify(id, owner) && !self.closed.is_closed(id).await
    }

    /// Sessions held by this process.
    pub async fn count(&self) -> usize {
        self.inner.sessions.read().await.len()
    }
}

impl SessionManager for SignedSessions {
    type Error = SessionError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        if self.count().await >= self.max {
            return Err(SessionError::Full);
        }
        let id: SessionId = self.signer.issue(&owner()).into();
        match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => Ok((id, transport)),
            _ => Err(SessionError::Collision),
        }
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        // Only ids this gateway issued are remembered (the endpoint refuses
        // others before this).
        if self.signer.verify(id, &owner()) {
            self.closed.close(id).await;
        }
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl futures::Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>
    {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // Reached only for ids the store (the signature) vouched for.
        if self.count().await >= self.max {
            return Err(SessionError::Full);
        }
        Ok(self.inner.restore_session(id).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_signed_under_the_secret_verify() {
        let a = Signer::new(None);
        let b = Signer::new(None);
        let id = a.issue("alice");
        assert!(a.verify(&id, "alice"));
        assert!(!a.verify(&id, "bob"), "another key's id");
        assert!(!a.verify(&id, ""), "another key's id");
        assert!(!b.verify(&id, "alice"), "another secret");
        let (nonce, tag) = id.split_once('.').unwrap();
        let mut forged = tag.to_owned();
        forged.replace_range(0..1, if tag.starts_with('A') { "B" } else { "A" });
        assert!(!a.verify(&format!("{nonce}.{forged}"), "alice"));
        for junk in [
            "",
            ".",
            "abc",
            "x.y",
            &format!("{nonce}."),
            &format!(".{tag}"),
        ] {
            assert!(!a.verify(junk, "alice"), "{junk:?}");
        }
    }

    #[test]
    fn replicas_sharing_a_secret_accept_each_others_ids() {
        let secret =
            toolgate_engine::catalog::Secret::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let a = Signer::new(Some(&secret));
        let b = Signer::new(Some(&secret));
        assert!(b.verify(&a.issue("alice"), "alice"));
    }
}
