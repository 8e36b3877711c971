//! Users acting as themselves upstream (`connections`, and `credentials` on
//! a tool file): the bearer token an HTTP tool sends for the calling user.
//!
//! - **Per user** (`credentials: {per_user: NAME}`): each user connects
//!   their account once, by OAuth 2.1 authorization code with PKCE against
//!   the upstream's authorization server: a tool called by a user who has
//!   not fails with [`ToolError::NotConnected`] and a connect link
//!   ([`Connections::link`], sealed, valid `link_ttl`); the link leads to
//!   [`Connections::authorize_url`], the server redirects back to
//!   `/connect/callback` ([`Connections::finish`]), and the token is kept,
//!   sealed for that user and connection ([`seal`], [`store`]). It is
//!   refreshed when it is about to expire or the upstream refuses it; a
//!   token the upstream still refuses (or that cannot be refreshed) is
//!   dropped and the user asked to connect again. A user or an admin
//!   disconnects ([`Connections::disconnect`], which also revokes the
//!   token at the server when it offers revocation).
//! - **Token exchange** (`credentials: {token_exchange: NAME}`, RFC 8693):
//!   the caller's bearer token (a JWT `auth.jwt` accepted) is traded at
//!   the authorization server for one the upstream accepts; answers are
//!   kept in memory until shortly before they expire.
//! - **Forward** (`credentials: forward`): the caller's own bearer token,
//!   as is.
//!
//! Nothing of one user reaches another: a token is sealed with the user's
//! subject as associated data (a record moved to another user's entry does
//! not open), exchanged tokens are kept by the digest of the token they
//! were exchanged for, and the executor caches the results of such tools
//! per caller.

pub mod seal;
pub mod store;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::support::secrets::Secret;
pub use seal::Seal;
pub use store::{Store, StoreError};
use toolgate::{CallContext, ToolError};
pub use toolgate_config::format::CredentialsDecl;

/// How long before its expiry a stored token is refreshed, and an
/// exchanged one asked for again.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// How often a call waiting for another replica's renewal of a token looks
/// at the store again.
const RENEWAL_POLL: Duration = Duration::from_millis(50);

/// Whether `record`'s token is not about to expire.
fn fresh(record: &Record) -> bool {
    record
        .expires_at
        .is_none_or(|at| at > now() + EXPIRY_MARGIN.as_secs())
}

/// Whether `record`'s token is another than `stale` and not about to
/// expire: renewed by someone else.
fn renewed(record: &Record, stale: &str) -> bool {
    record.access_token != stale && fresh(record)
}

/// The longest wait for an authorization server.
const SERVER_TIMEOUT: Duration = Duration::from_secs(15);

/// The largest answer read from an authorization server.
const MAX_SERVER_ANSWER: usize = 64 * 1024;

/// Exchanged tokens kept at most (each is dropped when it expires).
const MAX_EXCHANGED: u64 = 10_000;

/// RFC 8693's names.
const TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// An upstream account users connect (`connections.oauth.NAME`).
#[derive(Debug)]
pub struct OAuthConnection {
    pub issuer: String,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub scopes: Vec<String>,
    pub resource: Option<String>,
}

/// A token exchange (`connections.exchange.NAME`).
#[derive(Debug)]
pub struct Exchange {
    pub issuer: Option<String>,
    pub token_endpoint: Option<String>,
    pub client_id: String,
    pub client_secret: Option<Secret>,
    pub audience: Option<String>,
    pub resource: Option<String>,
    pub scopes: Vec<String>,
}

/// `connections`, ready to use.
pub struct Connections {
    /// Where browsers reach the gateway, without a trailing `/`.
    public_url: String,
    link_ttl: Duration,
    seal: Seal,
    /// The embedded store's folder.
    store_dir: PathBuf,
    oauth: IndexMap<String, OAuthConnection>,
    exchange: IndexMap<String, Exchange>,
    http: reqwest::Client,
    /// Authorization servers' metadata, by issuer.
    metadata: moka::sync::Cache<String, Arc<Metadata>>,
    /// Exchanged tokens, by exchange and digest of the caller's token.
    exchanged: moka::sync::Cache<String, Arc<(String, Instant)>>,
    /// One refresh at a time per connection and user.
    refreshing: moka::sync::Cache<String, Arc<tokio::sync::Mutex<()>>>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("public_url", &self.public_url)
            .field("oauth", &self.oauth.keys().collect::<Vec<_>>())
            .field("exchange", &self.exchange.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What the gateway reads of an authorization server's metadata.
#[derive(Debug, Default, Deserialize)]
struct Metadata {
    authorization_endpoint: Option<String>,
    token_endpoint: Option<String>,
    revocation_endpoint: Option<String>,
}

/// A user's token at one connection, as kept (sealed).
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    access_token: String,
    #[serde(default)]
    refresh_token: Option<String>,
    /// Seconds since the epoch.
    #[serde(default)]
    expires_at: Option<u64>,
    connected_at: u64,
}

/// An authorization server's token answer.
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
}

/// What a connect link carries: the connection, the user, its expiry.
#[derive(Serialize, Deserialize)]
struct Ticket {
    c: String,
    s: String,
    e: u64,
}

/// What the OAuth `state` carries: the ticket's, and the PKCE verifier.
#[derive(Serialize, Deserialize)]
struct State {
    c: String,
    s: String,
    e: u64,
    v: String,
}

/// Why connecting failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("this gateway has no connection `{0}`")]
    Unknown(String),
    #[error("the link is not valid ({0}); ask for a new one by calling the tool again")]
    BadLink(String),
    #[error("the link has expired; ask for a new one by calling the tool again")]
    Expired,
    #[error("the authorization server refused: {0}")]
    Refused(String),
    #[error("the authorization server cannot be used: {0}")]
    Server(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn digest(text: &str) -> String {
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The associated data a user's record is sealed with.
fn record_context(connection: &str, subject: &str) -> Vec<u8> {
    format!("token\0{connection}\0{subject}").into_bytes()
}

impl Connections {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        public_url: &str,
        link_ttl: Duration,
        seal: Seal,
        store_dir: PathBuf,
        oauth: IndexMap<String, OAuthConnection>,
        exchange: IndexMap<String, Exchange>,
        http: reqwest::Client,
    ) -> Connections {
        Connections {
            public_url: public_url.trim_end_matches('/').to_owned(),
            link_ttl,
            seal,
            store_dir,
            oauth,
            exchange,
            http,
            metadata: moka::sync::Cache::builder()
                .max_capacity(64)
                .time_to_live(Duration::from_secs(3600))
                .build(),
            exchanged: moka::sync::Cache::builder()
                .max_capacity(MAX_EXCHANGED)
                .time_to_live(Duration::from_secs(3600))
                .build(),
            refreshing: moka::sync::Cache::builder()
                .max_capacity(MAX_EXCHANGED)
                .time_to_idle(Duration::from_secs(300))
                .build(),
        }
    }

    /// Connections for a configuration whose only `credentials` are
    /// `forward` (no `connections` declared): nothing is sealed or stored,
    /// so the key is a random one of this process.
    pub fn forward_only(http: reqwest::Client) -> Connections {
        let mut key = [0u8; 32];
        // Without randomness the key stays zero: it seals nothing anyway.
        let _ = aws_lc_rs::rand::fill(&mut key);
        let seal = match Seal::new(&key, None) {
            Ok(seal) => seal,
            Err(e) => unreachable!("a 32-byte key is always valid: {e}"),
        };
        Connections::new(
            "http://127.0.0.1",
            Duration::from_secs(600),
            seal,
            PathBuf::new(),
            IndexMap::new(),
            IndexMap::new(),
            http,
        )
    }

    /// The store tokens are kept in: Redis when the gateway shares state
    /// in one, else the embedded store.
    pub fn store(&self, redis: Option<&Arc<crate::support::shared::Redis>>) -> Store {
        match redis {
            Some(r) => Store::Redis(Arc::clone(r)),
            None => Store::Files(self.store_dir.clone()),
        }
    }

    /// The names of the accounts users connect.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.oauth.keys().map(String::as_str)
    }

    /// The redirect URI registered at the authorization servers.
    pub fn redirect_uri(&self) -> String {
        format!("{}/connect/callback", self.public_url)
    }

    /// A link that lets `subject` connect their `connection` account,
    /// valid for `link_ttl`.
    pub fn link(&self, connection: &str, subject: &str) -> String {
        let ticket = Ticket {
            c: connection.to_owned(),
            s: subject.to_owned(),
            e: now() + self.link_ttl.as_secs(),
        };
        let sealed = self
            .seal
            .seal_text(b"link", &serde_json::to_vec(&ticket).unwrap_or_default());
        format!("{}/connect/{connection}?ticket={sealed}", self.public_url)
    }

    fn connection(&self, name: &str) -> Result<&OAuthConnection, ConnectError> {
        self.oauth
            .get(name)
            .ok_or_else(|| ConnectError::Unknown(name.to_owned()))
    }

    /// Where a connect link leads: the authorization server's page, with
    /// PKCE, the `resource` and a sealed `state`.
    pub async fn authorize_url(
        &self,
        connection: &str,
        ticket: &str,
    ) -> Result<String, ConnectError> {
        let conn = self.connection(connection)?;
        let ticket: Ticket = self
            .seal
            .open_text(b"link", ticket)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .ok_or_else(|| ConnectError::BadLink("it was not made by this gateway".into()))?;
        if ticket.c != connection {
            return Err(ConnectError::BadLink(format!(
                "it is for the connection `{}`",
                ticket.c
            )));
        }
        if ticket.e < now() {
            return Err(ConnectError::Expired);
        }
        let endpoint = match &conn.authorization_endpoint {
            Some(e) => e.clone(),
            None => self
                .metadata(&conn.issuer)
                .await?
                .authorization_endpoint
                .clone()
                .ok_or_else(|| {
                    ConnectError::Server("its metadata names no authorization_endpoint".into())
                })?,
        };
        let (challenge, verifier) = oauth2::PkceCodeChallenge::new_random_sha256();
        let state = State {
            c: ticket.c,
            s: ticket.s,
            e: now() + self.link_ttl.as_secs(),
            v: verifier.secret().clone(),
        };
        let state = self
            .seal
            .seal_text(b"state", &serde_json::to_vec(&state).unwrap_or_default());
        let mut url = url::Url::parse(&endpoint)
            .map_err(|e| ConnectError::Server(format!("authorization_endpoint: {e}")))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("response_type", "code")
                .append_pair("client_id", &conn.client_id)
                .append_pair("redirect_uri", &self.redirect_uri())
                .append_pair("state", &state)
                .append_pair("code_challenge", challenge.as_str())
                .append_pair("code_challenge_method", "S256");
            if !conn.scopes.is_empty() {
                q.append_pair("scope", &conn.scopes.join(" "));
            }
            if let Some(resource) = &conn.resource {
                q.append_pair("resource", resource);
            }
        }
        Ok(url.into())
    }

    /// The end of connecting: the authorization server's redirect with a
    /// `code` and the `state`; the token is kept for the user. Returns the
    /// connection and the user.
    pub async fn finish(
        &self,
        store: &Store,
        code: &str,
        state: &str,
    ) -> Result<(String, String), ConnectError> {
        let state: State = self
            .seal
            .open_text(b"state", state)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .ok_or_else(|| {
                ConnectError::BadLink("its state was not made by this gateway".into())
            })?;
        if state.e < now() {
            return Err(ConnectError::Expired);
        }
        let conn = self.connection(&state.c)?;
        let redirect_uri = self.redirect_uri();
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", redirect_uri.as_str()),
            ("code_verifier", state.v.as_str()),
        ];
        if let Some(resource) = &conn.resource {
            form.push(("resource", resource));
        }
        let endpoint = self.token_endpoint(conn).await?;
        let answer = self
            .token_request(
                &endpoint,
                &conn.client_id,
                conn.client_secret.as_ref(),
                &form,
            )
            .await?;
        let record = Record {
            access_token: answer.access_token,
            refresh_token: answer.refresh_token,
            expires_at: answer.expires_in.map(|s| now() + s),
            connected_at: now(),
        };
        self.keep(store, &state.c, &state.s, &record).await?;
        tracing::info!(connection = %state.c, subject = %state.s, "a user connected their account");
        Ok((state.c, state.s))
    }

    /// Forgets `subject`'s token at `connection` (revoking it at the
    /// authorization server when that offers revocation); `true` when there
    /// was one.
    pub async fn disconnect(
        &self,
        store: &Store,
        connection: &str,
        subject: &str,
    ) -> Result<bool, ConnectError> {
        let conn = self.connection(connection)?;
        let record = self.load(store, connection, subject).await?;
        let had = store.delete(connection, subject).await?;
        if let Some(record) = record
            && let Ok(meta) = self.metadata(&conn.issuer).await
            && let Some(endpoint) = &meta.revocation_endpoint
        {
            let token = record
                .refresh_token
                .as_deref()
                .unwrap_or(&record.access_token);
            let form = [("token", token)];
            if let Err(e) = self
                .post(
                    endpoint,
                    &conn.client_id,
                    conn.client_secret.as_ref(),
                    &form,
                )
                .await
            {
                tracing::warn!(connection, "revoking a token failed: {e}");
            }
        }
        if had {
            tracing::info!(connection, subject, "a user's account was disconnected");
        }
        Ok(had)
    }

    /// Whether `subject` has a token at each connection, and until when.
    pub async fn status(
        &self,
        store: &Store,
        subject: &str,
    ) -> Result<Vec<(String, Option<Option<u64>>)>, ConnectError> {
        let mut out = Vec::with_capacity(self.oauth.len());
        for name in self.oauth.keys() {
            let record = self.load(store, name, subject).await?;
            out.push((name.clone(), record.map(|r| r.expires_at)));
        }
        Ok(out)
    }

    /// The bearer token a tool with `credentials: how` sends for the caller
    /// of `ctx`.
    pub async fn bearer(
        &self,
        store: &Store,
        how: &CredentialsDecl,
        ctx: &CallContext,
    ) -> Result<String, ToolError> {
        match how {
            CredentialsDecl::Forward => Ok(caller_token(ctx)?.to_owned()),
            CredentialsDecl::TokenExchange(name) => self.exchanged(name, ctx, None).await,
            CredentialsDecl::PerUser(name) => {
                let subject = caller_subject(ctx)?;
                let Some(record) = self.load(store, name, subject).await.map_err(store_error)?
                else {
                    return Err(self.not_connected(name, subject, "you have not connected"));
                };
                if fresh(&record) {
                    return Ok(record.access_token);
                }
                self.refresh(store, name, subject, &record.access_token)
                    .await
            }
        }
    }

    /// Whether a call of a tool with `credentials: how` may go on for the
    /// caller of `ctx`: a stored token for `per_user` (so a result cached
    /// for a user who disconnected since is not served), a bearer token
    /// for the others. Checked before the result cache is.
    pub async fn ready(
        &self,
        store: &Store,
        how: &CredentialsDecl,
        ctx: &CallContext,
    ) -> Result<(), ToolError> {
        match how {
            CredentialsDecl::Forward | CredentialsDecl::TokenExchange(_) => {
                caller_token(ctx).map(|_| ())
            }
            CredentialsDecl::PerUser(name) => {
                let subject = caller_subject(ctx)?;
                match store.get(name, subject).await.map_err(store_error)? {
                    Some(_) => Ok(()),
                    None => Err(self.not_connected(name, subject, "you have not connected")),
                }
            }
        }
    }

    /// Runs `attempt` with the caller's token for `how`. When it reports
    /// the token refused (its second value), runs it once more with a
    /// renewed one (refreshed, or exchanged again); refused again, the
    /// user's token is dropped and they are asked to connect again. The one
    /// rule for HTTP tools and MCP servers acting as the caller.
    pub async fn with_token<T, E, F, Fut>(
        &self,
        store: &Store,
        how: &CredentialsDecl,
        ctx: &CallContext,
        mut attempt: F,
    ) -> Result<T, E>
    where
        E: From<ToolError>,
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = (Result<T, E>, bool)>,
    {
        let token = self.bearer(store, how, ctx).await?;
        let (first, refused) = attempt(token.clone()).await;
        if !refused {
            return first;
        }
        let Some(again) = self.refused(store, how, ctx, &token).await? else {
            return first;
        };
        match attempt(again).await {
            (_, true) => Err(self.drop_refused(store, how, ctx).await.into()),
            (second, false) => second,
        }
    }

    /// The upstream refused the token [`bearer`](Self::bearer) gave: a new
    /// one to try once more (refreshed, or exchanged again), or an error
    /// (for a stored token that cannot be refreshed: dropped, and the user
    /// asked to connect again).
    async fn refused(
        &self,
        store: &Store,
        how: &CredentialsDecl,
        ctx: &CallContext,
        refused: &str,
    ) -> Result<Option<String>, ToolError> {
        match how {
            CredentialsDecl::Forward => Ok(None),
            CredentialsDecl::TokenExchange(name) => {
                self.exchanged(name, ctx, Some(refused)).await.map(Some)
            }
            CredentialsDecl::PerUser(name) => {
                let subject = caller_subject(ctx)?;
                self.refresh(store, name, subject, refused).await.map(Some)
            }
        }
    }

    /// The upstream refused even a fresh token: the user's token is
    /// dropped, and they are asked to connect again.
    async fn drop_refused(
        &self,
        store: &Store,
        how: &CredentialsDecl,
        ctx: &CallContext,
    ) -> ToolError {
        match how {
            CredentialsDecl::PerUser(name) => match caller_subject(ctx) {
                Ok(subject) => {
                    if let Err(e) = store.delete(name, subject).await {
                        return store_error(e);
                    }
                    tracing::info!(connection = %name, subject, "dropped a token the upstream refused");
                    self.not_connected(name, subject, "the upstream refused your token")
                }
                Err(e) => e,
            },
            _ => ToolError::Backend("the upstream refused the caller's token (HTTP 401)".into()),
        }
    }

    fn not_connected(&self, connection: &str, subject: &str, why: &str) -> ToolError {
        ToolError::NotConnected(format!(
            "this tool acts as you at `{connection}`, and {why}: open {} to connect your account (the link is valid for {} minutes), then call the tool again",
            self.link(connection, subject),
            self.link_ttl.as_secs().div_ceil(60)
        ))
    }

    /// A new token for `subject` at `connection` from its refresh token,
    /// unless another call refreshed it already (its token is no longer
    /// `stale`). One renewal at a time per user and connection: within the
    /// process (a lock), and across replicas sharing Redis (a lock there,
    /// while the others wait for the token it renews). An authorization
    /// server that rotates refresh tokens revokes the whole grant when a
    /// spent one comes back: two renewals would disconnect the user.
    /// Without a refresh token, or when the server refuses it, the token is
    /// dropped.
    async fn refresh(
        &self,
        store: &Store,
        connection: &str,
        subject: &str,
        stale: &str,
    ) -> Result<String, ToolError> {
        let lock = self
            .refreshing
            .get_with(format!("{connection}\0{subject}"), || {
                Arc::new(tokio::sync::Mutex::new(()))
            });
        let _held = lock.lock().await;
        let began = Instant::now();
        loop {
            let record = self.current(store, connection, subject).await?;
            if renewed(&record, stale) {
                return Ok(record.access_token);
            }
            if let Some(token) = store.lock(connection, subject).await.map_err(store_error)? {
                // Read again under the lock: a replica may have renewed
                // it between the read above and the lock.
                let renewal = match self.current(store, connection, subject).await {
                    Ok(record) if renewed(&record, stale) => Ok(record.access_token),
                    Ok(record) => self.renew(store, connection, subject, record).await,
                    Err(e) => Err(e),
                };
                store.unlock(connection, subject, &token).await;
                return renewal;
            }
            if began.elapsed() > store::RENEWAL_LOCK {
                return Err(ToolError::Backend(format!(
                    "another replica has been renewing your token at `{connection}` for too long; try again"
                )));
            }
            tokio::time::sleep(RENEWAL_POLL).await;
        }
    }

    /// The stored record of `subject` at `connection`; not connected
    /// without one.
    async fn current(
        &self,
        store: &Store,
        connection: &str,
        subject: &str,
    ) -> Result<Record, ToolError> {
        match self
            .load(store, connection, subject)
            .await
            .map_err(store_error)?
        {
            Some(record) => Ok(record),
            None => Err(self.not_connected(connection, subject, "you have not connected")),
        }
    }

    /// Renews `record` with its refresh token (the caller holds the
    /// renewal locks).
    async fn renew(
        &self,
        store: &Store,
        connection: &str,
        subject: &str,
        record: Record,
    ) -> Result<String, ToolError> {
        let Some(refresh_token) = record.refresh_token.clone() else {
            store
                .delete(connection, subject)
                .await
                .map_err(store_error)?;
            return Err(self.not_connected(
                connection,
                subject,
                "your token has expired or was refused, and cannot be renewed",
            ));
        };
        let conn = self
            .connection(connection)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token.as_str()),
        ];
        if let Some(resource) = &conn.resource {
            form.push(("resource", resource));
        }
        let answer = match self.token_endpoint(conn).await {
            Ok(endpoint) => {
                self.token_request(
                    &endpoint,
                    &conn.client_id,
                    conn.client_secret.as_ref(),
                    &form,
                )
                .await
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok(answer) => {
                let record = Record {
                    access_token: answer.access_token,
                    refresh_token: answer.refresh_token.or(Some(refresh_token)),
                    expires_at: answer.expires_in.map(|s| now() + s),
                    connected_at: record.connected_at,
                };
                self.keep(store, connection, subject, &record)
                    .await
                    .map_err(|e| ToolError::Failed(e.to_string()))?;
                tracing::info!(connection, subject, "refreshed a user's token");
                Ok(record.access_token)
            }
            Err(ConnectError::Refused(why)) => {
                store
                    .delete(connection, subject)
                    .await
                    .map_err(store_error)?;
                tracing::info!(
                    connection,
                    subject,
                    "a refresh was refused ({why}); the token is dropped"
                );
                Err(self.not_connected(
                    connection,
                    subject,
                    "your token has expired and could not be renewed",
                ))
            }
            Err(e) => Err(ToolError::Backend(e.to_string())),
        }
    }

    /// A token for the caller from the exchange `name`: the one kept
    /// (unless it is the one the upstream `refused`), or a new one.
    async fn exchanged(
        &self,
        name: &str,
        ctx: &CallContext,
        refused: Option<&str>,
    ) -> Result<String, ToolError> {
        let exchange = self.exchange.get(name).ok_or_else(|| {
            ToolError::Failed(format!("this gateway has no token exchange `{name}`"))
        })?;
        let token = caller_token(ctx)?;
        let key = format!("{name}\0{}", digest(token));
        // One exchange at a time per caller's token: the calls that wait
        // take the token it brings.
        let lock = self.refreshing.get_with(format!("exchange\0{key}"), || {
            Arc::new(tokio::sync::Mutex::new(()))
        });
        let _held = lock.lock().await;
        if let Some(kept) = self.exchanged.get(&key)
            && kept.1 > Instant::now()
            && refused != Some(kept.0.as_str())
        {
            return Ok(kept.0.clone());
        }
        let endpoint = match (&exchange.token_endpoint, &exchange.issuer) {
            (Some(e), _) => e.clone(),
            (None, Some(issuer)) => self
                .metadata(issuer)
                .await
                .map_err(|e| ToolError::Backend(e.to_string()))?
                .token_endpoint
                .clone()
                .ok_or_else(|| {
                    ToolError::Backend(
                        "the authorization server's metadata names no token_endpoint".into(),
                    )
                })?,
            (None, None) => {
                return Err(ToolError::Failed(format!(
                    "token exchange `{name}` names no issuer or token_endpoint"
                )));
            }
        };
        let scope = exchange.scopes.join(" ");
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE),
            ("subject_token", token),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ];
        if let Some(audience) = &exchange.audience {
            form.push(("audience", audience));
        }
        if let Some(resource) = &exchange.resource {
            form.push(("resource", resource));
        }
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let answer = self
            .token_request(
                &endpoint,
                &exchange.client_id,
                exchange.client_secret.as_ref(),
                &form,
            )
            .await
            .map_err(|e| match e {
                ConnectError::Refused(why) => ToolError::Refused(format!(
                    "the token exchange `{name}` refused the caller's token: {why}"
                )),
                e => ToolError::Backend(format!("token exchange `{name}`: {e}")),
            })?;
        let lifetime =
            Duration::from_secs(answer.expires_in.unwrap_or(300)).saturating_sub(EXPIRY_MARGIN);
        if !lifetime.is_zero() {
            self.exchanged.insert(
                key,
                Arc::new((answer.access_token.clone(), Instant::now() + lifetime)),
            );
        }
        Ok(answer.access_token)
    }

    async fn load(
        &self,
        store: &Store,
        connection: &str,
        subject: &str,
    ) -> Result<Option<Record>, StoreError> {
        let Some(sealed) = store.get(connection, subject).await? else {
            return Ok(None);
        };
        match self
            .seal
            .open(&record_context(connection, subject), &sealed)
        {
            Ok((plain, old_key)) => {
                let Ok(record) = serde_json::from_slice::<Record>(&plain) else {
                    tracing::warn!(connection, "a stored token is unreadable; it is ignored");
                    return Ok(None);
                };
                if old_key {
                    // Rotation: sealed again under the current key.
                    let again = self.seal.seal(&record_context(connection, subject), &plain);
                    store.put(connection, subject, again).await?;
                }
                Ok(Some(record))
            }
            Err(e) => {
                tracing::warn!(
                    connection,
                    "a stored token cannot be opened ({e}); it is ignored"
                );
                Ok(None)
            }
        }
    }

    async fn keep(
        &self,
        store: &Store,
        connection: &str,
        subject: &str,
        record: &Record,
    ) -> Result<(), StoreError> {
        let plain = serde_json::to_vec(record).unwrap_or_default();
        let sealed = self.seal.seal(&record_context(connection, subject), &plain);
        store.put(connection, subject, sealed).await
    }

    async fn token_endpoint(&self, conn: &OAuthConnection) -> Result<String, ConnectError> {
        match &conn.token_endpoint {
            Some(e) => Ok(e.clone()),
            None => self
                .metadata(&conn.issuer)
                .await?
                .token_endpoint
                .clone()
                .ok_or_else(|| ConnectError::Server("its metadata names no token_endpoint".into())),
        }
    }

    /// The metadata of the authorization server `issuer` (RFC 8414's
    /// well-known path, else OpenID Connect's).
    async fn metadata(&self, issuer: &str) -> Result<Arc<Metadata>, ConnectError> {
        if let Some(m) = self.metadata.get(issuer) {
            return Ok(m);
        }
        let base = issuer.trim_end_matches('/');
        let mut last = String::new();
        for url in [
            well_known(issuer, "oauth-authorization-server"),
            format!("{base}/.well-known/openid-configuration"),
        ] {
            match self.get_json::<Metadata>(&url).await {
                Ok(m) => {
                    let m = Arc::new(m);
                    self.metadata.insert(issuer.to_owned(), Arc::clone(&m));
                    return Ok(m);
                }
                Err(e) => last = e,
            }
        }
        Err(ConnectError::Server(format!(
            "its metadata could not be read from {issuer}: {last}"
        )))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .http
            .get(url)
            .timeout(SERVER_TIMEOUT)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let body = read_capped(response).await?;
        serde_json::from_slice(&body).map_err(|e| format!("not JSON metadata: {e}"))
    }

    /// A token request: the answer, or why it was refused.
    async fn token_request(
        &self,
        endpoint: &str,
        client_id: &str,
        secret: Option<&Secret>,
        form: &[(&str, &str)],
    ) -> Result<TokenAnswer, ConnectError> {
        let body = self.post(endpoint, client_id, secret, form).await?;
        serde_json::from_slice(&body)
            .map_err(|e| ConnectError::Server(format!("its token answer is not valid: {e}")))
    }

    /// A form POST to an authorization server, the client authenticated
    /// with HTTP Basic when it has a secret (else named by `client_id`).
    async fn post(
        &self,
        endpoint: &str,
        client_id: &str,
        secret: Option<&Secret>,
        form: &[(&str, &str)],
    ) -> Result<Vec<u8>, ConnectError> {
        let mut fields: Vec<(&str, &str)> = form.to_vec();
        let mut request = self.http.post(endpoint).timeout(SERVER_TIMEOUT);
        match secret {
            Some(secret) => {
                let secret = std::str::from_utf8(secret.bytes()).unwrap_or_default();
                request = request.basic_auth(form_encode(client_id), Some(form_encode(secret)));
            }
            None => fields.push(("client_id", client_id)),
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(&fields)
            .finish();
        let response = request
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| ConnectError::Server(e.without_url().to_string()))?;
        let status = response.status();
        let body = read_capped(response).await.map_err(ConnectError::Server)?;
        if status.is_success() {
            return Ok(body);
        }
        // RFC 6749's error answer: its code and description, nothing else.
        #[derive(Deserialize)]
        struct OAuthError {
            error: String,
            #[serde(default)]
            error_description: Option<String>,
        }
        match serde_json::from_slice::<OAuthError>(&body) {
            Ok(e) if status.is_client_error() => {
                Err(ConnectError::Refused(match e.error_description {
                    Some(d) => format!("{} ({})", e.error, toolgate::truncate_chars(&d, 200)),
                    None => e.error,
                }))
            }
            _ => Err(ConnectError::Server(format!("HTTP {status}"))),
        }
    }
}

/// RFC 8414's well-known URL of `issuer`'s metadata (the path after the
/// well-known part).
fn well_known(issuer: &str, name: &str) -> String {
    match url::Url::parse(issuer) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            format!(
                "{}/.well-known/{name}{path}",
                url.origin().ascii_serialization()
            )
        }
        Err(_) => format!("{}/.well-known/{name}", issuer.trim_end_matches('/')),
    }
}

/// RFC 6749 §2.3.1: the client id and secret are form-encoded before HTTP
/// Basic.
fn form_encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

async fn read_capped(response: reqwest::Response) -> Result<Vec<u8>, String> {
    use futures::StreamExt as _;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.without_url().to_string())?;
        if body.len() + chunk.len() > MAX_SERVER_ANSWER {
            return Err("the answer is larger than 64 KiB".into());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn caller_subject(ctx: &CallContext) -> Result<&str, ToolError> {
    ctx.subject.as_deref().ok_or_else(|| {
        ToolError::NotConnected(
            "this tool acts as the calling user, and the request says of no user (the gateway needs `auth.keys` or `auth.jwt`)".into(),
        )
    })
}

fn caller_token(ctx: &CallContext) -> Result<&str, ToolError> {
    ctx.token.as_ref().map(|t| t.expose()).ok_or_else(|| {
        ToolError::NotConnected(
            "this tool sends the caller's own token upstream, and the request came with an API key, not a token (sign in through the authorization server `auth.jwt` names)".into(),
        )
    })
}

fn store_error(e: StoreError) -> ToolError {
    ToolError::Backend(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_seal(seal: Seal) -> Connections {
        Connections::new(
            "https://gw.example",
            Duration::from_secs(600),
            seal,
            PathBuf::from("/nonexistent"),
            IndexMap::new(),
            IndexMap::new(),
            reqwest::Client::new(),
        )
    }

    #[tokio::test]
    async fn a_rotated_key_reads_old_records_and_seals_them_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::Files(dir.path().to_owned());
        let record = Record {
            access_token: "at-alice".into(),
            refresh_token: Some("rt-alice".into()),
            expires_at: None,
            connected_at: 1,
        };
        let old = with_seal(Seal::new(&[1; 32], None).unwrap());
        old.keep(&store, "github", "alice", &record).await.unwrap();
        // Under another key alone: unreadable, so not connected.
        let other = with_seal(Seal::new(&[2; 32], None).unwrap());
        assert!(
            other
                .load(&store, "github", "alice")
                .await
                .unwrap()
                .is_none()
        );
        // The new key with the old one as previous: read, and sealed again.
        let rotated = with_seal(Seal::new(&[2; 32], Some(&[1; 32])).unwrap());
        let read = rotated
            .load(&store, "github", "alice")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.access_token, "at-alice");
        let again = other
            .load(&store, "github", "alice")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.refresh_token.as_deref(), Some("rt-alice"));
        // A record moved to another user's entry does not open there.
        let sealed = store.get("github", "alice").await.unwrap().unwrap();
        store.put("github", "mallory", sealed).await.unwrap();
        assert!(
            other
                .load(&store, "github", "mallory")
                .await
                .unwrap()
                .is_none()
        );
    }

    fn connections(ttl: Duration) -> Connections {
        let mut oauth = IndexMap::new();
        oauth.insert(
            "github".to_owned(),
            OAuthConnection {
                issuer: "http://127.0.0.1:1".into(),
                authorization_endpoint: Some("http://127.0.0.1:1/authorize?x=1".into()),
                token_endpoint: Some("http://127.0.0.1:1/token".into()),
                client_id: "toolgate".into(),
                client_secret: None,
                scopes: vec!["repo".into()],
                resource: Some("https://api.example".into()),
            },
        );
        Connections::new(
            "https://gw.example/",
            ttl,
            Seal::new(&[3; 32], None).unwrap(),
            PathBuf::from("/nonexistent"),
            oauth,
            IndexMap::new(),
            reqwest::Client::new(),
        )
    }

    fn query(url: &str) -> std::collections::HashMap<String, String> {
        url::Url::parse(url)
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect()
    }

    #[tokio::test]
    async fn a_link_leads_to_the_authorization_server_with_pkce_and_a_sealed_state() {
        let c = connections(Duration::from_secs(600));
        let link = c.link("github", "alice");
        assert!(
            link.starts_with("https://gw.example/connect/github?ticket="),
            "{link}"
        );
        assert!(!link.contains("alice"));
        let ticket = query(&link)["ticket"].clone();
        let to = c.authorize_url("github", &ticket).await.unwrap();
        assert!(to.starts_with("http://127.0.0.1:1/authorize?x=1&"), "{to}");
        let q = query(&to);
        assert_eq!(q["response_type"], "code");
        assert_eq!(q["client_id"], "toolgate");
        assert_eq!(q["redirect_uri"], "https://gw.example/connect/callback");
        assert_eq!(q["code_challenge_method"], "S256");
        assert_eq!(q["scope"], "repo");
        assert_eq!(q["resource"], "https://api.example");
        assert!(!q["state"].contains("alice"));
        // A link for another connection, a forged one: refused.
        assert!(matches!(
            c.authorize_url("gitlab", &ticket).await,
            Err(ConnectError::Unknown(_))
        ));
        assert!(matches!(
            c.authorize_url("github", "Zm9yZ2Vk").await,
            Err(ConnectError::BadLink(_))
        ));
        // A state is not a link, nor a link a state.
        let store = Store::Files(PathBuf::from("/nonexistent"));
        assert!(matches!(
            c.finish(&store, "code", &ticket).await,
            Err(ConnectError::BadLink(_))
        ));
        assert!(matches!(
            c.authorize_url("github", &q["state"]).await,
            Err(ConnectError::BadLink(_))
        ));
    }

    #[tokio::test]
    async fn an_expired_link_is_refused() {
        let c = connections(Duration::ZERO);
        let link = c.link("github", "alice");
        let ticket = query(&link)["ticket"].clone();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(matches!(
            c.authorize_url("github", &ticket).await,
            Err(ConnectError::Expired)
        ));
    }

    #[test]
    fn metadata_is_looked_for_where_rfc_8414_says() {
        assert_eq!(
            well_known("https://as.example/tenant/1", "oauth-authorization-server"),
            "https://as.example/.well-known/oauth-authorization-server/tenant/1"
        );
        assert_eq!(
            well_known("https://as.example/", "oauth-authorization-server"),
            "https://as.example/.well-known/oauth-authorization-server"
        );
    }
}
