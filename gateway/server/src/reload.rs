//! Hot reload: the catalog in service, swapped atomically for a new one
//! when the configuration changes.
//!
//! - [`Live`] holds the catalog in service (`ArcSwap`), its version and the
//!   outcome of the last reload. A request takes an `Arc<Catalog>` once and
//!   keeps it to the end, so a swap never changes a request in flight.
//! - [`Reloader::reload`] loads and validates the folder in full; an
//!   invalid configuration is logged (every diagnostic, with
//!   file:line:column) and the running catalog stays. A valid one takes
//!   over the sessions of MCP servers whose declaration did not change,
//!   starts the new servers (waiting for their first attempt, like `serve`
//!   does), and is swapped in. Servers the new catalog no longer declares
//!   (or declares differently) stop when the last request holding the old
//!   catalog ends. Reloads run one at a time.
//! - [`watch`] watches `toolgate.yaml`, `tools.d/` and `tool-sets/` and
//!   reloads once a burst of changes has settled ([`settle`]); a change
//!   that leaves every file's content as it was is not a reload.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use toolgate_config::ConfigErrors;
use toolgate_config::load::{GATEWAY_FILE, SETS_DIR, TOOLS_DIR};
use toolgate_engine::catalog::Catalog;

/// Loads and validates a configuration folder (the same way at start and
/// on every reload: same environment, same native tools).
pub type Loader = Arc<dyn Fn(&Path) -> Result<Catalog, ConfigErrors> + Send + Sync>;

/// What started a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A watched file changed.
    Watch,
    /// SIGHUP.
    Signal,
    /// A direct call (tests, embedding programs).
    Manual,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Trigger::Watch => "a file change",
            Trigger::Signal => "SIGHUP",
            Trigger::Manual => "a request",
        }
    }
}

/// How a reload ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// The new catalog is in service.
    Applied { version: u64 },
    /// The configuration is invalid; the old catalog stays.
    Failed { errors: usize },
    /// The files are as they were: nothing to do.
    Unchanged,
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Applied { .. } => "applied",
            Outcome::Failed { .. } => "failed",
            Outcome::Unchanged => "unchanged",
        }
    }
}

/// The last reload attempt, for `/healthz`.
#[derive(Debug, Clone, Serialize)]
struct Attempt {
    at: String,
    trigger: Trigger,
    #[serde(flatten)]
    outcome: Outcome,
}

/// The catalog in service.
#[derive(Debug)]
pub struct Live {
    current: ArcSwap<Catalog>,
    version: AtomicU64,
    loaded_at: Mutex<String>,
    last: Mutex<Option<Attempt>>,
    /// Every diagnostic of the last reload, when it failed.
    rejected: Mutex<Vec<toolgate_config::Diagnostic>>,
    /// The version, for those who wait for the next catalog.
    changes: tokio::sync::watch::Sender<u64>,
}

impl Live {
    /// Version 1: `catalog`.
    pub fn new(catalog: Arc<Catalog>) -> Live {
        toolgate_engine::support::metrics::record(|m| {
            m.config_version.set(1);
            m.config_last_reload_ok.set(1);
        });
        Live {
            current: ArcSwap::new(catalog),
            version: AtomicU64::new(1),
            loaded_at: Mutex::new(toolgate_engine::governance::audit::now_rfc3339()),
            last: Mutex::new(None),
            rejected: Mutex::new(Vec::new()),
            changes: tokio::sync::watch::Sender::new(1),
        }
    }

    /// The catalog in service; hold it for the whole request.
    pub fn load(&self) -> Arc<Catalog> {
        self.current.load_full()
    }

    /// The version of the catalog in service (1 at start).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// Wakes on every catalog put in service (its version).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Puts `catalog` in service; returns its version.
    fn swap(&self, catalog: Arc<Catalog>) -> u64 {
        self.current.store(catalog);
        let version = self.version.fetch_add(1, Ordering::SeqCst) + 1;
        *lock(&self.loaded_at) = toolgate_engine::governance::audit::now_rfc3339();
        toolgate_engine::support::metrics::record(|m| {
            m.config_version.set(i64::try_from(version).unwrap_or(0))
        });
        self.changes.send_replace(version);
        version
    }

    fn note(&self, trigger: Trigger, outcome: &Outcome) {
        if !matches!(outcome, Outcome::Failed { .. }) {
            lock(&self.rejected).clear();
        }
        *lock(&self.last) = Some(Attempt {
            at: toolgate_engine::governance::audit::now_rfc3339(),
            trigger,
            outcome: outcome.clone(),
        });
        toolgate_engine::support::metrics::record(|m| {
            m.reloads.with_label_values(&[outcome.label()]).inc();
            // Unchanged: the files are those of the catalog in service.
            m.config_last_reload_ok
                .set(i64::from(!matches!(outcome, Outcome::Failed { .. })));
        });
    }

    /// Every diagnostic (errors and warnings, with their positions and
    /// fixes) of the last reload when it failed; empty otherwise.
    pub fn rejected(&self) -> Vec<toolgate_config::Diagnostic> {
        lock(&self.rejected).clone()
    }

    /// `{version, loaded_at, last_reload}` for `/healthz`. Errors are
    /// counted here and detailed in the logs only: `/healthz` is open.
    pub fn report(&self) -> Value {
        json!({
            "version": self.version(),
            "loaded_at": *lock(&self.loaded_at),
            "last_reload": *lock(&self.last),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Reloads the configuration folder into a [`Live`] catalog.
pub struct Reloader {
    live: Arc<Live>,
    loader: Loader,
    dir: PathBuf,
    /// Digest of the files of the catalog in service; held while
    /// reloading, so reloads run one at a time.
    files: tokio::sync::Mutex<[u8; 32]>,
    /// Where new MCP servers' sessions run (see `McpRegistry::start_on`).
    sessions_on: Vec<tokio::runtime::Handle>,
    /// Where the replicas agree on MCP pins (`state.redis`), for servers
    /// a reload declares.
    pins: Option<Arc<dyn toolgate_engine::tools::tool::mcp::PinStore>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").field("dir", &self.dir).finish()
    }
}

impl Reloader {
    /// A reloader of `dir` into `live`, whose catalog was loaded from the
    /// files as they are now.
    /// `sessions_on`: the runtimes new MCP servers' sessions run on, in
    /// turn (the current one when empty).
    pub fn new(
        live: Arc<Live>,
        loader: Loader,
        dir: PathBuf,
        sessions_on: Vec<tokio::runtime::Handle>,
    ) -> Reloader {
        let files = fingerprint(&dir);
        Reloader {
            live,
            loader,
            dir,
            files: tokio::sync::Mutex::new(files),
            sessions_on,
            pins: None,
        }
    }

    /// Has the MCP servers of reloaded catalogs agree on pins in `store`.
    pub fn with_pins(
        mut self,
        store: Option<Arc<dyn toolgate_engine::tools::tool::mcp::PinStore>>,
    ) -> Reloader {
        self.pins = store;
        self
    }

    /// The catalog in service.
    pub fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// The configuration folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Loads the folder and, when it is valid, puts it in service. A watch
    /// trigger with every file as it was does nothing.
    pub async fn reload(&self, trigger: Trigger) -> Outcome {
        let mut files = self.files.lock().await;
        let began = Instant::now();
        let dir = self.dir.clone();
        let loader = Arc::clone(&self.loader);
        let in_service = *files;
        let loaded = tokio::task::spawn_blocking(move || {
            let digest = fingerprint(&dir);
            let unchanged = trigger == Trigger::Watch && digest == in_service;
            let loaded = (!unchanged).then(|| {
                let loaded = loader(&dir);
                toolgate_alloc::release_free_memory();
                loaded
            });
            (digest, loaded)
        })
        .await;
        let (digest, result) = match loaded {
            Ok((digest, Some(result))) => (digest, result),
            Ok((_, None)) => {
                tracing::debug!("configuration files unchanged; nothing to reload");
                let outcome = Outcome::Unchanged;
                self.live.note(trigger, &outcome);
                return outcome;
            }
            Err(e) => {
                tracing::error!("reloading the configuration failed: {e}");
                lock(&self.live.rejected).clear();
                let outcome = Outcome::Failed { errors: 1 };
                self.live.note(trigger, &outcome);
                return outcome;
            }
        };
        let outcome = match result {
            Err(errors) => {
                let n = errors.errors().count();
                tracing::error!(
                    "the configuration in {} is invalid ({n} error{}); still serving version {}",
                    self.dir.display(),
                    if n == 1 { "" } else { "s" },
                    self.live.version()
                );
                for d in &errors.diagnostics {
                    if d.is_error() {
                        tracing::error!("{d}");
                    } else {
                        tracing::warn!("{d}");
                    }
                }
                *lock(&self.live.rejected) = errors.diagnostics.clone();
                Outcome::Failed { errors: n }
            }
            Ok(mut catalog) => {
                let old = self.live.load();
                let pending = restart_only_changes(&old.settings, &catalog.settings);
                if !pending.is_empty() {
                    tracing::warn!(
                        "changed settings that take effect at the next restart: {}",
                        pending.join(", ")
                    );
                }
                let kept = catalog.adopt_mcp_sessions(&old);
                if let Some(store) = &self.pins {
                    catalog.mcp().share_pins(store);
                }
                catalog.mcp().start_on(&self.sessions_on).await;
                for w in &catalog.warnings {
                    tracing::warn!("{w}");
                }
                let summary = catalog.summary();
                let version = self.live.swap(Arc::new(catalog));
                *files = digest;
                tracing::info!(
                    version,
                    ms = began.elapsed().as_millis() as u64,
                    "configuration reloaded after {}: {summary}{}",
                    trigger.label(),
                    if kept.is_empty() {
                        String::new()
                    } else {
                        format!("; MCP sessions kept: {}", kept.join(", "))
                    }
                );
                Outcome::Applied { version }
            }
        };
        self.live.note(trigger, &outcome);
        outcome
    }
}

/// Settings read once at start: what changed among them.
fn restart_only_changes(
    old: &toolgate_config::GatewayFile,
    new: &toolgate_config::GatewayFile,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    if old.listen != new.listen {
        out.push("listen");
    }
    if old.limits.max_request_bytes != new.limits.max_request_bytes {
        out.push("limits.max_request_bytes");
    }
    if serde_json::to_value(&old.audit).ok() != serde_json::to_value(&new.audit).ok() {
        out.push("audit");
    }
    if serde_json::to_value(&old.reload).ok() != serde_json::to_value(&new.reload).ok() {
        out.push("reload");
    }
    if serde_json::to_value(&old.state).ok() != serde_json::to_value(&new.state).ok() {
        out.push("state");
    }
    if serde_json::to_value(&old.telemetry).ok() != serde_json::to_value(&new.telemetry).ok() {
        out.push("telemetry");
    }
    if old.console.recent_calls != new.console.recent_calls
        || (!old.console.enabled && new.console.enabled)
    {
        out.push(
            "console (its recent calls are kept from the start of a gateway whose console is on)",
        );
    }
    out
}

/// SHA-256 over the names and contents of the configuration files.
fn fingerprint(dir: &Path) -> [u8; 32] {
    let mut files = vec![dir.join(GATEWAY_FILE)];
    for sub in [TOOLS_DIR, SETS_DIR] {
        if let Ok(entries) = std::fs::read_dir(dir.join(sub)) {
            files.extend(
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| is_yaml(p)),
            );
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        h.update(f.to_string_lossy().as_bytes());
        h.update([0]);
        match std::fs::read(&f) {
            Ok(bytes) => {
                h.update((bytes.len() as u64).to_le_bytes());
                h.update(&bytes);
            }
            Err(_) => h.update(u64::MAX.to_le_bytes()),
        }
    }
    h.finalize().into()
}

fn is_yaml(p: &Path) -> bool {
    matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

/// Waits for a change, then until `quiet` has passed without another one
/// (at most `20 × quiet` in all, so a file rewritten forever still gets
/// reloaded). `false` once the senders are gone.
pub async fn settle(rx: &mut mpsc::Receiver<()>, quiet: Duration) -> bool {
    if rx.recv().await.is_none() {
        return false;
    }
    let deadline = tokio::time::Instant::now() + quiet * 20;
    loop {
        let wait = quiet.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, rx.recv()).await {
            Ok(Some(())) if tokio::time::Instant::now() < deadline => continue,
            _ => return true,
        }
    }
}

/// A running watch; dropping it stops watching.
#[derive(Debug)]
pub struct WatchHandle {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches the configuration folder of `reloader` and reloads once each
/// burst of changes has been quiet for `quiet`.
pub fn watch(reloader: Arc<Reloader>, quiet: Duration) -> Result<WatchHandle, notify::Error> {
    use notify::Watcher;
    let root = reloader
        .dir()
        .canonicalize()
        .unwrap_or_else(|_| reloader.dir().to_owned());
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let filter_root = root.clone();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if relevant(&filter_root, &event) => {
                // A full queue already holds a change to handle.
                let _ = tx.try_send(());
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("watching the configuration: {e}"),
        })?;
    watcher.watch(&root, notify::RecursiveMode::NonRecursive)?;
    let watch_folders = move |watcher: &mut notify::RecommendedWatcher| {
        for sub in [TOOLS_DIR, SETS_DIR] {
            let folder = root.join(sub);
            if folder.is_dir()
                && let Err(e) = watcher.watch(&folder, notify::RecursiveMode::NonRecursive)
            {
                tracing::warn!("cannot watch {}: {e}", folder.display());
            }
        }
    };
    watch_folders(&mut watcher);
    tracing::info!(
        "watching {} for configuration changes",
        reloader.dir().display()
    );
    let task = tokio::spawn(async move {
        while settle(&mut rx, quiet).await {
            // A folder created (or re-created) since is watched from now on.
            watch_folders(&mut watcher);
            reloader.reload(Trigger::Watch).await;
        }
    });
    Ok(WatchHandle { task })
}

/// `true` for a change to `toolgate.yaml`, to a YAML file directly in
/// `tools.d/` or `tool-sets/`, to one of those folders, or to a ConfigMap
/// volume's `..data` link.
fn relevant(root: &Path, event: &notify::Event) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    let kind = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Modify(_)
            | EventKind::Remove(_)
            | EventKind::Any
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
    );
    kind && event.paths.iter().any(|p| relevant_path(root, p))
}

fn relevant_path(root: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    let parts: Vec<&std::ffi::OsStr> = rel.iter().collect();
    match parts.as_slice() {
        // `..data`: a Kubernetes ConfigMap volume is updated by pointing
        // this symlink at a new folder (the files themselves, symlinks
        // through it, do not change).
        [name] => {
            *name == GATEWAY_FILE || *name == TOOLS_DIR || *name == SETS_DIR || *name == "..data"
        }
        [folder, _] => (*folder == TOOLS_DIR || *folder == SETS_DIR) && is_yaml(rel),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_changes_is_one_reload() {
        let (tx, mut rx) = mpsc::channel(1);
        let producer = tokio::spawn(async move {
            // Ten writes 20 ms apart: one burst.
            for _ in 0..10 {
                let _ = tx.try_send(());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Quiet for a second, then another burst of three.
            tokio::time::sleep(Duration::from_secs(1)).await;
            for _ in 0..3 {
                let _ = tx.try_send(());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        let mut reloads = 0;
        while settle(&mut rx, Duration::from_millis(300)).await {
            reloads += 1;
        }
        assert!(producer.await.is_ok());
        assert_eq!(reloads, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn endless_changes_still_reload() {
        let (tx, mut rx) = mpsc::channel(1);
        let _producer = tokio::spawn(async move {
            loop {
                if tx.send(()).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        assert!(settle(&mut rx, Duration::from_millis(100)).await);
    }

    #[test]
    fn only_configuration_files_matter() {
        let root = Path::new("/cfg");
        assert!(relevant_path(root, Path::new("/cfg/toolgate.yaml")));
        assert!(relevant_path(root, Path::new("/cfg/tools.d/a.yaml")));
        assert!(relevant_path(root, Path::new("/cfg/tool-sets/b.yml")));
        assert!(relevant_path(root, Path::new("/cfg/tools.d")));
        // A ConfigMap volume's update swaps this link.
        assert!(relevant_path(root, Path::new("/cfg/..data")));
        assert!(!relevant_path(root, Path::new("/cfg/..2026_11_25_01")));
        assert!(!relevant_path(root, Path::new("/cfg/tools.d/.a.yaml.swp")));
        assert!(!relevant_path(root, Path::new("/cfg/workspace/notes.yaml")));
        assert!(!relevant_path(root, Path::new("/cfg/audit.log")));
        assert!(!relevant_path(root, Path::new("/elsewhere/toolgate.yaml")));
    }
}
