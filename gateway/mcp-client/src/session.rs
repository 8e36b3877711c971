//! One MCP server's life: a supervisor task that starts the session (spawn
//! or connect, `initialize`, `tools/list`), keeps it for every call, lists
//! the tools again on `notifications/tools/list_changed`, and restarts the
//! server with exponential backoff when the session ends. The current state
//! is published through an `ArcSwap`, so calls read it without a lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, NotificationContext, QuitReason,
    RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig,
};
use rmcp::{ClientHandler, Peer, RoleClient};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::extras::{self, Extras};
use super::spec::{PASSED_ENV, ServerSpec, StdioSpec, Transport};
use super::{McpTool, Offer, Registry};

/// First delay before a restart; doubled after each failure.
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
/// Longest delay between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A session that lived this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// Longest stderr line forwarded to the logs.
const MAX_STDERR_LINE: usize = 2000;
/// How long a stopping server may take to close.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The bounds on how long a server's tool list is kept before it is listed
/// again when the server gives it a `ttlMs` (2026-07-28) and does not
/// announce list changes: a server cannot make the gateway list every
/// instant, nor keep a list for ever by asking to.
const MIN_LIST_TTL: Duration = Duration::from_secs(5);
const MAX_LIST_TTL: Duration = Duration::from_secs(24 * 3600);
/// The most pages of `tools/list` read (a server that keeps giving cursors
/// fails the listing).
const MAX_LIST_PAGES: usize = 1000;

/// One declared server and its live state.
///
/// A server belongs to the registries (catalogs) that declare it: a reload
/// whose catalog declares it the same way takes it over, session and all.
/// It stops when the last of them is dropped, or on
/// [`McpRegistry::shutdown`](super::McpRegistry::shutdown).
pub(crate) struct Server<T> {
    pub spec: ServerSpec,
    state: ArcSwap<ServerState<T>>,
    /// Bumped after every state change.
    changes: watch::Sender<u64>,
    list_changed: Arc<Notify>,
    /// Routes the server's progress notifications to the call that asked.
    pub progress: crate::progress::Dispatcher,
    /// The calls running on it, with their clients: who a request or log
    /// message the server sends beside a call belongs to.
    pub running: Arc<super::relay::Running>,
    /// Why a call found the connection broken, for the session to end on.
    broken: Mutex<Option<String>>,
    broken_notify: Notify,
    /// Stops the supervisor (and the session).
    pub stop: CancellationToken,
    /// The registries holding this server; each gets its snapshot rebuilt
    /// when the server's state changes.
    owners: Mutex<Vec<Weak<Registry<T>>>>,
    /// Its supervisor has been spawned.
    supervised: AtomicBool,
    /// Each tool's definition as first seen (by the server's name for it):
    /// its fingerprint and the tool made of it (`on_change`).
    pins: Mutex<HashMap<String, Pin<T>>>,
    /// A person accepted a change: the next listing is built again even
    /// when it lists what the last one did.
    rebuild: AtomicBool,
    /// The callers' own sessions (`per_user` servers), by subject.
    users: Mutex<HashMap<String, Arc<UserSlot<T>>>>,
    /// `notifications/resources/updated` of the gateway's own session (a
    /// URI each), for the MCP face's sessions that subscribed to it.
    pub updates: tokio::sync::broadcast::Sender<String>,
    /// The URIs the gateway is subscribed to at the server, with how many
    /// of its clients' sessions want each; subscribed again on every new
    /// session.
    pub(crate) subscribed: Mutex<HashMap<String, usize>>,
}

/// Resource updates kept for a slow face session before it misses some.
const UPDATES_BACKLOG: usize = 64;

/// The most callers' sessions kept open per server; the least recently
/// used is closed to make room.
pub const MAX_USER_SESSIONS: usize = 1000;

/// A caller's session unused this long is closed.
pub const USER_SESSION_IDLE: Duration = Duration::from_secs(600);

/// A caller's own listing is made again after this long (or the list's
/// `ttlMs`, when the server gives a shorter one), at their next request.
pub const USER_LISTING_FRESH: Duration = Duration::from_secs(60);

/// One caller's session at a `per_user` server.
struct UserSlot<T> {
    session: tokio::sync::Mutex<Option<Session>>,
    last_used: Mutex<Instant>,
    /// What the server listed in this caller's session (cleared when a
    /// new session opens), and until when the listing is fresh.
    listed: Mutex<Option<(UserListing<T>, Instant)>>,
}

/// What a per-caller server listed to one caller: their tools, prompts
/// and resources.
pub(crate) struct UserListing<T> {
    pub tools: Arc<Vec<Listed<T>>>,
    pub extras: Arc<Extras>,
}

impl<T> Clone for UserListing<T> {
    fn clone(&self) -> Self {
        UserListing {
            tools: Arc::clone(&self.tools),
            extras: Arc::clone(&self.extras),
        }
    }
}

/// A tool definition the gateway trusts: the first it saw (or the pin
/// file's, or the last change a person accepted).
struct Pin<T> {
    fingerprint: String,
    /// The trusted definition, for showing a change against (`None` when
    /// only a pin file's fingerprint is known).
    definition: Option<Value>,
    tool: Result<Arc<T>, String>,
    /// The definition the server lists now, when it differs.
    changed: Option<Changed>,
    /// A change a person accepted: taken at the next listing if the
    /// server still lists exactly it.
    accept: Option<String>,
}

impl<T> Pin<T> {
    /// `definition` (of fingerprint `fingerprint`) trusted, as `tool`.
    fn trusted(fingerprint: String, definition: Value, tool: Result<Arc<T>, String>) -> Pin<T> {
        Pin {
            fingerprint,
            definition: Some(definition),
            tool,
            changed: None,
            accept: None,
        }
    }
}

/// A changed definition, held.
#[derive(Debug, Clone)]
struct Changed {
    fingerprint: String,
    definition: Value,
    /// When it was first seen (RFC 3339).
    since: String,
}

/// A tool whose server changed its definition after the gateway pinned
/// it, as a person reviewing it sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolChange {
    pub server: String,
    /// The server's name for the tool.
    pub tool: String,
    /// `keep_old`, `disable` (`accept` takes changes, so has none held).
    pub on_change: &'static str,
    pub pinned_fingerprint: String,
    /// The trusted definition (absent when a pin file gave only its
    /// fingerprint).
    pub pinned: Option<Value>,
    pub fingerprint: String,
    pub now: Value,
    pub since: String,
}

impl<T> Server<T> {
    /// The changes held for review.
    pub fn changes(&self) -> Vec<ToolChange> {
        let pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<ToolChange> = pins
            .iter()
            .filter_map(|(tool, pin)| {
                let changed = pin.changed.as_ref()?;
                Some(ToolChange {
                    server: self.spec.name.clone(),
                    tool: tool.clone(),
                    on_change: on_change_label(self.spec.on_change),
                    pinned_fingerprint: pin.fingerprint.clone(),
                    pinned: pin.definition.clone(),
                    fingerprint: changed.fingerprint.clone(),
                    now: changed.definition.clone(),
                    since: changed.since.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.tool.cmp(&b.tool));
        out
    }

    /// The fingerprint of each tool's definition as the server lists it
    /// now, by the server's name for it (what `toolgate pin` writes).
    pub fn listed_fingerprints(&self) -> std::collections::BTreeMap<String, String> {
        let pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        pins.iter()
            .map(|(tool, pin)| {
                let now = pin
                    .changed
                    .as_ref()
                    .map_or(&pin.fingerprint, |c| &c.fingerprint);
                (tool.clone(), now.clone())
            })
            .collect()
    }

    /// Accepts the change of `tool` to the definition `fingerprint`: the
    /// tools are listed again, and that definition (only it) is pinned.
    pub fn accept_change(&self, tool: &str, fingerprint: &str) -> Result<(), String> {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let pin = pins
            .get_mut(tool)
            .filter(|p| p.changed.is_some())
            .ok_or_else(|| {
                format!(
                    "MCP server `{}` has no held change of `{tool}`",
                    self.spec.name
                )
            })?;
        if pin.changed.as_ref().map(|c| c.fingerprint.as_str()) != Some(fingerprint) {
            return Err(format!(
                "the definition of `{tool}` changed again since it was shown; review it again"
            ));
        }
        pin.accept = Some(fingerprint.to_owned());
        drop(pins);
        self.rebuild.store(true, Ordering::SeqCst);
        tracing::info!(mcp_server = %self.spec.name, tool, "a changed tool definition is accepted");
        self.list_changed.notify_one();
        Ok(())
    }
}

fn on_change_label(on_change: toolgate_config::format::OnChange) -> &'static str {
    use toolgate_config::format::OnChange;
    match on_change {
        OnChange::Accept => "accept",
        OnChange::KeepOld => "keep_old",
        OnChange::Disable => "disable",
    }
}

/// Where a server stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Status {
    /// The gateway has not started its servers (yet).
    #[default]
    NotStarted,
    Starting,
    Ready,
    /// It failed to start or its session ended; it is restarted after a
    /// backoff delay.
    Down {
        reason: String,
    },
    /// It refused the gateway's own session, and is called as each
    /// caller (`credentials`): its tools are listed to each caller in
    /// their own session, and to no one else.
    PerCaller {
        reason: String,
    },
    /// It is never started (see [`ServerSpec::disabled`]).
    Disabled {
        reason: String,
    },
    /// The gateway shut it down.
    Stopped,
}

impl Status {
    /// Why its tools cannot be used now.
    pub fn reason(&self, server: &str) -> String {
        match self {
            Status::NotStarted => format!("MCP server `{server}` has not been started"),
            Status::Starting => format!("MCP server `{server}` is starting"),
            Status::Ready => format!("MCP server `{server}` is ready"),
            Status::Down { reason } => {
                format!(
                    "MCP server `{server}` is not running ({reason}); the gateway tries again, with pauses growing to 30 s"
                )
            }
            Status::PerCaller { reason } => format!(
                "MCP server `{server}` lists its tools only to callers who have connected their account ({reason})"
            ),
            Status::Disabled { reason } => format!("MCP server `{server}` is disabled: {reason}"),
            Status::Stopped => format!("MCP server `{server}` has been stopped"),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Status::NotStarted => "not started",
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Down { .. } => "down",
            Status::PerCaller { .. } => "per caller",
            Status::Disabled { .. } => "disabled",
            Status::Stopped => "stopped",
        }
    }
}

/// A server's state, replaced as a whole on every change.
pub(crate) struct ServerState<T> {
    pub status: Status,
    /// The session, while `Ready`.
    pub peer: Option<Peer<RoleClient>>,
    /// The tools of the last listing (kept while the server is down, so
    /// they can be reported unavailable by name).
    pub listed: Arc<Vec<Listed<T>>>,
    /// Its prompts, resources and resource templates, as last listed
    /// (kept while it is down, like its tools; served only while ready).
    pub extras: Arc<Extras>,
    /// Sessions attempted so far.
    pub attempts: u32,
    /// `name version` of the server, from `initialize`.
    pub server_info: Option<String>,
    /// Why the last session failed or ended; cleared when one is ready.
    pub last_error: Option<String>,
}

impl<T> Default for ServerState<T> {
    fn default() -> Self {
        ServerState {
            status: Status::default(),
            peer: None,
            listed: Arc::new(Vec::new()),
            extras: Arc::default(),
            attempts: 0,
            server_info: None,
            last_error: None,
        }
    }
}

impl<T> ServerState<T> {
    /// Why the server's tools cannot be used now.
    pub fn reason(&self, server: &str) -> String {
        match (&self.status, &self.last_error) {
            (Status::Starting, Some(e)) => {
                format!("MCP server `{server}` is restarting (it stopped: {e})")
            }
            (status, _) => status.reason(server),
        }
    }
}

/// One tool of a listing that passed the include/exclude filter.
pub(crate) struct Listed<T> {
    /// The server's name for it.
    pub remote: String,
    /// The gateway's name for it.
    pub name: String,
    /// The usable tool, or why it cannot be used (name too long, schema
    /// unusable).
    pub tool: Result<Arc<T>, String>,
}

impl<T> Server<T> {
    pub fn new(spec: ServerSpec) -> Server<T> {
        let status = match &spec.disabled {
            Some(reason) => Status::Disabled {
                reason: reason.clone(),
            },
            None => Status::NotStarted,
        };
        Server {
            spec,
            state: ArcSwap::from_pointee(ServerState {
                status,
                ..ServerState::default()
            }),
            changes: watch::channel(0).0,
            list_changed: Arc::new(Notify::new()),
            progress: Default::default(),
            running: Arc::default(),
            broken: Mutex::new(None),
            broken_notify: Notify::new(),
            stop: CancellationToken::new(),
            owners: Mutex::new(Vec::new()),
            supervised: AtomicBool::new(false),
            pins: Mutex::new(HashMap::new()),
            rebuild: AtomicBool::new(false),
            users: Mutex::new(HashMap::new()),
            updates: tokio::sync::broadcast::channel(UPDATES_BACKLOG).0,
            subscribed: Mutex::new(HashMap::new()),
        }
    }

    /// The slot of the caller `subject` (made when they have none), marked
    /// used now. Slots idle for [`USER_SESSION_IDLE`] are dropped, and at
    /// most [`MAX_USER_SESSIONS`] are kept (the least recently used goes).
    fn user_slot(&self, subject: &str) -> Arc<UserSlot<T>> {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        users.retain(|_, slot| {
            now.duration_since(*slot.last_used.lock().unwrap_or_else(|p| p.into_inner()))
                < USER_SESSION_IDLE
        });
        if !users.contains_key(subject) && users.len() >= MAX_USER_SESSIONS {
            let oldest = users
                .iter()
                .min_by_key(|(_, slot)| *slot.last_used.lock().unwrap_or_else(|p| p.into_inner()))
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                users.remove(&oldest);
            }
        }
        let slot = users.entry(subject.to_owned()).or_insert_with(|| {
            Arc::new(UserSlot {
                session: tokio::sync::Mutex::new(None),
                last_used: Mutex::new(now),
                listed: Mutex::new(None),
            })
        });
        *slot.last_used.lock().unwrap_or_else(|p| p.into_inner()) = now;
        Arc::clone(slot)
    }

    /// The session of the caller `subject` (a `per_user` server), opened
    /// with `token` when they have none yet (or theirs ended). Sessions
    /// idle for [`USER_SESSION_IDLE`] are closed, and at most
    /// [`MAX_USER_SESSIONS`] are kept.
    ///
    /// `Err((why, refused))`: `refused` when the server refused the token.
    pub async fn user_peer(
        &self,
        subject: &str,
        token: &str,
    ) -> Result<Peer<RoleClient>, (String, bool)> {
        let slot = self.user_slot(subject);
        self.peer_in(&slot, subject, token).await
    }

    async fn peer_in(
        &self,
        slot: &UserSlot<T>,
        subject: &str,
        token: &str,
    ) -> Result<Peer<RoleClient>, (String, bool)> {
        let mut session = slot.session.lock().await;
        if let Some(open) = session.as_ref()
            && !open.is_closed()
        {
            return Ok(open.peer().clone());
        }
        let opened = tokio::time::timeout(self.spec.startup_timeout, connect(self, Some(token)))
            .await
            .map_err(|_| {
                (
                    format!(
                        "MCP server `{}` did not open a session for the caller within {}",
                        self.spec.name,
                        humantime_serde::re::humantime::format_duration(self.spec.startup_timeout)
                    ),
                    false,
                )
            })?
            .map_err(|f| (f.reason, f.needs_token))?;
        let peer = opened.peer().clone();
        *session = Some(opened);
        // A new session: what the last one listed is not this one's.
        *slot.listed.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::debug!(mcp_server = %self.spec.name, subject, "opened a session for a caller");
        Ok(peer)
    }

    /// What the server lists to the caller `subject` (tools, prompts,
    /// resources), in their own session (opened with `token` when
    /// needed): listed again once [`USER_LISTING_FRESH`] (or the tool
    /// list's shorter `ttlMs`) has passed, or when their session was
    /// opened anew. Tools are filtered, renamed and pinned like the
    /// gateway's own listing.
    ///
    /// `Err((why, refused))`: `refused` when the server refused the token.
    pub(crate) async fn user_listing(
        self: &Arc<Self>,
        subject: &str,
        token: &str,
    ) -> Result<UserListing<T>, (String, bool)>
    where
        T: Offer,
    {
        let slot = self.user_slot(subject);
        if let Some((listing, until)) = slot
            .listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            && *until > Instant::now()
        {
            return Ok(listing.clone());
        }
        let peer = self.peer_in(&slot, subject, token).await?;
        let spec = &self.spec;
        let (tools, ttl) = match tokio::time::timeout(spec.startup_timeout, list_tools(&peer)).await
        {
            Ok(Ok(listing)) => listing,
            Ok(Err(e)) => {
                self.forget_user(subject);
                return Err((
                    format!(
                        "MCP server `{}`: `tools/list` for the caller failed: {}",
                        spec.name,
                        super::in_words(&e, spec)
                    ),
                    super::needs_token(&e),
                ));
            }
            Err(_) => {
                return Err((
                    format!(
                        "MCP server `{}` did not list its tools for the caller within {}",
                        spec.name,
                        humantime_serde::re::humantime::format_duration(spec.startup_timeout)
                    ),
                    false,
                ));
            }
        };
        let listing = UserListing {
            tools: Arc::new(build_tools(self, tools)),
            extras: Arc::new(list_extras(&peer, spec).await),
        };
        let fresh = ttl.map_or(USER_LISTING_FRESH, |t| {
            t.clamp(MIN_LIST_TTL, USER_LISTING_FRESH)
        });
        *slot.listed.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((listing.clone(), Instant::now() + fresh));
        tracing::debug!(mcp_server = %spec.name, subject, tools = listing.tools.len(), "listed the tools of a caller");
        Ok(listing)
    }

    /// What the server last listed to the caller `subject`, while their
    /// session is kept (stale or not: a request has it listed again first).
    pub(crate) fn user_listed(&self, subject: &str) -> Option<UserListing<T>> {
        let users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        let slot = users.get(subject)?;
        let listed = slot.listed.lock().unwrap_or_else(|p| p.into_inner());
        listed.as_ref().map(|(l, _)| l.clone())
    }

    /// Closes the session of the caller `subject` (it failed, or their
    /// token was refused): the next call opens a new one.
    pub fn forget_user(&self, subject: &str) {
        self.users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(subject);
    }

    /// A call found the connection broken (the server is unreachable, or
    /// lost the session): the session ends, the server is down with
    /// `reason` until a new session starts.
    pub fn connection_broken(&self, reason: String) {
        *self.broken.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        self.broken_notify.notify_one();
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Registry<T>>>> {
        self.owners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a registry holding this server (once).
    pub fn add_owner(&self, registry: Weak<Registry<T>>) {
        let mut owners = self.owners();
        if !owners.iter().any(|w| w.ptr_eq(&registry)) {
            owners.push(registry);
        }
    }

    /// Forgets registries that are gone; stops the server when none is
    /// left. Called when a registry is dropped.
    pub fn release(&self) {
        let mut owners = self.owners();
        owners.retain(|w| w.strong_count() > 0);
        if owners.is_empty() {
            self.stop.cancel();
        }
    }

    /// Marks the supervisor spawned; `true` the first time.
    pub fn claim_supervision(&self) -> bool {
        !self.supervised.swap(true, Ordering::SeqCst)
    }

    pub fn state(&self) -> arc_swap::Guard<Arc<ServerState<T>>> {
        self.state.load()
    }

    /// The session, if the server is ready.
    pub fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let state = self.state.load();
        match (&state.status, &state.peer) {
            (Status::Ready, Some(peer)) => Ok(peer.clone()),
            _ => Err(state.reason(&self.spec.name)),
        }
    }

    /// Replaces the state. Watchers are told by [`publish`], once the
    /// registry's snapshot reflects the change.
    fn update(&self, f: impl FnOnce(&ServerState<T>) -> ServerState<T>) {
        let old = self.state.load_full();
        self.state.store(Arc::new(f(&old)));
    }

    fn set_status(&self, status: Status) {
        self.update(|old| ServerState {
            last_error: match &status {
                Status::Down { reason } => Some(reason.clone()),
                _ => old.last_error.clone(),
            },
            status,
            peer: None,
            listed: Arc::clone(&old.listed),
            extras: Arc::clone(&old.extras),
            attempts: old.attempts,
            server_info: old.server_info.clone(),
        });
    }

    /// Waits until `done` holds for the server's state.
    pub async fn wait_until(&self, done: impl Fn(&ServerState<T>) -> bool) {
        let mut rx = self.changes.subscribe();
        loop {
            if done(&self.state.load()) {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Receives the server's notifications on the client side.
struct Handler {
    server: String,
    list_changed: Arc<Notify>,
    /// Where resource updates go: the gateway's own session only (a
    /// caller's session's updates are theirs, and not relayed).
    updates: Option<tokio::sync::broadcast::Sender<String>>,
    progress: crate::progress::Dispatcher,
    running: Arc<super::relay::Running>,
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
            let uri = super::extras::app_uri(&self.server, &params.uri).unwrap_or(params.uri);
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

/// Runs a server until it is stopped: sessions one after the other, with
/// backoff.
pub(crate) async fn supervise<T: Offer>(server: Arc<Server<T>>) {
    let stop = server.stop.clone();
    let name = server.spec.name.clone();
    if server.spec.disabled.is_some() {
        return;
    }
    let mut backoff = INITIAL_BACKOFF;
    loop {
        server.update(|old| ServerState {
            status: Status::Starting,
            peer: None,
            listed: Arc::clone(&old.listed),
            extras: Arc::clone(&old.extras),
            attempts: old.attempts + 1,
            server_info: old.server_info.clone(),
            last_error: old.last_error.clone(),
        });
        publish(&server);
        let began = Instant::now();
        let end = run_session(&server, &stop).await;
        // The same failure again is logged at debug level only.
        let repeated = |reason: &str| server.state().last_error.as_deref() == Some(reason);
        let reason = match end {
            SessionEnd::Stopped => break,
            // A server called as each caller may well refuse the gateway
            // itself: its tools are then listed to each caller alone.
            SessionEnd::NeedsToken(reason) if server.spec.per_caller() => {
                tracing::info!(mcp_server = %name, "MCP server `{name}` refused the gateway's own session ({reason}); it lists its tools to each caller who has connected");
                let how = match server.spec.credentials() {
                    Some(toolgate_config::format::CredentialsDecl::PerUser(connection)) => format!(
                        "`POST /v1/connections/{connection}/link` or the console's catalog gives a link to connect; "
                    ),
                    _ => String::new(),
                };
                server.set_status(Status::PerCaller {
                    reason: format!("{how}it refused the gateway's own session: {reason}"),
                });
                publish(&server);
                stop.cancelled().await;
                break;
            }
            SessionEnd::NeedsToken(reason) => {
                tracing::error!(mcp_server = %name, "MCP server `{name}` refused the gateway: {reason}; it is not retried until the configuration changes");
                server.set_status(Status::Down { reason });
                publish(&server);
                stop.cancelled().await;
                break;
            }
            SessionEnd::FailedToStart(reason) if repeated(&reason) => {
                tracing::debug!(mcp_server = %name, "MCP server `{name}` failed to start again: {reason}");
                reason
            }
            SessionEnd::FailedToStart(reason) => {
                tracing::error!(mcp_server = %name, "MCP server `{name}` failed to start: {reason}");
                reason
            }
            SessionEnd::Ended(reason) => {
                tracing::warn!(mcp_server = %name, "MCP server `{name}` stopped: {reason}");
                reason
            }
        };
        if began.elapsed() >= HEALTHY_AFTER {
            backoff = INITIAL_BACKOFF;
        }
        server.set_status(Status::Down { reason });
        publish(&server);
        tracing::debug!(mcp_server = %name, "restarting MCP server `{name}` in {backoff:?}");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    server.set_status(Status::Stopped);
    publish(&server);
}

/// Rebuilds the snapshots of the registries holding `server`, then wakes
/// whoever waits for a change of it (so they see the snapshots up to date).
fn publish<T>(server: &Server<T>) {
    // Upgraded outside the lock: dropping the last reference to a registry
    // runs its `Drop`, which takes the lock.
    let owners: Vec<Weak<Registry<T>>> = server.owners().clone();
    for registry in owners.iter().filter_map(Weak::upgrade) {
        registry.publish();
    }
    server.changes.send_modify(|n| *n += 1);
}

enum SessionEnd {
    Stopped,
    FailedToStart(String),
    /// It refused the gateway's credentials: not retried until the
    /// configuration changes (a reload starts a new server).
    NeedsToken(String),
    Ended(String),
}

type Session = RunningService<RoleClient, Handler>;

/// One session: start it, serve calls until it ends or `stop`.
async fn run_session<T: Offer>(server: &Arc<Server<T>>, stop: &CancellationToken) -> SessionEnd {
    let spec = &server.spec;
    let startup = async {
        let session = connect(server, None).await?;
        let tools = list_tools(session.peer()).await.map_err(|e| StartFailure {
            reason: format!("`tools/list` failed: {}", super::in_words(&e, spec)),
            needs_token: super::needs_token(&e) && !spec.uses_oauth(),
        })?;
        Ok::<_, StartFailure>((session, tools))
    };
    let (session, (tools, ttl)) = tokio::select! {
        r = tokio::time::timeout(spec.startup_timeout, startup) => match r {
            Ok(Ok(started)) => started,
            Ok(Err(StartFailure { reason, needs_token: true })) => return SessionEnd::NeedsToken(reason),
            Ok(Err(StartFailure { reason, .. })) => return SessionEnd::FailedToStart(reason),
            Err(_) => return SessionEnd::FailedToStart(format!(
                "it did not complete `initialize` and `tools/list` within {}",
                humantime_serde::re::humantime::format_duration(spec.startup_timeout)
            )),
        },
        () = stop.cancelled() => return SessionEnd::Stopped,
    };
    let peer = session.peer().clone();
    let info = peer.peer_info().and_then(|i| {
        i.server_info
            .as_ref()
            .map(|s| format!("{} {}", s.name, s.version).trim().to_owned())
    });
    // What the server listed last, to tell a change from a listing made
    // because the list went stale.
    let mut last = tools.clone();
    let listed = build_tools(server, tools);
    report_listing(server, &listed);
    let mut last_extras = list_extras(&peer, spec).await;
    resubscribe(server, &peer).await;
    server.update(|old| ServerState {
        status: Status::Ready,
        peer: Some(peer.clone()),
        listed: Arc::new(listed),
        extras: Arc::new(last_extras.clone()),
        attempts: old.attempts,
        server_info: info.clone(),
        last_error: None,
    });
    publish(server);

    let cancel = session.cancellation_token();
    // A list with a `ttlMs` is listed again when it goes stale, unless the
    // server announces its changes (then they come as notifications).
    let announces = announces_list_changes(&peer);
    let stale_after = |ttl: Option<Duration>| {
        ttl.filter(|_| !announces)
            .map(|t| tokio::time::Instant::now() + t.clamp(MIN_LIST_TTL, MAX_LIST_TTL))
    };
    let mut ttl = ttl;
    let mut stale = stale_after(ttl);
    let mut listening = std::pin::pin!(listen_for_changes(
        peer.clone(),
        Arc::clone(&server.list_changed),
        spec.name.clone(),
    ));
    let mut waiting = std::pin::pin!(session.waiting());
    // A break reported by a call of an earlier session is old news.
    server
        .broken
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    loop {
        tokio::select! {
            () = server.broken_notify.notified() => {
                let Some(reason) = server.broken.lock().unwrap_or_else(|p| p.into_inner()).take() else {
                    continue;
                };
                cancel.cancel();
                let _ = tokio::time::timeout(STOP_GRACE, &mut waiting).await;
                return SessionEnd::Ended(reason);
            }
            quit = &mut waiting => {
                return SessionEnd::Ended(match quit {
                    Ok(QuitReason::Closed) => "the session was closed (the process exited or the connection dropped)".to_owned(),
                    Ok(QuitReason::Cancelled) => "the session was cancelled".to_owned(),
                    Ok(QuitReason::JoinError(e)) | Err(e) => format!("the session task failed: {e}"),
                    Ok(other) => format!("the session ended ({other:?})"),
                });
            }
            never = &mut listening => match never {},
            () = async {
                match stale {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => server.list_changed.notify_one(),
            () = server.list_changed.notified() => {
                // A listing that fails is tried again when the last list's
                // `ttlMs` runs out again.
                stale = stale_after(ttl);
                match tokio::time::timeout(spec.startup_timeout, list_tools(&peer)).await {
                    Ok(Ok((tools, fresh_for))) => {
                        ttl = fresh_for;
                        stale = stale_after(ttl);
                        let extras = list_extras(&peer, spec).await;
                        let extras_changed = extras != last_extras;
                        if extras_changed {
                            tracing::info!(mcp_server = %spec.name, prompts = extras.prompts.len(), resources = extras.resources.len(), templates = extras.templates.len(), "MCP server `{}` changed its prompts or resources", spec.name);
                            last_extras = extras;
                        }
                        let rebuild = server.rebuild.swap(false, Ordering::SeqCst);
                        if tools == last && !rebuild && !extras_changed {
                            tracing::debug!(mcp_server = %spec.name, "MCP server `{}` listed the same tools", spec.name);
                            continue;
                        }
                        let listed = if tools == last && !rebuild {
                            Arc::clone(&server.state().listed)
                        } else {
                            last = tools.clone();
                            let listed = build_tools(server, tools);
                            tracing::info!(mcp_server = %spec.name, tools = listed.len(), "MCP server `{}` changed its tools", spec.name);
                            report_listing(server, &listed);
                            Arc::new(listed)
                        };
                        let extras = Arc::new(last_extras.clone());
                        server.update(|old| ServerState {
                            status: Status::Ready,
                            peer: Some(peer.clone()),
                            listed,
                            extras,
                            attempts: old.attempts,
                            server_info: old.server_info.clone(),
                            last_error: None,
                        });
                        publish(server);
                    }
                    Ok(Err(e)) => tracing::warn!(mcp_server = %spec.name, "listing the tools of MCP server `{}` again failed: {}", spec.name, super::in_words(&e, spec)),
                    Err(_) => tracing::warn!(mcp_server = %spec.name, "listing the tools of MCP server `{}` again timed out", spec.name),
                }
            }
            () = stop.cancelled() => {
                cancel.cancel();
                let _ = tokio::time::timeout(STOP_GRACE, &mut waiting).await;
                return SessionEnd::Stopped;
            }
        }
    }
}

/// Subscribes a new session to the resources the gateway's clients are
/// subscribed to (a failure is logged: the clients miss updates, nothing
/// else).
async fn resubscribe<T>(server: &Server<T>, peer: &Peer<RoleClient>) {
    let uris: Vec<String> = server
        .subscribed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .cloned()
        .collect();
    for uri in uris {
        #[allow(deprecated)] // resources/subscribe: 2025-11-25 sessions
        let sent = tokio::time::timeout(
            server.spec.startup_timeout,
            peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone())),
        )
        .await;
        if !matches!(sent, Ok(Ok(_))) {
            tracing::warn!(mcp_server = %server.spec.name, "subscribing again to `{uri}` failed; its updates are not relayed until a client subscribes again");
        }
    }
}

/// The server's prompts, resources and templates, listed within its
/// `startup_timeout` (what is not listed in time is offered empty).
async fn list_extras(peer: &Peer<RoleClient>, spec: &ServerSpec) -> Extras {
    tokio::time::timeout(spec.startup_timeout, extras::list(peer, &spec.name))
        .await
        .unwrap_or_else(|_| {
            tracing::warn!(mcp_server = %spec.name, "listing the prompts and resources of MCP server `{}` timed out; they are offered empty", spec.name);
            Extras::default()
        })
}

/// Every page of `tools/list` (at most [`MAX_LIST_PAGES`]), and how long
/// the list is fresh: the shortest `ttlMs` of its pages, when they give
/// one (2026-07-28).
async fn list_tools(
    peer: &Peer<RoleClient>,
) -> Result<(Vec<rmcp::model::Tool>, Option<Duration>), rmcp::ServiceError> {
    let mut tools = Vec::new();
    let mut ttl: Option<u64> = None;
    let mut cursor = None;
    for _ in 0..MAX_LIST_PAGES {
        let page = peer
            .list_tools(Some(
                rmcp::model::PaginatedRequestParams::default().with_cursor(cursor),
            ))
            .await?;
        tools.extend(page.tools);
        if let Some(t) = page.ttl_ms {
            ttl = Some(ttl.map_or(t, |shortest| shortest.min(t)));
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok((tools, ttl.map(Duration::from_millis)));
        }
    }
    Err(rmcp::ServiceError::McpError(
        rmcp::ErrorData::internal_error(
            format!("the server gave more than {MAX_LIST_PAGES} pages of `tools/list`"),
            None,
        ),
    ))
}

/// The protocols the gateway speaks to servers, newest first: the stateless
/// 2026-07-28 revision (`server/discover`, per-request `_meta`), and the
/// `initialize` handshake for servers that do not know it (on the same
/// connection when the server answers `server/discover` with an error, or
/// does not answer it within rmcp's 10 s; see [`Inbound`]).
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// A server's transport as the session reads it.
///
/// Each log message of the server is handed to the client of the one call
/// running as it arrives, in the order the server sent it: rmcp would hand
/// notifications to the handler in tasks of their own, which may run after
/// the call's answer, and the client would never see a message the server
/// sent before it. With no such client the message is logged at debug
/// level.
///
/// On stdio (`late_discovery`), a late answer to `server/discover` is
/// dropped: when a server reads its first request only after rmcp gave up
/// waiting and sent `initialize` on the same pipe (a first `npx -y` run
/// fetching its package), the discovery answer arrives first and would be
/// taken for `initialize`'s ("conflict initialized response id"). Once
/// `initialize` is sent, answers to the earlier `server/discover` are not
/// passed on. A late discovery *result* (the server speaks 2026-07-28,
/// and now refuses `initialize` on that connection) is noted in `modern`,
/// so the server is started again asking only `server/discover`.
struct Inbound<T> {
    inner: T,
    server: String,
    running: Arc<super::relay::Running>,
    late_discovery: Option<LateDiscovery>,
}

struct LateDiscovery {
    discover: Option<rmcp::model::RequestId>,
    initialize_sent: bool,
    modern: Arc<std::sync::atomic::AtomicBool>,
}

impl<T> Inbound<T> {
    fn new<O>(inner: T, server: &Server<O>) -> Self {
        Inbound {
            inner,
            server: server.spec.name.clone(),
            running: Arc::clone(&server.running),
            late_discovery: None,
        }
    }

    fn dropping_late_discovery(mut self, modern: Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.late_discovery = Some(LateDiscovery {
            discover: None,
            initialize_sent: false,
            modern,
        });
        self
    }

    /// Hands `message` on when it is a log message; `true` then.
    #[allow(deprecated)] // logging (SEP-2577), still carried
    fn handed_log(&self, message: &rmcp::service::RxJsonRpcMessage<RoleClient>) -> bool {
        let rmcp::model::JsonRpcMessage::Notification(n) = message else {
            return false;
        };
        let rmcp::model::ServerNotification::LoggingMessageNotification(log) = &n.notification
        else {
            return false;
        };
        let params = &log.params;
        match self.running.only().and_then(|relay| relay.log) {
            Some(log) => (log.send)(params.clone()),
            None => {
                tracing::debug!(target: "toolgate::mcp::log", mcp_server = %self.server, level = ?params.level, "{}", params.data)
            }
        }
        true
    }
}

impl LateDiscovery {
    fn sent(&mut self, item: &rmcp::service::TxJsonRpcMessage<RoleClient>) {
        if let rmcp::model::JsonRpcMessage::Request(r) = item {
            match &r.request {
                rmcp::model::ClientRequest::DiscoverRequest(_) => {
                    self.discover = Some(r.id.clone())
                }
                rmcp::model::ClientRequest::InitializeRequest(_) => self.initialize_sent = true,
                _ => {}
            }
        }
    }

    /// `true` for a late answer to `server/discover`, not to pass on.
    fn drops(&self, message: &rmcp::service::RxJsonRpcMessage<RoleClient>) -> bool {
        let answered = match message {
            rmcp::model::JsonRpcMessage::Response(r) => Some(&r.id),
            rmcp::model::JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if !(self.initialize_sent && answered.is_some() && answered == self.discover.as_ref()) {
            return false;
        }
        tracing::debug!("a late answer to `server/discover` was dropped (`initialize` was sent)");
        if matches!(message, rmcp::model::JsonRpcMessage::Response(_)) {
            self.modern
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        true
    }
}

impl<T> rmcp::transport::Transport<RoleClient> for Inbound<T>
where
    T: rmcp::transport::Transport<RoleClient>,
{
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(late) = &mut self.late_discovery {
            late.sent(&item);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<rmcp::service::RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            if self.handed_log(&message)
                || self
                    .late_discovery
                    .as_ref()
                    .is_some_and(|l| l.drops(&message))
            {
                continue;
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// `true` when the server says it announces changes to its tool list.
fn announces_list_changes(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|i| i.capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true))
}

/// `true` when the session speaks the stateless revision (2026-07-28 or
/// later), where list changes come over `subscriptions/listen`.
fn is_stateless(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|i| !i.protocol_version.has_initialize())
}

/// Wakes `list_changed` on each `notifications/tools/list_changed` of a
/// stateless session that announces list changes, through a
/// `subscriptions/listen` stream, opened again (after a pause of 1 s,
/// doubling up to 60 s while streams fail or end at once) when it ends
/// while the session lives. On a session with `initialize`, the
/// notifications come to the handler instead, and this waits forever.
async fn listen_for_changes(
    peer: Peer<RoleClient>,
    list_changed: Arc<Notify>,
    server: String,
) -> std::convert::Infallible {
    let announces = announces_list_changes(&peer);
    if !is_stateless(&peer) || !announces {
        return std::future::pending().await;
    }
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut reopened = false;
    let mut pause = RELISTEN_AFTER;
    loop {
        let began = Instant::now();
        match peer.listen(filter.clone()).await {
            Ok(mut subscription) => {
                tracing::debug!(mcp_server = %server, "listening for tool list changes of MCP server `{server}`");
                if reopened {
                    // A change may have come while no stream was open.
                    list_changed.notify_one();
                }
                while let Ok(Some(notification)) = subscription.next().await {
                    if matches!(
                        notification,
                        rmcp::model::ServerNotification::ToolListChangedNotification(_)
                    ) {
                        list_changed.notify_one();
                    }
                }
            }
            Err(e) => {
                tracing::debug!(mcp_server = %server, "`subscriptions/listen` of MCP server `{server}` failed: {e}")
            }
        }
        reopened = true;
        // A stream that lived long was healthy: open the next one soon.
        // One that failed or ended at once waits longer each time.
        if began.elapsed() >= HEALTHY_AFTER {
            pause = RELISTEN_AFTER;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_RELISTEN_PAUSE);
    }
}

/// The first pause before a `subscriptions/listen` stream that ended is
/// opened again; doubled after each stream that did not last.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);
/// The longest pause between two `subscriptions/listen` streams.
const MAX_RELISTEN_PAUSE: Duration = Duration::from_secs(60);

/// Why a session did not start, and whether trying again can help.
struct StartFailure {
    reason: String,
    /// The server refused the gateway's credentials.
    needs_token: bool,
}

impl From<String> for StartFailure {
    fn from(reason: String) -> Self {
        StartFailure {
            reason,
            needs_token: false,
        }
    }
}

/// An rmcp error at start, in words, and whether the configuration must
/// change before trying again (a refused token in `headers`; a refused
/// OAuth token is tried again, so a new login is picked up).
fn start_failure(e: ClientInitializeError, spec: &ServerSpec) -> StartFailure {
    StartFailure {
        reason: format!("`initialize` failed: {}", super::in_words(&e, spec)),
        needs_token: super::needs_token(&e) && !spec.uses_oauth(),
    }
}

/// Spawns or connects to the server and starts the session: 2026-07-28's
/// `server/discover`, else `initialize` (see [`lifecycle`]). A server that
/// answers `server/discover` with something other than a discovery result
/// (some answer every unknown method with `{}`) is started again on a new
/// connection with `initialize` alone.
async fn connect<T>(server: &Server<T>, token: Option<&str>) -> Result<Session, StartFailure> {
    let modern = Arc::new(std::sync::atomic::AtomicBool::new(false));
    match open(server, lifecycle(), &modern, token).await? {
        Err(ClientInitializeError::ExpectedInitResult(Some(answer))) => {
            tracing::debug!(mcp_server = %server.spec.name, "MCP server `{}` answered `server/discover` with {answer:?}: starting it with `initialize`", server.spec.name);
            open(server, ClientLifecycleMode::Initialize, &modern, token).await?
        }
        // It answered `server/discover` after `initialize` was sent: it
        // speaks 2026-07-28, and is asked only that on a new connection
        // (waited for within `startup_timeout`).
        Err(_) if modern.load(std::sync::atomic::Ordering::Relaxed) => {
            tracing::debug!(mcp_server = %server.spec.name, "MCP server `{}` answered `server/discover` late: starting it again with `server/discover` alone", server.spec.name);
            let discover = ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            };
            open(server, discover, &modern, token).await?
        }
        started => started,
    }
    .map_err(|e| start_failure(e, &server.spec))
}

/// Spawns or connects to the server and runs the handshake of `mode`; the
/// outer `Err` is a failure before any handshake. With `token`, the
/// session is a caller's, opened with their bearer token.
async fn open<T>(
    server: &Server<T>,
    mode: ClientLifecycleMode,
    modern: &Arc<std::sync::atomic::AtomicBool>,
    token: Option<&str>,
) -> Result<Result<Session, ClientInitializeError>, StartFailure> {
    let handler = Handler {
        server: server.spec.name.clone(),
        list_changed: Arc::clone(&server.list_changed),
        updates: token.is_none().then(|| server.updates.clone()),
        progress: server.progress.clone(),
        running: Arc::clone(&server.running),
    };
    Ok(match &server.spec.transport {
        Transport::Stdio(stdio) => {
            let cmd = command(stdio);
            let (transport, stderr) = super::stdio::spawn(cmd)
                .map_err(|e| format!("cannot run `{}`: {e}", stdio.command))?;
            if let Some(stderr) = stderr {
                tokio::spawn(forward_stderr(server.spec.name.clone(), stderr));
            }
            handler
                .serve_with_lifecycle(
                    Inbound::new(transport, server).dropping_late_discovery(Arc::clone(modern)),
                    mode,
                )
                .await
        }
        Transport::Http(http) => {
            let mut headers: HashMap<_, _> = http.headers.iter().cloned().collect();
            // A caller's session speaks with their token alone: never with
            // the gateway's own `Authorization` of `headers`.
            if token.is_some() {
                headers.remove(&http::header::AUTHORIZATION);
            }
            // No transparent re-initialization: a server that lost our
            // session (it restarted) gets a new session from the
            // supervisor, and with it a fresh `tools/list`.
            let config = StreamableHttpClientTransportConfig::with_uri(http.url.clone())
                .custom_headers(headers)
                .reinit_on_expired_session(false);
            if let Some(token) = token {
                let transport = StreamableHttpClientTransport::with_client(
                    CallerHeaders::default(),
                    config.auth_header(token.to_owned()),
                );
                return Ok(handler
                    .serve_with_lifecycle(Inbound::new(transport, server), mode)
                    .await);
            }
            match &http.oauth {
                None => {
                    let transport = StreamableHttpClientTransport::with_client(
                        CallerHeaders::default(),
                        config,
                    );
                    handler
                        .serve_with_lifecycle(Inbound::new(transport, server), mode)
                        .await
                }
                Some(oauth) => {
                    let manager = super::oauth::authorize(&server.spec.name, &http.url, oauth)
                        .await
                        .map_err(|reason| StartFailure {
                            reason,
                            needs_token: false,
                        })?;
                    let client =
                        rmcp::transport::AuthClient::new(CallerHeaders::default(), manager);
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    handler
                        .serve_with_lifecycle(Inbound::new(transport, server), mode)
                        .await
                }
            }
        }
    })
}

/// The child process: its own process group (so stopping it also stops
/// what it spawned, e.g. `npx` and node), killed when dropped, with a clean
/// environment.
fn command(stdio: &StdioSpec) -> process_wrap::tokio::CommandWrap {
    let mut cmd = tokio::process::Command::new(&stdio.command);
    cmd.args(&stdio.args).env_clear().kill_on_drop(true);
    for var in PASSED_ENV {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    cmd.envs(stdio.env.iter().map(|(k, v)| (k, v)));
    if let Some(cwd) = &stdio.cwd {
        cmd.current_dir(cwd);
    }
    let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
    #[cfg(unix)]
    wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
    wrap
}

/// Copies the server's stderr to the logs, line by line, tagged with its name.
async fn forward_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = match line.char_indices().nth(MAX_STDERR_LINE) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line,
        };
        tracing::info!(target: "toolgate::mcp::stderr", mcp_server = %server, "{line}");
    }
}

/// Turns a listing into gateway tools: filtered, renamed, with their schema
/// compiled.
fn build_tools<T: Offer>(server: &Arc<Server<T>>, tools: Vec<rmcp::model::Tool>) -> Vec<Listed<T>> {
    let spec = &server.spec;
    let mut out = Vec::new();
    for t in tools {
        let remote = t.name.to_string();
        if !spec.tools.admits(&remote) {
            continue;
        }
        let (name, tool) = match spec.tools.local_name(&remote) {
            Err(reason) => (
                format!("{}{remote}", spec.tools.prefix),
                Err(format!(
                    "{reason} — use a shorter `tools.prefix`, or exclude the tool"
                )),
            ),
            Ok(name) => {
                let tool = pinned(server, &remote, &t, make_tool(server, &name, &remote, &t));
                (name, tool)
            }
        };
        out.push(Listed { remote, name, tool });
    }
    out
}

/// What a tool's definition is, for telling a change: its name, title,
/// description, schemas and annotations.
fn definition(t: &rmcp::model::Tool) -> Value {
    serde_json::json!({
        "name": t.name, "title": t.title, "description": t.description,
        "inputSchema": t.input_schema, "outputSchema": t.output_schema,
        "annotations": t.annotations,
    })
}

/// A definition's fingerprint: the SHA-256 of its JSON.
pub fn fingerprint(definition: &Value) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(definition.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tool to offer for `t` as the server lists it now: the definition
/// first seen (or the pin file's) is pinned; a changed one is kept out,
/// taken or ignored as `on_change` says, reported once, and held for a
/// person to accept.
fn pinned<T>(
    server: &Server<T>,
    remote: &str,
    t: &rmcp::model::Tool,
    fresh: Result<Arc<T>, String>,
) -> Result<Arc<T>, String> {
    let spec = &server.spec;
    let seen = definition(t);
    let now = fingerprint(&seen);
    let mut pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
    let Some(pin) = pins.get_mut(remote) else {
        let filed = spec.pins.get(remote);
        if filed.is_none_or(|f| *f == now) {
            pins.insert(remote.to_owned(), Pin::trusted(now, seen, fresh.clone()));
            return fresh;
        }
        // The pin file trusts another definition than the one listed.
        let pin = pins.entry(remote.to_owned()).or_insert(Pin {
            fingerprint: filed.cloned().unwrap_or_default(),
            definition: None,
            tool: Err(format!(
                "MCP server `{}` lists a definition of this tool that its pin file does not trust; it is out of service until someone accepts it in the console or the pin file is updated",
                spec.name
            )),
            changed: None,
            accept: None,
        });
        return held(spec, remote, pin, seen, now, fresh, spec.on_change);
    };
    if pin.fingerprint == now {
        pin.changed = None;
        return pin.tool.clone();
    }
    if pin.accept.as_deref() == Some(now.as_str()) {
        *pin = Pin::trusted(now, seen, fresh.clone());
        return fresh;
    }
    held(spec, remote, pin, seen, now, fresh, spec.on_change)
}

/// A changed definition of `remote`, under `on_change`.
fn held<T>(
    spec: &super::spec::ServerSpec,
    remote: &str,
    pin: &mut Pin<T>,
    seen: Value,
    now: String,
    fresh: Result<Arc<T>, String>,
    on_change: toolgate_config::format::OnChange,
) -> Result<Arc<T>, String> {
    use toolgate_config::format::OnChange;
    let first_report = pin.changed.as_ref().map(|c| c.fingerprint.as_str()) != Some(now.as_str());
    if first_report {
        pin.changed = Some(Changed {
            fingerprint: now.clone(),
            definition: seen.clone(),
            since: humantime_serde::re::humantime::format_rfc3339_millis(
                std::time::SystemTime::now(),
            )
            .to_string(),
        });
    }
    match on_change {
        OnChange::Accept => {
            if first_report {
                tracing::warn!(mcp_server = %spec.name, tool = remote, "MCP server `{}` changed the definition of `{remote}`; accepted (on_change: accept)", spec.name);
            }
            *pin = Pin::trusted(now, seen, fresh.clone());
            fresh
        }
        OnChange::KeepOld => {
            if first_report {
                tracing::warn!(mcp_server = %spec.name, tool = remote, "MCP server `{}` changed the definition of `{remote}` after the gateway first saw it; the first definition stays in service (on_change: keep_old)", spec.name);
            }
            pin.tool.clone()
        }
        OnChange::Disable => {
            if first_report {
                tracing::warn!(mcp_server = %spec.name, tool = remote, "MCP server `{}` changed the definition of `{remote}` after the gateway first saw it; the tool is out of service (on_change: disable)", spec.name);
            }
            Err(format!(
                "MCP server `{}` changed this tool's definition (description, schemas or annotations) after the gateway trusted it; it is out of service until a person accepts the change in the console (`on_change: disable`; `keep_old` would keep serving the trusted definition, `accept` would take the new one)",
                spec.name
            ))
        }
    }
}

fn make_tool<T: Offer>(
    server: &Arc<Server<T>>,
    name: &str,
    remote: &str,
    t: &rmcp::model::Tool,
) -> Result<Arc<T>, String> {
    let spec = &server.spec;
    let read_only = t
        .annotations
        .as_ref()
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false);
    let handle = McpTool {
        server: Arc::downgrade(server),
        server_name: spec.name.clone(),
        remote: remote.to_owned(),
        read_only,
        meta: t
            .meta
            .as_ref()
            .map(|m| Arc::new(super::extras::app_meta(&spec.name, m.0.clone()))),
    };
    T::offer(spec, name, t, handle).map(Arc::new)
}

fn report_listing<T>(server: &Server<T>, listed: &[Listed<T>]) {
    let name = &server.spec.name;
    let usable = listed.iter().filter(|l| l.tool.is_ok()).count();
    tracing::info!(mcp_server = %name, "MCP server `{name}` is ready with {usable} tools");
    for l in listed {
        if let Err(reason) = &l.tool {
            tracing::warn!(mcp_server = %name, "tool `{}` of MCP server `{name}` is unavailable: {reason}", l.remote);
        }
    }
}

/// Where a call carries the headers rendered for its caller (`headers`
/// reading `request.key` / `request.project`): an entry of its `_meta`,
/// which the session's HTTP client moves into the request's headers before
/// it is sent (the server sees headers only).
pub const CALLER_HEADERS_META: &str = "io.toolgate/caller-headers";

/// rmcp's HTTP client (reqwest), sending the headers a `tools/call` carries
/// for its caller. rmcp sends from a worker task of its own, so the
/// caller's headers travel with the message rather than with the task.
#[derive(Clone, Debug, Default)]
struct CallerHeaders(reqwest::Client);

/// Takes the caller's headers out of a `tools/call`'s `_meta`.
fn take_caller_headers(
    message: &mut rmcp::model::ClientJsonRpcMessage,
    headers: &mut HashMap<http::HeaderName, http::HeaderValue>,
) {
    use rmcp::model::{ClientRequest, JsonRpcMessage};
    let JsonRpcMessage::Request(request) = message else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = &mut request.request else {
        return;
    };
    let Some(meta) = call.params.meta.as_mut() else {
        return;
    };
    let Some(serde_json::Value::Object(given)) = meta.0.0.remove(CALLER_HEADERS_META) else {
        return;
    };
    if meta.0.0.is_empty() {
        call.params.meta = None;
    }
    for (name, value) in given {
        if let (Ok(name), Some(Ok(mut value))) = (
            http::HeaderName::from_bytes(name.as_bytes()),
            value.as_str().map(http::HeaderValue::from_str),
        ) {
            // They may carry a secret of `env`: never shown.
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
}

/// A bearer token among a request's headers (a caller's, at a `per_user`
/// server; or the declared `headers`' own): sent as the request's token,
/// in place of the one the session was opened with (a caller's may have
/// been renewed since). Any other `Authorization` is left as it is.
fn caller_bearer(headers: &mut HashMap<http::HeaderName, http::HeaderValue>) -> Option<String> {
    let token = headers
        .get(&http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .to_owned();
    headers.remove(&http::header::AUTHORIZATION);
    Some(token)
}

type SseStream = futures::stream::BoxStream<
    'static,
    Result<sse_stream::Sse, rmcp::transport::streamable_http_client::SseError>,
>;
type HttpError = rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for CallerHeaders {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        mut message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<rmcp::transport::streamable_http_client::StreamableHttpPostResponse, HttpError>
    {
        take_caller_headers(&mut message, &mut custom_headers);
        let auth_header = caller_bearer(&mut custom_headers).or(auth_header);
        self.0
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        mut message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<rmcp::transport::streamable_http_client::StreamableHttpPostResponse, HttpError>
    {
        take_caller_headers(&mut message, &mut custom_headers);
        let auth_header = caller_bearer(&mut custom_headers).or(auth_header);
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<(), HttpError> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<SseStream, HttpError> {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<SseStream, HttpError> {
        self.0
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_authorization_becomes_the_requests_token() {
        let mut headers = HashMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Basic dXNlcjpwYXNz"),
        );
        assert_eq!(caller_bearer(&mut headers), None);
        assert_eq!(
            headers.get(&http::header::AUTHORIZATION).unwrap(),
            "Basic dXNlcjpwYXNz",
            "another scheme is sent as declared"
        );
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(caller_bearer(&mut headers).as_deref(), Some("abc"));
        assert!(headers.is_empty());
    }
}
