//! One MCP server's life: a supervisor task that starts the session (spawn
//! or connect, `initialize`, `tools/list`), keeps it for every call, lists
//! the tools again on `notifications/tools/list_changed`, and restarts the
//! server with exponential backoff when the session ends. The current state
//! is published through an `ArcSwap`, so calls read it without a lock.
//!
//! Its parts: `supervise` (the supervisor and its sessions), `connect`
//! (opening a session), `handler` (what the server sends the client),
//! `listing` (the tools listed, made and pinned), `shared_pins` (pins the
//! replicas agree on).

mod connect;
mod handler;
pub(crate) mod listing;
pub mod shared_pins;
mod supervise;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rmcp::{Peer, RoleClient};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::Offer;
use super::extras::Extras;
use super::spec::ServerSpec;
use connect::{Session, connect};
use listing::{MIN_LIST_TTL, Pin, list_extras, list_tools};

pub use connect::CALLER_HEADERS_META;
pub use listing::{AcceptError, Refusal, ToolChange, fingerprint};
pub(crate) use supervise::supervise;

/// What holds a server (a catalog's registry): it rebuilds what it offers
/// whenever the server's state changes.
pub(crate) trait Owner: Send + Sync {
    /// Rebuilds what it offers from its servers' states.
    fn publish(&self);
}

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
    owners: Mutex<Vec<Weak<dyn Owner>>>,
    /// Its supervisor has been spawned.
    supervised: AtomicBool,
    /// Each tool's definition as first seen (by the server's name for it):
    /// its fingerprint and the tool made of it (`on_change`).
    pins: Mutex<HashMap<String, Pin<T>>>,
    /// Where the replicas agree on pins (`state.redis`), if anywhere.
    pin_store: Mutex<Option<Arc<dyn shared_pins::PinStore>>>,
    /// A listing could not settle with the pin store: settled again at
    /// the next poll.
    pins_unsettled: AtomicBool,
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
            pin_store: Mutex::new(None),
            pins_unsettled: AtomicBool::new(false),
            rebuild: AtomicBool::new(false),
            users: Mutex::new(HashMap::new()),
            updates: tokio::sync::broadcast::channel(UPDATES_BACKLOG).0,
            subscribed: Mutex::new(HashMap::new()),
        }
    }

    /// Pins this server's tool definitions as the replicas sharing `store`
    /// agree (from its next listing on).
    pub fn share_pins(&self, store: Arc<dyn shared_pins::PinStore>) {
        *self.pin_store.lock().unwrap_or_else(|p| p.into_inner()) = Some(store);
    }

    fn pin_store(&self) -> Option<Arc<dyn shared_pins::PinStore>> {
        self.pin_store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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
                        super::errors::in_words(&e, spec)
                    ),
                    super::errors::needs_token(&e),
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
            tools: Arc::new(shared_pins::build(self, tools).await),
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

    fn owners(&self) -> std::sync::MutexGuard<'_, Vec<Weak<dyn Owner>>> {
        self.owners
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds a registry holding this server (once).
    pub fn add_owner(&self, registry: Weak<dyn Owner>) {
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

    /// Replaces the state. Watchers are told by `supervise::publish`, once
    /// the registry's snapshot reflects the change.
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
