//! What every handler shares: the live catalog, the executor, the caps
//! and rate limits, the shared state, and whether the gateway is draining
//! or stopping.

use std::sync::Arc;

use crate::reload::Live;
use toolgate_engine::catalog::Catalog;
use toolgate_engine::executor::Executor;
use toolgate_engine::governance::limits::Guards;

/// What every handler shares. Every layer and handler of every request
/// takes a clone: one reference count.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

/// The contents of an [`AppState`].
#[derive(Debug)]
pub struct Shared {
    live: Arc<Live>,
    pub executor: Executor,
    /// Formatters learned in `auto` mode; outlives catalog reloads.
    pub learned: Arc<toolgate_engine::model::formatter::Learned>,
    /// Caps on concurrent loops and streams, per-key rate limits.
    pub guards: Arc<Guards>,
    /// Model targets' health, and which made which opaque state; outlives
    /// catalog reloads.
    pub router: Arc<toolgate_engine::model::routing::Router>,
    /// Cancelled when the gateway begins to stop: ends MCP sessions and
    /// their streams.
    pub stopping: tokio_util::sync::CancellationToken,
    /// Begun at SIGTERM, before `stopping`: `/readyz` answers 503 and
    /// every answer closes its connection while the gateway still serves
    /// (`shutdown.drain_delay`).
    pub draining: Draining,
    /// The shared state (`state.redis`), when configured.
    pub shared: Option<Arc<toolgate_engine::support::shared::Redis>>,
    /// Responses kept for `previous_response_id` and `GET /v1/responses/{id}`.
    pub conversations: toolgate_engine::chat::stored::Conversations,
    /// What was spent, and budgets' counts (in `spend.store`, or Redis);
    /// outlives catalog reloads.
    pub spend: Arc<toolgate_engine::governance::spend::Spend>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// State serving `catalog`, which never changes.
    pub fn new(catalog: Arc<Catalog>, executor: Executor) -> Self {
        Self::with_live(Arc::new(Live::new(catalog)), executor)
    }

    /// State serving whatever catalog `live` holds (reloads swap it).
    pub fn with_live(live: Arc<Live>, executor: Executor) -> Self {
        Self::with_shared(live, executor, None)
    }

    /// The same, with rate-limit buckets, result caches and learned
    /// formatters kept in `shared` when given.
    pub fn with_shared(
        live: Arc<Live>,
        executor: Executor,
        shared: Option<Arc<toolgate_engine::support::shared::Redis>>,
    ) -> Self {
        use toolgate_engine::model::formatter::Learned;
        let (guards, learned) = match &shared {
            Some(redis) => (
                Guards::shared(Arc::clone(redis)),
                Learned::shared(Arc::clone(redis)),
            ),
            None => (Guards::default(), Learned::default()),
        };
        let guards = Arc::new(guards);
        let executor = if executor.has_rate_limits() {
            executor
        } else {
            executor.with_rate_limits(Arc::clone(&guards.rates))
        };
        let spend = toolgate_engine::governance::spend::Spend::open(
            live.load().spend.store.clone(),
            shared.clone(),
        );
        let executor = executor
            .with_shared(shared.clone())
            .with_spend(Arc::clone(&spend));
        AppState(Arc::new(Shared {
            spend,
            live,
            executor,
            learned: Arc::new(learned),
            router: Arc::new(toolgate_engine::model::routing::Router::new(shared.clone())),
            guards,
            stopping: tokio_util::sync::CancellationToken::new(),
            draining: Draining::default(),
            conversations: toolgate_engine::chat::stored::Conversations::default()
                .with_shared(shared.clone()),
            shared,
        }))
    }
}

/// Whether the gateway is draining: read on every answer, so a flag (one
/// atomic load) next to the token its waiters await (whose own check
/// takes a lock).
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<DrainingState>);

#[derive(Debug, Default)]
struct DrainingState {
    begun: std::sync::atomic::AtomicBool,
    token: tokio_util::sync::CancellationToken,
}

impl Draining {
    /// Starts draining (again: no effect).
    pub fn begin(&self) {
        self.0
            .begun
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.token.cancel();
    }

    pub fn is_draining(&self) -> bool {
        self.0.begun.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves once draining has begun.
    pub async fn begun(&self) {
        self.0.token.cancelled().await;
    }
}

impl Shared {
    /// What the engine's loops run with.
    pub fn services(&self) -> toolgate_engine::chat::Services {
        toolgate_engine::chat::Services {
            executor: self.executor.clone(),
            learned: Arc::clone(&self.learned),
            guards: Arc::clone(&self.guards),
            router: Arc::clone(&self.router),
            spend: Arc::clone(&self.spend),
        }
    }

    /// The catalog a request works with, from start to end: take it once.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.live.load()
    }

    /// The catalog in service, its version and the last reload.
    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }
}
