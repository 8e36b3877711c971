//! A catalog's MCP servers ([`McpRegistry`]): a snapshot of what they offer
//! (per caller where a server lists to each), rebuilt on every change, and
//! the requests other than tool calls (prompts, resources, completions).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use indexmap::IndexMap;
use rmcp::ServiceError;
use toolgate_config::Pos;

use crate::call::{handing_back, request_options};
use crate::errors::{in_words, needs_token};
use crate::session::{self, Owner, Server, Status};
use crate::spec::{self, ServerSpec};
use crate::{Offer, extras, relay};

/// A tool the registry cannot offer now, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The tool's name, or `mcp:<server>` while the server's tools are
    /// unknown (it never listed them).
    pub name: String,
    pub server: String,
    pub reason: String,
    pub origin: String,
}

/// An exact tool name a tool set expects from MCP servers; checked once
/// they have listed their tools.
#[derive(Debug, Clone)]
pub struct Expected {
    pub name: String,
    pub set: String,
    pub file: String,
    pub pos: Pos,
    /// The servers that could offer it.
    pub servers: Vec<String>,
}

impl Expected {
    /// The missing name in words, with where the set names it.
    fn describe(&self) -> String {
        format!(
            "{}:{}:{}: tool set `{}` names `{}`, which no MCP server offers ({})",
            self.file,
            self.pos.line,
            self.pos.column,
            self.set,
            self.name,
            self.servers.join(", ")
        )
    }
}

/// What the gateway currently offers from its MCP servers.
struct Snapshot<T> {
    tools: IndexMap<String, Arc<T>>,
    gaps: IndexMap<String, Gap>,
    /// Prompts by the gateway's name: the server (its index), the
    /// server's name, and the prompt under the gateway's name.
    prompts: IndexMap<String, (usize, String, rmcp::model::Prompt)>,
    /// Resources by URI: the server serving it (the first to list it).
    resources: IndexMap<String, (usize, rmcp::model::Resource)>,
    /// Resource templates, the first declared server's first.
    templates: Vec<(usize, rmcp::model::ResourceTemplate)>,
    /// In a caller's view: the per-caller servers (their index) whose
    /// lists are the ones they listed to that caller, and whose requests
    /// go over the caller's own session.
    own: Vec<usize>,
}

impl<T> Default for Snapshot<T> {
    fn default() -> Self {
        Snapshot {
            tools: IndexMap::new(),
            gaps: IndexMap::new(),
            prompts: IndexMap::new(),
            resources: IndexMap::new(),
            templates: Vec::new(),
            own: Vec::new(),
        }
    }
}

impl<T> Snapshot<T> {
    /// The server (its index) that answers `what`.
    fn index_for(&self, what: &Asked<'_>) -> Option<usize> {
        match what {
            Asked::Prompt(name) => self.prompts.get(*name).map(|(i, _, _)| *i),
            Asked::Resource(uri) => self.resources.get(*uri).map(|(i, _)| *i).or_else(|| {
                self.templates
                    .iter()
                    .find(|(_, t)| extras::template_matches(&t.uri_template, uri))
                    .map(|(i, _)| *i)
            }),
            Asked::Template(template) => self
                .templates
                .iter()
                .find(|(_, t)| t.uri_template == *template)
                .map(|(i, _)| *i),
            // A name is the registry's to look up (`McpRegistry::index_of`).
            Asked::Server(_) => None,
        }
    }
}

/// What a request other than a tool call asks of the servers.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// A prompt, by the gateway's name.
    Prompt(&'a str),
    /// A resource, by URI (listed, or described by a template).
    Resource(&'a str),
    /// A resource template, by its URI template (completions).
    Template(&'a str),
    /// A server, by name (a task it runs).
    Server(&'a str),
}

/// Why a request other than a tool call failed: the error in MCP's terms,
/// and whether the server refused the caller's token (at a per-caller
/// server; the gateway may renew it and ask again).
#[derive(Debug, Clone)]
pub struct AskError {
    pub error: rmcp::ErrorData,
    pub refused: bool,
}

impl From<rmcp::ErrorData> for AskError {
    fn from(error: rmcp::ErrorData) -> Self {
        AskError {
            error,
            refused: false,
        }
    }
}

impl From<AskError> for rmcp::ErrorData {
    fn from(e: AskError) -> Self {
        e.error
    }
}

/// The declared servers and the snapshot of their tools. Dropping it (the
/// last catalog holding it) stops the servers no newer registry took over.
pub(crate) struct Registry<T> {
    servers: Vec<Arc<Server<T>>>,
    /// Names of the catalog's other tools, which win over MCP tools, with
    /// where they are declared.
    reserved: HashMap<String, String>,
    expected: Vec<Expected>,
    snapshot: ArcSwap<Snapshot<T>>,
    /// Bumped after every rebuild of the snapshot.
    published: tokio::sync::watch::Sender<u64>,
    /// Serialises the rebuilding of the snapshot.
    publishing: Mutex<()>,
    started: std::sync::atomic::AtomicBool,
}

impl<T> Drop for Registry<T> {
    fn drop(&mut self) {
        for server in &self.servers {
            server.release();
        }
    }
}

impl<T: Offer> Owner for Registry<T> {
    fn publish(&self) {
        Registry::publish(self);
    }
}

impl<T> Registry<T> {
    /// Rebuilds the snapshot from every server's state, in declaration
    /// order: the first tool to claim a name keeps it (the catalog's own
    /// tools first), later ones are reported as colliding.
    pub(crate) fn publish(&self) {
        let _guard = self
            .publishing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let snapshot = self.compose(&[]);
        let old = self.snapshot.load();
        for (name, g) in &snapshot.gaps {
            if old.gaps.get(name) != Some(g) && g.reason.contains("collides") {
                tracing::warn!(mcp_server = %g.server, "tool `{name}` is unavailable: {}", g.reason);
            }
        }
        self.snapshot.store(Arc::new(snapshot));
        self.published.send_modify(|n| *n += 1);
    }

    /// What the servers offer, in declaration order (the first tool to
    /// claim a name keeps it, the catalog's own tools first). A server with
    /// a listing in `theirs` (by index: what a per-caller server listed to
    /// one caller) offers that listing; every other, its state's.
    fn compose(&self, theirs: &[Option<session::UserListing<T>>]) -> Snapshot<T> {
        let mut tools: IndexMap<String, Arc<T>> = IndexMap::new();
        let mut owner: HashMap<String, String> = HashMap::new();
        let mut gaps: IndexMap<String, Gap> = IndexMap::new();
        let mut prompts = IndexMap::new();
        let mut resources = IndexMap::new();
        let mut templates = Vec::new();
        let mut own = Vec::new();
        for (index, server) in self.servers.iter().enumerate() {
            let spec = &server.spec;
            let state = server.state();
            let origin = spec.origin();
            let gap = |name: &str, reason: String| Gap {
                name: name.to_owned(),
                server: spec.name.clone(),
                reason,
                origin: origin.clone(),
            };
            let offered = match theirs.get(index) {
                Some(Some(listing)) => {
                    own.push(index);
                    Some((&listing.tools, &listing.extras))
                }
                _ if state.status == Status::Ready => Some((&state.listed, &state.extras)),
                _ => None,
            };
            if let Some((listed, extras)) = offered {
                offer_extras(
                    index,
                    spec,
                    extras,
                    &mut prompts,
                    &mut resources,
                    &mut templates,
                );
                for l in listed.iter() {
                    let taken = self
                        .reserved
                        .get(&l.name)
                        .map(|at| format!("tool `{}` declared at {at}", l.name))
                        .or_else(|| {
                            owner.get(&l.name).map(|s| {
                                format!("tool `{}` of MCP server `{s}`, declared earlier", l.name)
                            })
                        });
                    match (&l.tool, taken) {
                        (Ok(_), Some(other)) | (Err(_), Some(other)) => {
                            gaps.entry(l.name.clone()).or_insert_with(|| {
                                gap(
                                    &l.name,
                                    format!(
                                        "the name collides with the {other} — give MCP server `{}` a distinct `tools.prefix` or exclude the tool",
                                        spec.name
                                    ),
                                )
                            });
                        }
                        (Ok(tool), None) => {
                            owner.insert(l.name.clone(), spec.name.clone());
                            tools.insert(l.name.clone(), Arc::clone(tool));
                        }
                        (Err(reason), None) => {
                            gaps.entry(l.name.clone())
                                .or_insert_with(|| gap(&l.name, reason.clone()));
                        }
                    }
                }
                continue;
            }
            let reason = state.reason(&spec.name);
            let mut names: Vec<String> = state.listed.iter().map(|l| l.name.clone()).collect();
            if names.is_empty() {
                names = spec.tools.known_names().unwrap_or_default();
            }
            if names.is_empty() {
                let name = format!("mcp:{}", spec.name);
                gaps.insert(
                    name.clone(),
                    gap(
                        &name,
                        format!("{reason}; its tools are unknown until it lists them"),
                    ),
                );
            }
            for name in names {
                if !self.reserved.contains_key(&name) && !owner.contains_key(&name) {
                    gaps.entry(name.clone())
                        .or_insert_with(|| gap(&name, reason.clone()));
                }
            }
        }
        Snapshot {
            tools,
            gaps,
            prompts,
            resources,
            templates,
            own,
        }
    }

    fn server(&self, name: &str) -> Option<&Arc<Server<T>>> {
        self.servers.iter().find(|s| s.spec.name == name)
    }
}

/// Adds a ready server's prompts (renamed like its tools; the first to
/// claim a name keeps it), resources (the first to list a URI serves it)
/// and templates to the snapshot being built.
fn offer_extras(
    index: usize,
    spec: &ServerSpec,
    extras: &extras::Extras,
    prompts: &mut IndexMap<String, (usize, String, rmcp::model::Prompt)>,
    resources: &mut IndexMap<String, (usize, rmcp::model::Resource)>,
    templates: &mut Vec<(usize, rmcp::model::ResourceTemplate)>,
) {
    for p in &extras.prompts {
        match spec.tools.local_name(&p.name) {
            Ok(name) if !prompts.contains_key(&name) => {
                let mut offered = p.clone();
                offered.name.clone_from(&name);
                prompts.insert(name, (index, p.name.clone(), offered));
            }
            Ok(name) => {
                tracing::debug!(mcp_server = %spec.name, "prompt `{name}` of MCP server `{}` is served by an earlier server", spec.name)
            }
            Err(reason) => {
                tracing::debug!(mcp_server = %spec.name, "prompt `{}` of MCP server `{}` is not offered: {reason}", p.name, spec.name)
            }
        }
    }
    let (offered, offered_templates) = extras::offered(&spec.name, extras);
    for r in offered {
        resources.entry(r.uri.clone()).or_insert((index, r));
    }
    templates.extend(offered_templates.into_iter().map(|t| (index, t)));
}

/// How long a request other than a tool call (`prompts/get`,
/// `resources/read`...) may take when the server sets no `timeout`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The MCP servers of a catalog. Cheap to clone: clones share the servers.
pub struct McpRegistry<T> {
    inner: Arc<Registry<T>>,
}

impl<T> Clone for McpRegistry<T> {
    fn clone(&self) -> Self {
        McpRegistry {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T> std::fmt::Debug for McpRegistry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRegistry")
            .field(
                "servers",
                &self
                    .inner
                    .servers
                    .iter()
                    .map(|s| &s.spec)
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<T: Offer> Default for McpRegistry<T> {
    fn default() -> Self {
        McpRegistry::new(Vec::new(), HashMap::new(), Vec::new())
    }
}

impl<T: Offer> McpRegistry<T> {
    /// A registry of validated servers, none started. `reserved` maps the
    /// names of the catalog's other tools to where they are declared.
    pub fn new(
        specs: Vec<ServerSpec>,
        reserved: HashMap<String, String>,
        expected: Vec<Expected>,
    ) -> McpRegistry<T> {
        let inner = Arc::new(Registry {
            servers: specs
                .into_iter()
                .map(|s| Arc::new(Server::new(s)))
                .collect(),
            reserved,
            expected,
            snapshot: ArcSwap::from_pointee(Snapshot::default()),
            published: tokio::sync::watch::Sender::new(0),
            publishing: Mutex::new(()),
            started: std::sync::atomic::AtomicBool::new(false),
        });
        inner.publish();
        McpRegistry { inner }
    }

    /// Takes over, from `previous` (the registry of the catalog in service),
    /// every server declared the same way here: its supervisor and session
    /// go on, and this registry offers its tools at once. Must be called
    /// before this registry is cloned or started (the servers learn which
    /// registries hold them when those start). Returns the names of the
    /// servers taken over.
    pub fn adopt(&mut self, previous: &McpRegistry<T>) -> Vec<String> {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            tracing::warn!("MCP sessions cannot be kept: the new catalog is already in use");
            return Vec::new();
        };
        let mut kept = Vec::new();
        let mut taken = Vec::new();
        for slot in &mut inner.servers {
            let Some(old) = previous
                .inner
                .servers
                .iter()
                .find(|o| o.spec.same_declaration(&slot.spec) && !o.stop.is_cancelled())
            else {
                continue;
            };
            *slot = Arc::clone(old);
            kept.push(old.spec.name.clone());
            taken.push(Arc::clone(old));
        }
        let weak = Arc::downgrade(&self.inner);
        for server in taken {
            server.add_owner(weak.clone());
        }
        self.inner.publish();
        kept
    }

    /// Wakes whenever the tools the servers offer may have changed (a
    /// server listed its tools, went down or came back). It holds no
    /// reference to the registry.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.published.subscribe()
    }

    /// Each server's name and whether it is ready, for metrics.
    pub fn health(&self) -> Vec<(String, bool)> {
        self.inner
            .servers
            .iter()
            .map(|s| (s.spec.name.clone(), s.state().status == Status::Ready))
            .collect()
    }

    /// The URL and `oauth` of the HTTP server `name`, for `toolgate mcp
    /// login`; `Err` says why there is none.
    pub fn oauth_of(&self, name: &str) -> Result<(String, spec::OAuthSpec), String> {
        let server = self
            .inner
            .servers
            .iter()
            .find(|s| s.spec.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self
                    .inner
                    .servers
                    .iter()
                    .map(|s| s.spec.name.as_str())
                    .collect();
                format!(
                    "no MCP server is named `{name}`; the configuration declares: {}",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        names.join(", ")
                    }
                )
            })?;
        if let Some(why) = &server.spec.disabled {
            return Err(format!("MCP server `{name}` is disabled: {why}"));
        }
        match &server.spec.transport {
            spec::Transport::Http(http) => match &http.oauth {
                Some(oauth) => Ok((http.url.clone(), oauth.clone())),
                None => Err(format!(
                    "MCP server `{name}` has no `oauth`: add `oauth: {{grant: authorization_code}}` to authorize the gateway with a login"
                )),
            },
            spec::Transport::Stdio(_) => Err(format!(
                "MCP server `{name}` runs over stdio: OAuth is for servers over HTTP"
            )),
        }
    }

    /// Why each server declared `required` is not ready, if it is not.
    pub fn required_not_ready(&self) -> Vec<String> {
        self.inner
            .servers
            .iter()
            .filter(|s| s.spec.required)
            .filter_map(|s| {
                let state = s.state();
                (state.status != Status::Ready).then(|| state.reason(&s.spec.name))
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.servers.is_empty()
    }

    /// How many servers are declared.
    pub fn len(&self) -> usize {
        self.inner.servers.len()
    }

    /// Starts every server (once; later calls only wait) and waits until
    /// each has finished its first attempt: ready, or failed and scheduled
    /// for a restart. Each wait is bounded by the server's
    /// `startup_timeout`. Must run inside a Tokio runtime.
    pub async fn start(&self) {
        self.start_on(&[]).await;
    }

    /// As [`start`](Self::start), with each server's session (its
    /// supervisor, rmcp's service loop and the transport's I/O) on one of
    /// `runtimes`, taken in turn, or on the current runtime when there are
    /// none. A gateway serving each connection on a thread of its own puts
    /// the sessions on those threads: a call from a connection of the
    /// session's thread then wakes no other thread.
    pub async fn start_on(&self, runtimes: &[tokio::runtime::Handle]) {
        /// Whose turn it is, over every registry of the process: a
        /// reload's new servers do not all go to the first runtime.
        static TURN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let first = !self
            .inner
            .started
            .swap(true, std::sync::atomic::Ordering::SeqCst);
        for server in &self.inner.servers {
            server.add_owner(Arc::<Registry<T>>::downgrade(&self.inner));
            // Servers taken over from a previous catalog already run.
            if server.claim_supervision() {
                let supervise = session::supervise(Arc::clone(server));
                if runtimes.is_empty() {
                    tokio::spawn(supervise);
                } else {
                    let turn = TURN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    runtimes[turn % runtimes.len()].spawn(supervise);
                }
            }
        }
        let waits = self.inner.servers.iter().map(|s| async move {
            let bound = s.spec.startup_timeout + Duration::from_secs(1);
            let _ = tokio::time::timeout(
                bound,
                s.wait_until(|st| {
                    !matches!(st.status, Status::NotStarted | Status::Starting) || st.attempts > 1
                }),
            )
            .await;
        });
        futures::future::join_all(waits).await;
        if first {
            for e in self.missing_expected() {
                tracing::warn!("{}", e.describe());
            }
        }
    }

    /// Stops every server and waits (briefly) until they have closed.
    pub async fn shutdown(&self) {
        for server in &self.inner.servers {
            server.stop.cancel();
        }
        let waits = self.inner.servers.iter().map(|s| {
            tokio::time::timeout(
                Duration::from_secs(10),
                s.wait_until(|st| {
                    matches!(
                        st.status,
                        Status::Stopped | Status::NotStarted | Status::Disabled { .. }
                    )
                }),
            )
        });
        futures::future::join_all(waits).await;
    }

    /// Waits until the server `name` is ready (forever if it never is);
    /// `false` when no such server is declared.
    pub async fn wait_ready(&self, name: &str) -> bool {
        let Some(server) = self.inner.server(name) else {
            return false;
        };
        server.wait_until(|st| st.status == Status::Ready).await;
        true
    }

    /// The usable MCP tool called `name`.
    pub fn tool(&self, name: &str) -> Option<Arc<T>> {
        self.inner.snapshot.load().tools.get(name).cloned()
    }

    /// The usable MCP tools whose name `keep` accepts, in order.
    pub fn tools(&self, keep: &dyn Fn(&str) -> bool) -> Vec<Arc<T>> {
        self.inner
            .snapshot
            .load()
            .tools
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(_, t)| Arc::clone(t))
            .collect()
    }

    /// `true` when a server is called as each caller (`credentials`).
    pub fn has_per_caller(&self) -> bool {
        self.inner.servers.iter().any(|s| s.spec.per_caller())
    }

    /// The servers called as each caller (`credentials`), by name, with
    /// whose token they take.
    pub fn per_caller(&self) -> Vec<(String, toolgate_config::format::CredentialsDecl)> {
        self.inner
            .servers
            .iter()
            .filter(|s| s.spec.disabled.is_none())
            .filter_map(|s| {
                s.spec
                    .credentials()
                    .map(|how| (s.spec.name.clone(), how.clone()))
            })
            .collect()
    }

    /// Has the per-caller server `server` list its tools to the caller
    /// `subject`, in their own session opened with `token`, unless their
    /// listing is fresh. From then on the tools `subject` is offered from
    /// that server are the ones it listed to them ([`tools_as`](Self::tools_as)).
    ///
    /// `Err((why, refused))`: `refused` when the server refused the token.
    pub async fn list_as(
        &self,
        server: &str,
        subject: &str,
        token: &str,
    ) -> Result<(), (String, bool)> {
        let Some(server) = self.inner.server(server).filter(|s| s.spec.per_caller()) else {
            return Err((
                format!("no MCP server `{server}` is called as each caller"),
                false,
            ));
        };
        server.user_listing(subject, token).await.map(|_| ())
    }

    /// What `caller` (a subject) is offered: when a per-caller server has
    /// listed its tools, prompts and resources to them, that server's are
    /// the ones it listed to them, not the gateway's listing; otherwise
    /// the shared snapshot.
    fn seen_by(&self, caller: Option<&str>) -> Arc<Snapshot<T>> {
        let snapshot = self.inner.snapshot.load_full();
        let Some(caller) = caller else {
            return snapshot;
        };
        let theirs: Vec<Option<session::UserListing<T>>> = self
            .inner
            .servers
            .iter()
            .map(|s| {
                if s.spec.per_caller() {
                    s.user_listed(caller)
                } else {
                    None
                }
            })
            .collect();
        if theirs.iter().all(Option::is_none) {
            return snapshot;
        }
        Arc::new(self.inner.compose(&theirs))
    }

    /// The usable MCP tool called `name`, as `caller` sees it (see
    /// [`tools_as`](Self::tools_as)).
    pub fn tool_as(&self, name: &str, caller: Option<&str>) -> Option<Arc<T>> {
        self.seen_by(caller).tools.get(name).cloned()
    }

    /// The usable MCP tools whose name `keep` accepts, as `caller` (a
    /// subject) sees them: a per-caller server that listed its tools to
    /// them offers what it listed to them (made by [`list_as`](Self::list_as));
    /// every other server, what it listed to the gateway.
    pub fn tools_as(&self, keep: &dyn Fn(&str) -> bool, caller: Option<&str>) -> Vec<Arc<T>> {
        self.seen_by(caller)
            .tools
            .iter()
            .filter(|(n, _)| keep(n))
            .map(|(_, t)| Arc::clone(t))
            .collect()
    }

    /// [`gaps`](Self::gaps), as `caller` sees them.
    pub fn gaps_as(&self, keep: &dyn Fn(&Gap) -> bool, caller: Option<&str>) -> Vec<Gap> {
        self.seen_by(caller)
            .gaps
            .values()
            .filter(|g| keep(g))
            .cloned()
            .collect()
    }

    /// [`gap`](Self::gap), as `caller` sees it.
    pub fn gap_as(&self, name: &str, caller: Option<&str>) -> Option<Gap> {
        let seen = self.seen_by(caller);
        if seen.tools.contains_key(name) {
            return None;
        }
        seen.gaps.get(name).cloned().or_else(|| self.gap(name))
    }

    /// The per-caller server that answers `caller` for `what` over their
    /// own session (it listed its prompts and resources to them), with
    /// whose token it takes; `None` when the gateway's session answers.
    pub fn asked_of(
        &self,
        what: &Asked<'_>,
        caller: &str,
    ) -> Option<(String, toolgate_config::format::CredentialsDecl)> {
        let seen = self.seen_by(Some(caller));
        let index = match what {
            Asked::Server(name) => self.index_of(name)?,
            _ => seen.index_for(what)?,
        };
        if !seen.own.contains(&index) {
            return None;
        }
        let spec = &self.inner.servers[index].spec;
        spec.credentials()
            .map(|how| (spec.name.clone(), how.clone()))
    }

    /// The servers' prompts whose (gateway) name `keep` accepts, in order,
    /// as `caller` sees them (see [`tools_as`](Self::tools_as)).
    pub fn prompts(
        &self,
        keep: &dyn Fn(&str) -> bool,
        caller: Option<&str>,
    ) -> Vec<rmcp::model::Prompt> {
        self.seen_by(caller)
            .prompts
            .iter()
            .filter(|(name, _)| keep(name))
            .map(|(_, (_, _, p))| p.clone())
            .collect()
    }

    /// The servers' resources whose URI `keep` accepts, in order, as
    /// `caller` sees them.
    pub fn resources(
        &self,
        keep: &dyn Fn(&str) -> bool,
        caller: Option<&str>,
    ) -> Vec<rmcp::model::Resource> {
        self.seen_by(caller)
            .resources
            .iter()
            .filter(|(uri, _)| keep(uri))
            .map(|(_, (_, r))| r.clone())
            .collect()
    }

    /// The servers' resource templates whose URI template `keep` accepts,
    /// as `caller` sees them, each URI template once.
    pub fn resource_templates(
        &self,
        keep: &dyn Fn(&str) -> bool,
        caller: Option<&str>,
    ) -> Vec<rmcp::model::ResourceTemplate> {
        // A template two servers declare is listed once: the first
        // declared server's, which reads what it describes.
        let mut seen = std::collections::HashSet::new();
        self.seen_by(caller)
            .templates
            .iter()
            .filter(|(_, t)| keep(&t.uri_template) && seen.insert(t.uri_template.clone()))
            .map(|(_, t)| t.clone())
            .collect()
    }

    /// `true` when what `caller` is offered besides tools differs from
    /// what others are (a per-caller server listed its own to them).
    pub fn extras_vary(&self, caller: Option<&str>) -> bool {
        !self.seen_by(caller).own.is_empty()
    }

    /// `prompts/get` of the prompt the gateway calls `name`, from the
    /// server that offers it (under its own name); over `caller`'s own
    /// session (their subject and token) when that server is called as
    /// each caller and listed its prompts to them. An unknown name is
    /// invalid params (-32602); the server's own errors pass through.
    /// With `hand_back`, the server's questions that the client answers
    /// itself are handed back to it (see [`relay::HandBack`]).
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Option<rmcp::model::JsonObject>,
        caller: Option<(&str, &str)>,
        hand_back: Option<&relay::HandBack>,
    ) -> Result<rmcp::model::GetPromptResult, AskError> {
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let found = seen
            .prompts
            .get(name)
            .map(|(i, remote, _)| (*i, remote.clone()));
        let Some((index, remote)) = found else {
            return Err(rmcp::ErrorData::invalid_params(
                format!("no prompt named `{name}` is offered"),
                Some(serde_json::json!({"name": name})),
            )
            .into());
        };
        let mut params = rmcp::model::GetPromptRequestParams::new(remote);
        params.arguments = arguments;
        let server = self.inner.servers[index].spec.name.clone();
        let hand_back = hand_back.cloned();
        self.ask(&seen, index, caller, |peer| async move {
            use rmcp::model::{ClientRequest, GetPromptRequest, ServerResult};
            let Some(hand_back) = hand_back else {
                return peer.get_prompt(params).await;
            };
            let request = |responses, state| {
                let mut params = params.clone();
                params.input_responses = responses;
                params.request_state = state;
                ClientRequest::GetPromptRequest(GetPromptRequest::new(params))
            };
            handing_back(&peer, &server, &hand_back, request, |result| match result {
                ServerResult::GetPromptResult(result) => Some(result),
                _ => None,
            })
            .await
        })
        .await
    }

    /// The index of the server named `name`.
    fn index_of(&self, name: &str) -> Option<usize> {
        self.inner.servers.iter().position(|s| s.spec.name == name)
    }

    /// A request about a task `server` runs (`tasks/get`, `tasks/update`
    /// or `tasks/cancel`, SEP-2663), sent as a client that follows tasks,
    /// over `caller`'s own session at a server called as each caller. An
    /// unknown server is invalid params (-32602), like an unknown task.
    pub async fn task_request(
        &self,
        server: &str,
        request: rmcp::model::ClientRequest,
        caller: Option<(&str, &str)>,
    ) -> Result<rmcp::model::ServerResult, AskError> {
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let Some(index) = self.index_of(server) else {
            return Err(rmcp::ErrorData::invalid_params(
                format!("the task's MCP server `{server}` is no longer configured"),
                None,
            )
            .into());
        };
        let follows = relay::HandBack {
            tasks: true,
            ..Default::default()
        };
        let mut meta = rmcp::model::RequestMetaObject::new();
        meta.set_client_capabilities(follows.capabilities());
        self.ask(&seen, index, caller, |peer| async move {
            peer.send_request_with_option(request, request_options(Some(meta)))
                .await?
                .await_response()
                .await
        })
        .await
    }

    /// `resources/read` of `uri`, from the server that lists it or else the
    /// first whose resource template describes it (over `caller`'s own
    /// session, like [`get_prompt`](Self::get_prompt)). A URI no server
    /// serves is invalid params (-32602) with the URI in its data (SEP-2164).
    /// With `hand_back`, as [`get_prompt`](Self::get_prompt).
    pub async fn read_resource(
        &self,
        uri: &str,
        caller: Option<(&str, &str)>,
        hand_back: Option<&relay::HandBack>,
    ) -> Result<rmcp::model::ReadResourceResult, AskError> {
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let Some(index) = seen.index_for(&Asked::Resource(uri)) else {
            return Err(not_found(uri).into());
        };
        let server = &self.inner.servers[index].spec.name;
        let params = rmcp::model::ReadResourceRequestParams::new(extras::upstream_uri(server, uri));
        let hand_back = hand_back.cloned();
        let mut result = self
            .ask(&seen, index, caller, |peer| async move {
                use rmcp::model::{ClientRequest, ReadResourceRequest, ServerResult};
                let Some(hand_back) = hand_back else {
                    return peer.read_resource(params).await;
                };
                let request = |responses, state| {
                    let mut params = params.clone();
                    params.input_responses = responses;
                    params.request_state = state;
                    ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params))
                };
                handing_back(&peer, server, &hand_back, request, |result| match result {
                    ServerResult::ReadResourceResult(result) => Some(result),
                    _ => None,
                })
                .await
            })
            .await?;
        extras::offered_contents(server, &mut result);
        Ok(result)
    }

    /// Subscribes a client of the gateway to `uri` at the server serving
    /// it, over the gateway's own session: one upstream subscription
    /// however many clients want it, made again on every new session. A
    /// server that does not announce subscriptions is not asked, and one
    /// that refuses is logged (their updates never come). Updates arrive on
    /// [`updates`](Self::updates).
    pub async fn subscribe_resource(&self, uri: &str) {
        let snapshot = self.inner.snapshot.load_full();
        let Some(index) = snapshot.index_for(&Asked::Resource(uri)) else {
            return;
        };
        let server = &self.inner.servers[index];
        let uri = &*extras::upstream_uri(&server.spec.name, uri);
        let Ok(peer) = server.peer() else {
            return;
        };
        let announces = peer.peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        });
        if !announces {
            return;
        }
        let first = {
            let mut subscribed = server.subscribed.lock().unwrap_or_else(|p| p.into_inner());
            let count = subscribed.entry(uri.to_owned()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if !first {
            return;
        }
        let params = rmcp::model::SubscribeRequestParams::new(uri);
        #[allow(deprecated)] // resources/subscribe: 2025-11-25 sessions
        let sent = self
            .ask(&snapshot, index, None, |peer| async move {
                peer.subscribe(params).await
            })
            .await;
        // The client's subscription stands either way: an upstream that
        // cannot subscribe (some announce it and answer "method not
        // found") only never sends updates.
        if let Err(e) = sent {
            self.release(server, uri);
            tracing::warn!(mcp_server = %server.spec.name, "subscribing to `{uri}` failed: {}; its updates are not relayed", e.error.message);
        }
    }

    /// A client of the gateway no longer wants `uri`'s updates: the
    /// upstream subscription ends when no client wants them.
    pub async fn unsubscribe_resource(&self, uri: &str) {
        let snapshot = self.inner.snapshot.load_full();
        let Some(index) = snapshot.index_for(&Asked::Resource(uri)) else {
            return;
        };
        let server = &self.inner.servers[index];
        let uri = &*extras::upstream_uri(&server.spec.name, uri);
        if !self.release(server, uri) {
            return;
        }
        let params = rmcp::model::UnsubscribeRequestParams::new(uri);
        #[allow(deprecated)] // resources/unsubscribe: 2025-11-25 sessions
        let sent = self
            .ask(&snapshot, index, None, |peer| async move {
                peer.unsubscribe(params).await
            })
            .await;
        if let Err(e) = sent {
            tracing::debug!(mcp_server = %server.spec.name, "unsubscribing from `{uri}` failed: {}", e.error.message);
        }
    }

    /// One client less wants `uri` at `server`; `true` when none is left
    /// (and the gateway was subscribed).
    fn release(&self, server: &Server<T>, uri: &str) -> bool {
        let mut subscribed = server.subscribed.lock().unwrap_or_else(|p| p.into_inner());
        match subscribed.get_mut(uri) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                subscribed.remove(uri);
                true
            }
            None => false,
        }
    }

    /// The servers' resource updates (`notifications/resources/updated` of
    /// the gateway's own sessions), a receiver per server.
    pub fn updates(&self) -> Vec<tokio::sync::broadcast::Receiver<String>> {
        self.inner
            .servers
            .iter()
            .map(|s| s.updates.subscribe())
            .collect()
    }

    /// `true` when `uri` is one the servers serve, as `caller` sees them.
    pub fn serves(&self, uri: &str, caller: Option<&str>) -> bool {
        self.seen_by(caller)
            .index_for(&Asked::Resource(uri))
            .is_some()
    }

    /// `completion/complete` for an argument of a prompt (by the gateway's
    /// name) or a resource template, asked of the server that offers it
    /// (over `caller`'s own session, like [`get_prompt`](Self::get_prompt)).
    /// Nothing to complete (no such prompt or template, a server without
    /// completions) is an empty completion.
    pub async fn complete(
        &self,
        mut params: rmcp::model::CompleteRequestParams,
        caller: Option<(&str, &str)>,
    ) -> Result<rmcp::model::CompleteResult, AskError> {
        use rmcp::model::Reference;
        let seen = self.seen_by(caller.map(|(subject, _)| subject));
        let index = match &mut params.r#ref {
            Reference::Prompt(p) => seen.prompts.get(&p.name).map(|(i, remote, _)| {
                p.name.clone_from(remote);
                *i
            }),
            Reference::Resource(r) => seen.index_for(&Asked::Template(&r.uri)),
            _ => None,
        };
        let Some(index) = index else {
            return Ok(rmcp::model::CompleteResult::default());
        };
        // A server's capabilities, from the session the request goes over.
        let answer = self
            .ask(&seen, index, caller, |peer| async move {
                let completes = peer
                    .peer_info()
                    .is_some_and(|info| info.capabilities.completions.is_some());
                if completes {
                    peer.complete(params).await
                } else {
                    Ok(rmcp::model::CompleteResult::default())
                }
            })
            .await?;
        Ok(answer)
    }

    /// Sends one request to server `index` of `seen` (over `caller`'s own
    /// session when it is theirs there), bounded by its `timeout`; its
    /// errors in MCP's terms.
    async fn ask<R, F, Fut>(
        &self,
        seen: &Snapshot<T>,
        index: usize,
        caller: Option<(&str, &str)>,
        send: F,
    ) -> Result<R, AskError>
    where
        F: FnOnce(rmcp::Peer<rmcp::RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<R, ServiceError>>,
    {
        let server = &self.inner.servers[index];
        let spec = &server.spec;
        let user = caller.filter(|_| seen.own.contains(&index));
        let peer = match user {
            Some((subject, token)) => {
                server
                    .user_peer(subject, token)
                    .await
                    .map_err(|(reason, refused)| AskError {
                        error: rmcp::ErrorData::internal_error(reason, None),
                        refused,
                    })?
            }
            None => server
                .peer()
                .map_err(|reason| rmcp::ErrorData::internal_error(reason, None))?,
        };
        let bound = spec.timeout.unwrap_or(REQUEST_TIMEOUT);
        let answer = tokio::time::timeout(bound, send(peer)).await;
        let forget = || {
            if let Some((subject, _)) = user {
                server.forget_user(subject);
            }
        };
        match answer {
            Err(_) => Err(rmcp::ErrorData::internal_error(
                format!(
                    "MCP server `{}` did not answer within {}",
                    spec.name,
                    humantime_serde::re::humantime::format_duration(bound)
                ),
                None,
            )
            .into()),
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(e.into()),
            Ok(Err(e)) => {
                forget();
                Err(AskError {
                    error: rmcp::ErrorData::internal_error(
                        format!("MCP server `{}`: {}", spec.name, in_words(&e, spec)),
                        None,
                    ),
                    refused: user.is_some() && needs_token(&e),
                })
            }
        }
    }

    /// Tools that cannot be used now. `keep` accepts a gap by tool name and
    /// server name.
    pub fn gaps(&self, keep: &dyn Fn(&Gap) -> bool) -> Vec<Gap> {
        self.inner
            .snapshot
            .load()
            .gaps
            .values()
            .filter(|g| keep(g))
            .cloned()
            .collect()
    }

    /// Why `name` cannot be used, when it is (or could be) a tool of a
    /// server that is not ready.
    pub fn gap(&self, name: &str) -> Option<Gap> {
        let snapshot = self.inner.snapshot.load();
        if let Some(g) = snapshot.gaps.get(name) {
            return Some(g.clone());
        }
        if snapshot.tools.contains_key(name) {
            return None;
        }
        self.inner
            .servers
            .iter()
            .filter(|s| s.state().status != Status::Ready && s.spec.tools.could_provide(name))
            .map(|s| Gap {
                name: name.to_owned(),
                server: s.spec.name.clone(),
                reason: s.state().reason(&s.spec.name),
                origin: s.spec.origin(),
            })
            .next()
    }

    /// The servers that could offer a tool named `entry` (a name or a glob),
    /// before any of them has listed its tools.
    pub fn servers_for(specs: &[ServerSpec], entry: &str) -> Vec<String> {
        let glob = spec::is_glob(entry)
            .then(|| globset::Glob::new(entry).ok().map(|g| g.compile_matcher()))
            .flatten();
        specs
            .iter()
            .filter(|s| match &glob {
                Some(m) => s.tools.could_match(entry, m),
                None => s.tools.could_provide(entry),
            })
            .map(|s| s.name.clone())
            .collect()
    }

    /// Exact names tool sets expect from MCP servers that every server
    /// which could offer them has listed, without offering them.
    pub fn missing_expected(&self) -> Vec<&Expected> {
        // A per-caller server may list to a caller what it does not list
        // to the gateway: its listing never proves a name missing.
        let listed = |server: &str| -> Option<HashSet<String>> {
            let s = self.inner.server(server)?;
            let state = s.state();
            (state.status == Status::Ready && !s.spec.per_caller())
                .then(|| state.listed.iter().map(|l| l.name.clone()).collect())
        };
        let by_server: HashMap<&str, Option<HashSet<String>>> = self
            .inner
            .servers
            .iter()
            .map(|s| (s.spec.name.as_str(), listed(&s.spec.name)))
            .collect();
        self.inner
            .expected
            .iter()
            .filter(|e| {
                e.servers.iter().all(|s| {
                    by_server
                        .get(s.as_str())
                        .is_some_and(|l| l.as_ref().is_some_and(|l| !l.contains(&e.name)))
                })
            })
            .collect()
    }

    /// What each server offers now, for `toolgate check --connect`.
    pub fn reports(&self) -> Vec<ServerReport> {
        let snapshot = self.inner.snapshot.load();
        let mut reports = Vec::new();
        for server in &self.inner.servers {
            let spec = &server.spec;
            let state = server.state();
            let mut problems = Vec::new();
            let mut tools = Vec::new();
            for l in state.listed.iter() {
                if let Some(t) = snapshot.tools.get(&l.name) {
                    tools.push((l.name.clone(), l.remote.clone(), t.description().to_owned()));
                } else if let Some(g) = snapshot.gaps.get(&l.name) {
                    problems.push(format!("tool `{}` is unavailable: {}", l.remote, g.reason));
                }
            }
            for e in self.missing_expected() {
                if e.servers.first() == Some(&spec.name) {
                    problems.push(e.describe());
                }
            }
            reports.push(ServerReport {
                name: spec.name.clone(),
                transport: spec.transport.label(),
                file: spec.file.clone(),
                pos: spec.pos,
                status: state.status.label(),
                reason: match (&state.status, &state.last_error) {
                    (Status::Ready, _) => None,
                    (Status::Disabled { reason }, _) | (_, Some(reason)) => Some(reason.clone()),
                    (Status::PerCaller { .. }, None) => Some(state.status.reason(&spec.name)),
                    (other, None) => Some(other.label().to_owned()),
                },
                server_info: state.server_info.clone(),
                tools,
                problems,
                fingerprints: server.listed_fingerprints(),
            });
        }
        reports
    }

    /// The tool definitions changed upstream and held for review, by
    /// server.
    pub fn changes(&self) -> Vec<session::ToolChange> {
        self.inner
            .servers
            .iter()
            .flat_map(|s| s.changes())
            .collect()
    }

    /// Pins every server's tool definitions as the replicas sharing
    /// `store` agree; call it before [`start`](Self::start) (servers taken
    /// over from a previous catalog already share it).
    pub fn share_pins(&self, store: &Arc<dyn crate::session::shared_pins::PinStore>) {
        for server in &self.inner.servers {
            server.share_pins(Arc::clone(store));
        }
    }

    /// Accepts the held change of `server`'s `tool` to the definition
    /// `fingerprint`: the server lists its tools again, and takes that
    /// definition only if it still lists exactly it.
    pub fn accept_change(
        &self,
        server: &str,
        tool: &str,
        fingerprint: &str,
    ) -> Result<(), session::AcceptError> {
        self.named(server)?.accept_change(tool, fingerprint)
    }

    /// Refuses the held change of `server`'s `tool` to the definition
    /// `fingerprint`: what is served stays as it is, and the change is
    /// listed as refused.
    pub fn refuse_change(
        &self,
        server: &str,
        tool: &str,
        fingerprint: &str,
        refusal: session::Refusal,
    ) -> Result<(), session::AcceptError> {
        self.named(server)?
            .refuse_change(tool, fingerprint, refusal)
    }

    /// The server named `server`, for a decision on its held changes.
    fn named(&self, server: &str) -> Result<&Arc<Server<T>>, session::AcceptError> {
        self.inner
            .servers
            .iter()
            .find(|s| s.spec.name == server)
            .ok_or_else(|| session::AcceptError::NoServer(server.to_owned()))
    }
}

/// A URI no server serves, as SEP-2164 asks: invalid params, the URI in
/// the data.
fn not_found(uri: &str) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(
        format!("no resource `{uri}` is offered"),
        Some(serde_json::json!({"uri": uri})),
    )
}

/// One server's state, for reports.
#[derive(Debug, Clone)]
pub struct ServerReport {
    pub name: String,
    pub transport: &'static str,
    pub file: String,
    pub pos: Pos,
    /// `ready`, `down`, `disabled`...
    pub status: &'static str,
    /// Why it is not ready: why its last session failed, or its state.
    pub reason: Option<String>,
    /// `name version` from its `initialize` answer.
    pub server_info: Option<String>,
    /// (gateway name, server's name, description) of each usable tool.
    pub tools: Vec<(String, String, String)>,
    /// Tools it lists that cannot be used, and set entries it does not offer.
    pub problems: Vec<String>,
    /// The fingerprint of each tool's definition as listed, by the
    /// server's name for it.
    pub fingerprints: std::collections::BTreeMap<String, String>,
}

impl ServerReport {
    pub fn is_ok(&self) -> bool {
        (self.reason.is_none() || self.per_caller()) && self.problems.is_empty()
    }

    /// It refused the gateway's own session and lists its tools to each
    /// connected caller alone (`credentials`): not a failure.
    pub fn per_caller(&self) -> bool {
        self.status
            == Status::PerCaller {
                reason: String::new(),
            }
            .label()
    }
}
