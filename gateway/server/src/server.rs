//! Running the gateway: the HTTP server with everything around it.
//!
//! [`start`] starts the MCP servers (waiting for their first attempt), opens
//! the audit log, puts the catalog in service ([`Live`]), starts watching
//! the configuration folder, connects the shared state (`state.redis`; a
//! Redis that is down at start is retried in the background while the
//! gateway serves and `/readyz` says so), handles signals (SIGHUP reloads;
//! SIGTERM and SIGINT shut down) and serves. Shutting down:
//!
//! 0. draining, for `shutdown.drain_delay`: `/readyz` answers 503 and every
//!    HTTP/1 answer closes its connection, so load balancers move away
//!    while the gateway still serves;
//! 1. the listener stops accepting; requests in flight, streams included,
//!    go on;
//! 2. once they are done, or `shutdown.grace` has passed (or a second
//!    signal came), serving ends and whatever is still open is dropped;
//! 3. the configuration is no longer watched, the MCP servers are stopped,
//!    and the audit log is flushed and synced.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

mod idle;
mod threads;

use crate::http::AppState;
use crate::reload::{self, Live, Loader, Outcome, Reloader, Trigger, WatchHandle};
use crate::router::Gateway;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::{Executor, http_client};
use toolgate_engine::governance::audit::AuditLog;

/// How to run.
pub struct Options {
    /// The configuration folder: watched, and reloaded from.
    pub dir: PathBuf,
    /// Loads the folder, the same way the first catalog was loaded.
    pub loader: Loader,
    /// Handle SIGHUP (reload) and SIGTERM/SIGINT (graceful shutdown).
    pub signals: bool,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("dir", &self.dir)
            .field("signals", &self.signals)
            .finish()
    }
}

/// Why the gateway could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Audit(#[from] toolgate_engine::governance::audit::OpenError),
    #[error("cannot watch the configuration folder: {0}")]
    Watch(#[from] notify::Error),
    #[error("cannot handle signals: {0}")]
    Signals(std::io::Error),
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("the HTTP client of the tools cannot be built: {0}")]
    Client(reqwest::Error),
    #[error("{0}")]
    Stdio(String),
    #[error("the shared state cannot be used: {0}")]
    Shared(String),
}

/// A running gateway.
#[derive(Debug)]
pub struct Running {
    addr: SocketAddr,
    state: AppState,
    reloader: Arc<Reloader>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (catalog in service, executor, guards).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Reloads the configuration now.
    pub async fn reload(&self) -> Outcome {
        self.reloader.reload(Trigger::Manual).await
    }

    /// Starts a graceful shutdown (as SIGTERM does): draining for
    /// `shutdown.drain_delay`, then no new connections.
    pub fn shutdown(&self) {
        self.state.draining.begin();
    }

    /// Waits until the gateway has stopped.
    pub async fn wait(self) -> Result<(), ServeError> {
        self.task.await?
    }
}

/// What serving needs, whatever the transport: the state, the reloader,
/// the file watch and the audit log.
struct Prepared {
    state: AppState,
    reloader: Arc<Reloader>,
    watch: Option<WatchHandle>,
    audit: Option<AuditLog>,
}

/// Protects the process, starts the MCP servers, opens the audit log and
/// puts `catalog` in service, watched for changes when configured.
///
/// The MCP servers' sessions run on `runtimes` (in turn), or on the current
/// runtime when there are none.
async fn prepare(
    catalog: Catalog,
    options: Options,
    runtimes: &[tokio::runtime::Handle],
) -> Result<Prepared, ServeError> {
    toolgate_builtins::process::protect_gateway();
    tracing::info!("catalog: {}", catalog.summary());
    // The shared state is connected before the MCP servers list their
    // tools, so their first listing pins what the replicas agree on.
    let shared = shared_state(&catalog)?;
    let stopping = tokio_util::sync::CancellationToken::new();
    let pins = pin_store(&catalog, &options.dir, shared.as_ref());
    if let Some(redis) = &shared {
        redis.spawn(stopping.clone()).await;
    }
    if let Some(store) = &pins {
        catalog.mcp().share_pins(store);
    }
    catalog.mcp().start_on(runtimes).await;
    let audit = match &catalog.settings.audit {
        Some(decl) => Some(AuditLog::open(decl, &options.dir).await?),
        None => None,
    };
    let reload_settings = catalog.settings.reload.clone();
    // The console's recent calls are kept when it is on at start.
    let recent = catalog.settings.console.enabled.then(|| {
        Arc::new(toolgate_engine::governance::audit::Recent::new(
            catalog.settings.console.recent_calls,
        ))
    });
    let live = Arc::new(Live::new(Arc::new(catalog)));
    let mut executor = Executor::new(http_client().map_err(ServeError::Client)?)
        .with_audit(audit.clone())
        .with_recent(recent);
    if shared.is_none() {
        executor = executor.with_approvals_kept_in(
            options
                .dir
                .join(
                    live.load()
                        .settings
                        .approvals
                        .store
                        .as_deref()
                        .unwrap_or(".toolgate/approvals"),
                )
                .join("approvals.json"),
        );
    }
    let state = AppState::with_shared(Arc::clone(&live), executor, shared);
    let stopped = state.stopping.clone();
    tokio::spawn(async move {
        stopped.cancelled().await;
        stopping.cancel();
    });
    tokio::spawn(
        Arc::clone(&state.spend).keep(state.catalog().spend.keep_secs, state.stopping.clone()),
    );
    let reloader = Arc::new(
        Reloader::new(live, options.loader, options.dir, runtimes.to_vec()).with_pins(pins),
    );
    let watch = if reload_settings.watch {
        Some(reload::watch(
            Arc::clone(&reloader),
            reload_settings.debounce,
        )?)
    } else {
        None
    };
    Ok(Prepared {
        state,
        reloader,
        watch,
        audit,
    })
}

/// Where the MCP servers' trusted tool definitions are kept: Redis when
/// the replicas share it, else the embedded store in `state.pins`.
fn pin_store(
    catalog: &Catalog,
    dir: &std::path::Path,
    shared: Option<&Arc<toolgate_engine::support::shared::Redis>>,
) -> Option<Arc<dyn toolgate_engine::tools::tool::mcp::PinStore>> {
    Some(match shared {
        Some(redis) => redis.clone(),
        None => Arc::new(toolgate_engine::governance::pins::PinFile::new(
            dir.join(
                catalog
                    .settings
                    .state
                    .pins
                    .as_deref()
                    .unwrap_or(".toolgate/pins"),
            )
            .join("pins.json"),
        )),
    })
}

/// The shared state of `state.redis`, not yet connected.
fn shared_state(
    catalog: &Catalog,
) -> Result<Option<Arc<toolgate_engine::support::shared::Redis>>, ServeError> {
    let (Some(decl), Some(url)) = (&catalog.settings.state.redis, &catalog.redis_url) else {
        return Ok(None);
    };
    toolgate_engine::support::shared::Redis::new(url, decl)
        .map(Some)
        .map_err(|e| ServeError::Shared(e.to_string()))
}

/// Ends the MCP sessions and the shared state's supervisor, stops the MCP
/// servers and flushes the audit log.
async fn finish(state: &AppState, audit: Option<AuditLog>) {
    state.stopping.cancel();
    state.spend.flush(state.catalog().spend.keep_secs);
    state.catalog().mcp().shutdown().await;
    if let Some(audit) = audit {
        audit.flush().await;
        tracing::info!("audit log flushed");
    }
}

/// Serves the tool set `set` of `catalog` over stdin/stdout (MCP) until
/// the client closes them. The configuration is watched and reloaded as
/// for `serve`; logs go to stderr.
pub async fn stdio(
    catalog: Catalog,
    set: String,
    discovery: Option<toolgate_config::format::Discovery>,
    options: Options,
) -> Result<(), ServeError> {
    if let Err(e) = catalog.usable_set(&set, None) {
        return Err(ServeError::Stdio(e.to_string()));
    }
    let Prepared {
        state,
        watch,
        audit,
        ..
    } = prepare(catalog, options, &[]).await?;
    let served = crate::faces::mcp::serve_stdio(state.clone(), set, discovery).await;
    drop(watch);
    finish(&state, audit).await;
    served.map_err(|e| ServeError::Stdio(e.to_string()))
}

/// Starts serving `catalog` (loaded from `options.dir`) on `listener`.
pub async fn start(
    catalog: Catalog,
    listener: tokio::net::TcpListener,
    options: Options,
) -> Result<Running, ServeError> {
    let signals = options.signals;
    // The connection threads, started first: the MCP servers' sessions run
    // on them too.
    let threads = threads::Threads::start_per_core()?;
    let Prepared {
        state,
        reloader,
        watch,
        audit,
    } = prepare(catalog, options, threads.handles()).await?;
    let stop = CancellationToken::new();
    let force = CancellationToken::new();
    if signals {
        spawn_signal_handlers(Arc::clone(&reloader), state.draining.clone(), force.clone())
            .map_err(ServeError::Signals)?;
    }
    tokio::spawn(drain(state.clone(), stop.clone(), force.clone()));
    let addr = listener.local_addr()?;
    tracing::info!("listening on http://{addr}");
    let task = tokio::spawn(run(
        listener,
        threads,
        state.clone(),
        stop.clone(),
        force,
        watch,
        audit,
    ));
    Ok(Running {
        addr,
        state,
        reloader,
        task,
    })
}

/// Once draining starts: `/readyz` answers 503 and answers close their
/// connections for `shutdown.drain_delay` (a second signal cuts it short),
/// then the listener stops.
async fn drain(state: AppState, stop: CancellationToken, force: CancellationToken) {
    tokio::select! {
        () = state.draining.begun() => {}
        () = stop.cancelled() => return,
    }
    let delay = state.catalog().settings.shutdown.drain_delay;
    if !delay.is_zero() {
        tracing::info!(
            "draining: /readyz answers 503 for {} before the listener closes",
            humantime_serde::re::humantime::format_duration(delay)
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = force.cancelled() => {}
        }
    }
    stop.cancel();
}

async fn run(
    listener: tokio::net::TcpListener,
    threads: threads::Threads,
    state: AppState,
    stop: CancellationToken,
    force: CancellationToken,
    watch: Option<WatchHandle>,
    audit: Option<AuditLog>,
) -> Result<(), ServeError> {
    let limits = state.catalog().settings.limits.clone();
    let mut serve = Box::pin(serve_connections(
        listener,
        &threads,
        Gateway::new(state.clone()),
        stop.clone(),
        limits,
    ));
    let grace_over = async {
        stop.cancelled().await;
        state.stopping.cancel();
        let grace = state.catalog().settings.shutdown.grace;
        tracing::info!(
            streams = state.guards.streams.current(),
            tool_loops = state.guards.loops.current(),
            "shutting down: no new connections; requests in flight have {} to finish",
            humantime_serde::re::humantime::format_duration(grace)
        );
        tokio::select! {
            () = tokio::time::sleep(grace) => {}
            () = force.cancelled() => {}
        }
    };
    let served = tokio::select! {
        r = &mut serve => r,
        () = grace_over => {
            tracing::warn!(
                streams = state.guards.streams.current(),
                tool_loops = state.guards.loops.current(),
                "the shutdown grace period is over; closing what is still open"
            );
            Ok(())
        }
    };
    drop(watch);
    finish(&state, audit).await;
    // The threads end after the MCP sessions on them have been closed.
    drop(serve);
    drop(threads);
    tracing::info!("stopped");
    Ok(served?)
}

/// The file descriptors a connection may take: its own and an upstream's.
const FDS_PER_CONNECTION: u64 = 2;
/// Descriptors kept for everything else: the listener, logs, the audit
/// log, MCP servers' pipes, the shared state.
const FDS_RESERVED: u64 = 64;

/// The memory a connection is counted for: an open streaming answer with
/// its upstream connection (measured near 60 KiB, `docs/benchmarks.md`),
/// rounded up.
const BYTES_PER_CONNECTION: u64 = 128 * 1024;

/// The connections the gateway holds at once: `limits.max_connections`,
/// lowered to what the process's descriptor limit (`RLIMIT_NOFILE`, raised
/// to its hard limit first) can serve, two descriptors a connection past a
/// reserve, and to what half of the memory it may use (its cgroup's limit,
/// else the machine's) holds at 128 KiB a connection.
pub fn connection_cap(configured: usize) -> usize {
    let (soft, hard) = rlimit::Resource::NOFILE
        .get()
        .unwrap_or((u64::MAX, u64::MAX));
    let files = if soft < hard {
        rlimit::Resource::NOFILE
            .set(hard, hard)
            .map_or(soft, |()| hard)
    } else {
        soft
    };
    let memory = memory_limit();
    let cap = cap_for(configured, files, memory);
    if cap < configured {
        tracing::warn!(
            "limits.max_connections is {configured}, but the process may open {files} files and use {} MiB: the gateway holds at most {cap} connections (raise `ulimit -n` or the memory limit for more)",
            memory.map_or(u64::MAX, |m| m / (1024 * 1024))
        );
    }
    cap
}

/// [`connection_cap`]'s rule, for a file limit and a memory limit in bytes.
fn cap_for(configured: usize, files: u64, memory: Option<u64>) -> usize {
    let by_files = files.saturating_sub(FDS_RESERVED) / FDS_PER_CONNECTION;
    let by_memory = memory.map_or(u64::MAX, |m| m / 2 / BYTES_PER_CONNECTION);
    let fits = usize::try_from(by_files.min(by_memory)).unwrap_or(usize::MAX);
    configured.min(fits).max(1)
}

/// The memory the process may use: its cgroup's `memory.max` (v2) or
/// `memory.limit_in_bytes` (v1) when set, else the machine's `MemTotal`.
fn memory_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let cgroup = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        // v1 says "no limit" with a huge number.
        .filter(|&v| v < (1 << 60));
    cgroup.or_else(|| {
        read("/proc/meminfo")?
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    })
}

/// The open connections, oldest first: at the cap, the oldest that has
/// not sent its first request makes room for a new one (a client that
/// holds a connection without asking anything loses it first), else the
/// oldest keep-alive connection idle between requests.
#[derive(Default)]
struct Waiting(std::sync::Mutex<std::collections::VecDeque<std::sync::Weak<Unasked>>>);

/// One connection's state for [`Waiting`].
struct Unasked {
    /// It has had a request.
    used: std::sync::atomic::AtomicBool,
    /// It waits for its next request (no exchange in progress).
    idle: std::sync::atomic::AtomicBool,
    /// Cancelled to close it.
    shed: CancellationToken,
}

impl Waiting {
    fn push(&self, conn: &Arc<Unasked>, bound: usize) {
        let mut q = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= bound {
            q.retain(|c| c.strong_count() > 0);
        }
        q.push_back(Arc::downgrade(conn));
    }

    /// Closes the oldest connection still waiting for its first request,
    /// else the oldest idle between requests; `false` when there is none.
    fn shed_oldest(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let mut q = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        q.retain(|c| c.strong_count() > 0);
        let unused = |c: &Unasked| !c.used.load(Relaxed);
        let idle = |c: &Unasked| c.used.load(Relaxed) && c.idle.load(Relaxed);
        let pick = |which: &dyn Fn(&Unasked) -> bool| {
            q.iter().position(|c| {
                c.upgrade()
                    .is_some_and(|c| !c.shed.is_cancelled() && which(&c))
            })
        };
        let Some(at) = pick(&unused).or_else(|| pick(&idle)) else {
            return false;
        };
        if let Some(c) = q.remove(at).and_then(|c| c.upgrade()) {
            c.shed.cancel();
        }
        true
    }
}

/// Accepts connections until `stop`, then waits for the open ones to
/// finish (each is told to close once its requests are answered). Each is
/// served on one of the connection threads ([`threads`]), in turn.
///
/// Bounded for hostile clients: at most [`connection_cap`] open at once;
/// at the cap a new connection takes the place of the oldest one that has
/// not sent a request yet (so a crowd of half-sent requests cannot keep a
/// health check or a real client out), else it waits for a place; and each
/// must send a request's headers within `limits.header_timeout` (the
/// request body has its own deadline, see `http::body_deadline`).
async fn serve_connections(
    listener: tokio::net::TcpListener,
    threads: &threads::Threads,
    app: Gateway,
    stop: CancellationToken,
    limits: toolgate_config::format::Limits,
) -> std::io::Result<()> {
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    use hyper_util::server::conn::auto::Builder;

    let cap = connection_cap(limits.max_connections);
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    let waiting = Arc::new(Waiting::default());
    let open = tokio_util::task::TaskTracker::new();
    let mut auto = Builder::new(TokioExecutor::new());
    auto.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    auto.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_timeout)
        .keep_alive_timeout(limits.header_timeout);
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let builders = Arc::new(Builders {
        http1,
        auto,
        idle: limits.header_timeout,
    });
    // A connection comes as a non-blocking socket registered with no event
    // loop: its thread registers it with its own.
    let serve = |stream: std::net::TcpStream, slot| {
        let unasked = Arc::new(Unasked {
            used: std::sync::atomic::AtomicBool::new(false),
            idle: std::sync::atomic::AtomicBool::new(true),
            shed: CancellationToken::new(),
        });
        waiting.push(&unasked, cap);
        open.spawn_on(
            serve_connection(
                stream,
                app.clone(),
                Arc::clone(&builders),
                stop.clone(),
                Some(slot),
                Some(unasked),
            ),
            threads.next(),
        );
    };
    loop {
        let (stream, _peer) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: make room, go on.
                    tracing::warn!("accepting a connection failed: {e}");
                    waiting.shed_oldest();
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                // At the cap: the oldest connection that has asked nothing
                // makes room; without one, wait for a place.
                if waiting.shed_oldest() {
                    toolgate_engine::support::metrics::record(|m| m.reject("connection_shed"));
                }
                tokio::select! {
                    () = stop.cancelled() => break,
                    slot = Arc::clone(&slots).acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                }
            }
        };
        match stream.into_std() {
            Ok(stream) => serve(stream, slot),
            Err(e) => tracing::debug!("an accepted connection could not be served: {e}"),
        }
    }
    // Connections the kernel has completed but that were not accepted yet
    // would be reset when the listener closes, their requests lost (a
    // proxy cannot tell whether they ran): accept them now, straight from
    // the socket until its queue is empty (tokio's `accept` only sees what
    // its event loop has already noticed). While draining each is answered
    // with `Connection: close`. At most as many as there are free
    // connection slots.
    let listener = match listener.into_std() {
        Ok(listener) => Some(listener),
        Err(e) => {
            tracing::debug!("the listener's queue cannot be read: {e}");
            None
        }
    };
    while let Some(listener) = &listener
        && let Ok(slot) = Arc::clone(&slots).try_acquire_owned()
    {
        let stream = match listener.accept() {
            Ok((stream, _peer)) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        match stream.set_nonblocking(true) {
            Ok(()) => serve(stream, slot),
            Err(e) => tracing::debug!("a queued connection could not be served: {e}"),
        }
    }
    drop(listener);
    open.close();
    open.wait().await;
    Ok(())
}

/// While draining, a connection that has not had its first request yet
/// waits for it (the header timeout, or the grace period, ends the wait):
/// `Some` with how the connection ended if it ended first. (A macro: as an
/// async function generic over the connection, the compiler could not
/// prove the spawned connection task `Send`.)
macro_rules! until_first {
    ($conn:expr, $used:expr, $first:expr) => {
        if $used.load(std::sync::atomic::Ordering::Relaxed) {
            None
        } else {
            tokio::select! {
                ended = $conn => Some(ended),
                () = $first.notified() => None,
            }
        }
    };
}

type ConnBuilder = hyper_util::server::conn::auto::Builder<hyper_util::rt::TokioExecutor>;

/// How connections are served: HTTP/1 request by request (see [`idle`]),
/// and, for a connection that opens with HTTP/2's preface, hyper-util's
/// connection that serves either.
struct Builders {
    http1: hyper::server::conn::http1::Builder,
    auto: ConnBuilder,
    /// How long a connection may idle before its next request.
    idle: std::time::Duration,
}

/// HTTP/2's connection preface.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serves one connection until it ends. Once `stop` is cancelled, a
/// connection that has had a request closes after the one in progress (at
/// once when idle); one that has not had its first request yet gets it
/// answered first (with `Connection: close`, the gateway is draining)
/// rather than closed under a request its client may already be sending
/// (the header timeout and the grace period bound the wait).
///
/// HTTP/1 is served one hyper connection per exchange: between requests
/// the connection holds its socket and nothing of hyper's ([`idle`]), and
/// closes when no request begins within `limits.header_timeout` (hyper's
/// own header timeout then bounds the request's head).
async fn serve_connection(
    stream: std::net::TcpStream,
    app: Gateway,
    builders: Arc<Builders>,
    stop: CancellationToken,
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
    unasked: Option<Arc<Unasked>>,
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let shed = unasked.as_ref().map(|u| u.shed.clone()).unwrap_or_default();
    // Whether it waits for a request (what may be shed at the cap).
    let idle_flag = unasked.clone();
    let set_idle = move |idle: bool| {
        if let Some(u) = &idle_flag {
            u.idle.store(idle, Ordering::Relaxed);
        }
    };
    // The connection's own token: polled on every wake-up of this task,
    // and a token's check takes its lock, which all connections would
    // otherwise share.
    let stop = stop.child_token();
    let stream = match tokio::net::TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!("an accepted connection could not be served: {e}");
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let used = Arc::new(AtomicBool::new(false));
    let first = Arc::new(tokio::sync::Notify::new());
    let exchange = Arc::new(idle::Exchange::default());
    let (seen, first_seen, ex) = (Arc::clone(&used), Arc::clone(&first), Arc::clone(&exchange));
    let mut service =
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            if !seen.swap(true, Ordering::Relaxed) {
                first_seen.notify_one();
                if let Some(u) = &unasked {
                    u.used.store(true, Ordering::Relaxed);
                }
            }
            ex.begin(http_body::Body::is_end_stream(req.body()));
            let req = req.map(|body| idle::Tracked::request(body, Arc::clone(&ex)));
            let answer = hyper::service::Service::call(&app, req);
            let ex = Arc::clone(&ex);
            async move {
                let answer = answer.await?;
                if answer.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                    ex.upgraded();
                }
                Ok::<_, std::convert::Infallible>(
                    answer.map(|body| idle::Tracked::answer(body, ex)),
                )
            }
        });
    let mut io = idle::Watched::new(stream, Arc::clone(&exchange));
    let mut opened = false;
    loop {
        if io.ahead.is_empty() {
            // Idle: the socket alone until the next request's first bytes.
            let had_one = used.load(Ordering::Relaxed);
            // The first bytes are peeked at (HTTP/2's preface?), later
            // ones only awaited; either within the idle bound.
            let mut head = [0u8; H2_PREFACE.len()];
            let first_bytes = async {
                if opened {
                    io.stream.readable().await.map(|()| None)
                } else {
                    io.stream.peek(&mut head).await.map(Some)
                }
            };
            set_idle(true);
            // Boxed: the wait's futures (some 500 bytes) would otherwise
            // size the connection's task, a streamed answer's included.
            let woke = Box::pin(async {
                tokio::select! {
                    ready = first_bytes => ready.ok(),
                    () = tokio::time::sleep(builders.idle) => None,
                    // At the cap: a connection that waits for a request (its
                    // first, or its next) is closed for a new one.
                    () = shed.cancelled() => {
                        tracing::debug!("a connection waiting for a request was closed to make room");
                        None
                    }
                    // Draining: an idle connection closes at once.
                    () = stop.cancelled(), if had_one => None,
                }
            })
            .await;
            let Some(peeked) = woke else {
                return;
            };
            set_idle(false);
            if let Some(n) = peeked {
                opened = true;
                if n == 0 {
                    return;
                }
                if head[..n] == H2_PREFACE[..n] {
                    // HTTP/2 (or too little yet to tell): as it comes.
                    // Boxed: every connection's task would carry its size.
                    let mut conn = Box::pin(builders.auto.serve_connection_with_upgrades(
                        hyper_util::rt::TokioIo::new(io.stream),
                        service,
                    ));
                    tokio::select! {
                        result = conn.as_mut() => return ended(result),
                        // At the cap, and it has asked nothing yet: closed for a new one.
                        () = shed.cancelled() => {
                            tracing::debug!("a connection that sent no request was closed to make room");
                            return;
                        }
                        () = stop.cancelled() => {}
                    }
                    if let Some(result) = until_first!(conn.as_mut(), used, first) {
                        return ended(result);
                    }
                    // Closed after the request in progress (at once when
                    // idle); HTTP/2: GOAWAY, the streams in progress finish.
                    conn.as_mut().graceful_shutdown();
                    return ended(conn.await);
                }
            }
        }
        let conn = builders
            .http1
            .serve_connection(hyper_util::rt::TokioIo::new(io), service)
            .with_upgrades();
        let mut conn = Box::new(conn);
        let parked = std::future::poll_fn(|cx| match std::pin::Pin::new(&mut *conn).poll(cx) {
            std::task::Poll::Ready(result) => std::task::Poll::Ready(Some(result)),
            std::task::Poll::Pending if exchange.take_parked() => std::task::Poll::Ready(None),
            std::task::Poll::Pending => std::task::Poll::Pending,
        });
        let outcome = tokio::select! {
            outcome = parked => outcome,
            () = shed.cancelled(), if !used.load(Ordering::Relaxed) => {
                tracing::debug!("a connection that sent no request was closed to make room");
                return;
            }
            () = stop.cancelled() => {
                let mut conn = std::pin::Pin::new(&mut *conn);
                if let Some(result) = until_first!(conn.as_mut(), used, first) {
                    return ended(result);
                }
                // Closed after the request in progress, at once when idle.
                conn.as_mut().graceful_shutdown();
                return ended(conn.await);
            }
        };
        match outcome {
            Some(result) => return ended(result),
            None => {
                // The exchange is over: hyper's connection is taken apart.
                let Some(parts) = conn.into_parts() else {
                    return;
                };
                tracing::trace!(ahead = parts.read_buf.len(), "a connection idles");
                exchange.reset();
                io = parts.io.into_inner();
                io.read_ahead(parts.read_buf);
                service = parts.service;
            }
        }
    }
}

/// How a connection ended, for the debug log.
fn ended<E: std::fmt::Display>(result: Result<(), E>) {
    if let Err(e) = result {
        tracing::debug!("connection ended: {e}");
    }
}

/// SIGHUP reloads; the first SIGTERM/SIGINT starts a graceful shutdown, a
/// second one ends the grace period at once.
#[cfg(unix)]
fn spawn_signal_handlers(
    reloader: Arc<Reloader>,
    stop: crate::http::Draining,
    force: CancellationToken,
) -> std::io::Result<()> {
    // `stop` starts the shutdown: draining first (see `drain`).
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let reloads = CancellationToken::new();
    let stop_reloads = reloads.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = hup.recv() => {
                    if r.is_none() { break; }
                    tracing::info!("SIGHUP: reloading the configuration");
                    reloader.reload(Trigger::Signal).await;
                }
                () = stop_reloads.cancelled() => break,
            }
        }
    });
    tokio::spawn(async move {
        let mut signals = 0;
        loop {
            let name = tokio::select! {
                r = term.recv() => { if r.is_none() { break; } "SIGTERM" }
                r = int.recv() => { if r.is_none() { break; } "SIGINT" }
            };
            signals += 1;
            if signals == 1 {
                tracing::info!("{name}: shutting down gracefully (send it again to stop at once)");
                reloads.cancel();
                stop.begin();
            } else {
                tracing::warn!("{name} again: stopping without waiting for requests in flight");
                force.cancel();
                break;
            }
        }
    });
    Ok(())
}

#[cfg(not(unix))]
fn spawn_signal_handlers(
    _reloader: Arc<Reloader>,
    stop: crate::http::Draining,
    _force: CancellationToken,
) -> std::io::Result<()> {
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.begin();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed answer's request holds its future (boxed) until the
    /// model's first answer arrives: at 10,000 open streams each byte is
    /// 10 KB. Admission (a JWT's verification, a shared rate check, the
    /// body's read and its timer) and each face's handler are boxed;
    /// inline, they made it 2,352 bytes.
    #[test]
    fn a_direct_request_s_future_is_small() {
        let size = crate::router::direct_future_size::<idle::Tracked<hyper::body::Incoming>>();
        assert!(size <= 1024, "a direct request's future is {size} bytes");
    }

    #[test]
    fn the_connection_cap_fits_the_files_and_memory_the_process_has() {
        // Plenty of both: the configured cap.
        assert_eq!(cap_for(4096, 1 << 20, Some(24 << 30)), 4096);
        // 200 files: (200 - 64) / 2.
        assert_eq!(cap_for(4096, 200, Some(24 << 30)), 68);
        // A 256 MiB container: half of it at 128 KiB a connection.
        assert_eq!(cap_for(4096, 1 << 20, Some(256 << 20)), 1024);
        // Nothing known about memory; never below one.
        assert_eq!(cap_for(4096, 1 << 20, None), 4096);
        assert_eq!(cap_for(4096, 10, Some(1)), 1);
        // The machine this runs on answers something.
        assert!(memory_limit().is_some_and(|m| m > 0));
    }
}
