//! The catalog: every usable tool and tool set, validated and immutable.
//!
//! A catalog is built from a configuration folder in one go
//! ([`Catalog::load`]); any error rejects the whole configuration, so a
//! catalog that exists is valid. Requests hold an `Arc<Catalog>` for their
//! whole life.

mod access;
mod browsers;
mod build;
mod builtins;
mod connections;
mod fetch;
mod http_tools;
mod keys;
mod mcp;
mod natives;
mod openapi;
mod search;
mod settings;
mod toolset;
mod upstreams;

use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::model::routing::Upstreams;
use crate::tools::tool::Tool;
use crate::tools::tool::mcp::{Gap, McpRegistry};
use crate::tools::tool::native::NativeTool;
use toolgate_config::{ConfigErrors, Diagnostic, GatewayFile};

pub use crate::support::secrets::Secret;
pub use access::{CallRefused, CallScope, offers_uri};
pub use browsers::{BrowserRefusal, BrowserRequest, BrowserRules};
pub use toolset::{McpPattern, Offers, ToolSet};

/// Validated tools and tool sets plus the gateway settings.
#[derive(Debug)]
pub struct Catalog {
    pub settings: GatewayFile,
    /// Budgets, and whether the shipped prices apply (`spend`).
    pub spend: crate::governance::spend::Rules,
    tools: IndexMap<String, Arc<Tool>>,
    unavailable: IndexMap<String, Unavailable>,
    sets: IndexMap<String, ToolSet>,
    default_set: Option<String>,
    /// Model servers and the routes to them.
    pub upstreams: Upstreams,
    /// Non-fatal problems (e.g. a tool disabled for a missing variable).
    pub warnings: Vec<Diagnostic>,
    /// Settings of the builtin tools, handed to native tools in their context.
    /// What every native call gets in its context (the builtins' settings).
    extensions: toolgate::Extensions,
    /// The declared MCP servers and the tools they currently offer.
    mcp: McpRegistry,
    /// The API keys (`auth.keys`); empty when the API is open.
    keys: crate::identity::auth::ApiKeys,
    /// The secret of `mcp.session_secret_env`, if one is named.
    pub mcp_session_secret: Option<Secret>,
    /// The URL of `mcp.replica_url_env`: where other replicas reach this
    /// one (no trailing `/`).
    pub mcp_replica_url: Option<String>,
    /// The URL of `state.redis` (it may hold a password).
    pub redis_url: Option<Secret>,
    /// What the HTTP endpoints accept from web browsers (`http`).
    pub browsers: BrowserRules,
    /// The rules every call is checked against (`policies`), in order.
    pub policies: Vec<crate::governance::policy::Policy>,
    /// A digest of `policies` and `approvals.destructive`, which binds
    /// approvals to the rules they were given under.
    pub policy_version: String,
    /// Users' upstream accounts and token exchanges (`connections`).
    pub connections: Option<Arc<crate::identity::credentials::Connections>>,
    /// The embedding model tool search ranks with (`search.model`).
    pub search_model: Option<Arc<crate::support::embeddings::Embeddings>>,
}

/// A declared tool that cannot be used, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unavailable {
    pub name: String,
    pub reason: String,
    pub origin: String,
}

impl From<Gap> for Unavailable {
    fn from(g: Gap) -> Self {
        Unavailable {
            name: g.name,
            reason: g.reason,
            origin: g.origin,
        }
    }
}

/// Why a named tool set cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    #[error("tool set `{name}` does not exist; available: {}", available.join(", "))]
    Unknown {
        name: String,
        /// The sets the caller may use.
        available: Vec<String>,
    },
    #[error("API key `{key}` may not use the tool set `{name}`")]
    Forbidden { name: String, key: String },
}

impl Catalog {
    /// Loads and validates the configuration folder `dir`, reading
    /// environment variables from the process environment.
    pub fn load(dir: &Path) -> Result<Catalog, ConfigErrors> {
        Self::load_with_env(dir, &|name| std::env::var(name).ok())
    }

    /// Like [`Catalog::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Catalog, ConfigErrors> {
        Self::load_with(dir, env, &[])
    }

    /// Like [`Catalog::load_with_env`], with native tools of the embedding
    /// binary added next to the enabled builtins (see
    /// `toolgate_server::cli::main_with`). YAML tool sets can name
    /// them; a name clash with any other tool is a configuration error.
    pub fn load_with(
        dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        natives: &[NativeTool],
    ) -> Result<Catalog, ConfigErrors> {
        let mut diags = Vec::new();
        let mut raw = toolgate_config::load_dir(dir, &mut diags);
        openapi::expand(&mut raw, &fetch::fetch, &mut diags);
        build::build(raw, env, natives, diags)
    }

    /// The extensions every native call's context carries: the builtins'
    /// settings (`builtins:` in `toolgate.yaml`).
    pub fn extensions(&self) -> &toolgate::Extensions {
        &self.extensions
    }

    /// The user a code-mode program's process runs as when the gateway is
    /// root: the builtins' sandbox user (`nobody` by default).
    pub fn code_user(&self) -> Option<(u32, u32)> {
        use toolgate_builtins::process::Sandbox;
        match self.extensions.get::<toolgate_builtins::BuiltinSettings>() {
            Some(b) => b.sandbox().ok().and_then(|s| s.user),
            None => Sandbox::resolve(&toolgate_config::format::SandboxDecl::default())
                .ok()
                .and_then(|s| s.user),
        }
    }

    /// The usable tool called `name`: declared in the configuration, or
    /// offered by a running MCP server.
    pub fn tool(&self, name: &str) -> Option<Arc<Tool>> {
        self.tool_as(name, None)
    }

    /// [`tool`](Self::tool), as the caller `caller` (a subject) sees it:
    /// an MCP server called as each caller offers them what it listed to
    /// them (see `Executor::list_as_caller`).
    pub fn tool_as(&self, name: &str, caller: Option<&str>) -> Option<Arc<Tool>> {
        match self.tools.get(name) {
            Some(tool) => Some(Arc::clone(tool)),
            None => self.mcp.tool_as(name, caller),
        }
    }

    /// The tool a call named `name` by `caller` runs in the tool set
    /// `set`: the set's `find_tools`, its `run_code`, else
    /// [`Catalog::tool_as`]. (Membership in the set is the caller's to
    /// check.)
    pub fn tool_for(
        &self,
        name: &str,
        set: Option<&str>,
        caller: Option<&str>,
    ) -> Option<Arc<Tool>> {
        if name == crate::tools::discovery::FIND_TOOLS
            && let Some(set) = set.and_then(|s| self.sets.get(s))
        {
            return Some(Arc::clone(&set.search_tool));
        }
        // Any set's program tool (a request may ask for code mode); the
        // MCP face and the tool API offer it only where the set's mode is
        // code (`callable`).
        if name == crate::tools::code::RUN_CODE
            && let Some(set) = set.and_then(|s| self.sets.get(s))
            && set.tools.iter().all(|t| t != name)
        {
            return Some(Arc::clone(&set.code_tool));
        }
        self.tool_as(name, caller)
    }

    /// Every usable tool: the declared ones in declaration order (files
    /// sorted by name), then those the MCP servers offer now.
    pub fn tools(&self) -> impl Iterator<Item = Arc<Tool>> + '_ {
        self.tools
            .values()
            .cloned()
            .chain(self.mcp.tools(&|_| true))
    }

    /// Tools that cannot be used right now, with the reason.
    pub fn unavailable(&self) -> impl Iterator<Item = Unavailable> + '_ {
        self.unavailable
            .values()
            .cloned()
            .chain(self.mcp.gaps(&|_| true).into_iter().map(Unavailable::from))
    }

    /// Why `name` is declared (or could be an MCP server's) but unusable,
    /// if it is.
    pub fn unavailable_tool(&self, name: &str) -> Option<Unavailable> {
        self.unavailable_tool_as(name, None)
    }

    /// [`unavailable_tool`](Self::unavailable_tool), as `caller` sees it.
    pub fn unavailable_tool_as(&self, name: &str, caller: Option<&str>) -> Option<Unavailable> {
        match self.unavailable.get(name) {
            Some(u) => Some(u.clone()),
            None => self.mcp.gap_as(name, caller).map(Unavailable::from),
        }
    }

    /// The MCP servers.
    pub fn mcp(&self) -> &McpRegistry {
        &self.mcp
    }

    /// Keeps, for each MCP server declared here exactly as in `previous`
    /// (the catalog in service), the running server and its session; call
    /// it on a freshly loaded catalog before starting its servers. Returns
    /// the names of the servers kept.
    pub fn adopt_mcp_sessions(&mut self, previous: &Catalog) -> Vec<String> {
        self.mcp.adopt(&previous.mcp)
    }

    /// The API keys; none configured means the API is open.
    pub fn keys(&self) -> &crate::identity::auth::ApiKeys {
        &self.keys
    }

    pub fn set(&self, name: &str) -> Option<&ToolSet> {
        self.sets.get(name)
    }

    /// The set `name` for a caller with `key` (`None`: the API is open).
    /// Every face looks sets up here, so an unknown or forbidden set gets
    /// the same answer everywhere.
    pub fn usable_set(
        &self,
        name: &str,
        key: Option<&crate::identity::auth::ApiKey>,
    ) -> Result<&ToolSet, SetError> {
        let may_use = |set: &str| key.is_none_or(|k| k.may_use(set));
        let Some(set) = self.set(name) else {
            return Err(SetError::Unknown {
                name: name.to_owned(),
                available: self
                    .sets()
                    .filter(|s| may_use(&s.name))
                    .map(|s| s.name.clone())
                    .collect(),
            });
        };
        if !may_use(name) {
            return Err(SetError::Forbidden {
                name: name.to_owned(),
                key: key.map(|k| k.name.clone()).unwrap_or_default(),
            });
        }
        Ok(set)
    }

    pub fn sets(&self) -> impl Iterator<Item = &ToolSet> {
        self.sets.values()
    }

    /// The set used when a request names none, if there is one.
    pub fn default_set(&self) -> Option<&ToolSet> {
        self.default_set.as_deref().and_then(|n| self.sets.get(n))
    }

    /// The usable tools of `set` for `caller` (a subject; `None`: the
    /// gateway's own view): its declared tools in the set's order, then
    /// the MCP tools its entries match now (those of a server called as
    /// each caller as it listed them to `caller`, once it has).
    pub fn tools_in<'a>(
        &'a self,
        set: &'a ToolSet,
        caller: Option<&str>,
    ) -> impl Iterator<Item = Arc<Tool>> + 'a {
        let live = if set.mcp.is_empty() {
            Vec::new()
        } else {
            self.mcp
                .tools_as(&|name| set.mcp.iter().any(|p| p.matches(name)), caller)
        };
        set.tools
            .iter()
            .filter_map(|n| self.tools.get(n))
            .cloned()
            .chain(live)
    }

    /// The tools of `set` that `caller` cannot use now, with the reason.
    pub fn unavailable_in(&self, set: &ToolSet, caller: Option<&str>) -> Vec<Unavailable> {
        let mut out: Vec<Unavailable> = set
            .unavailable
            .iter()
            .filter_map(|n| self.unavailable.get(n))
            .cloned()
            .collect();
        if !set.mcp.is_empty() {
            let gaps = self.mcp.gaps_as(
                &|g| {
                    set.mcp.iter().any(|p| {
                        p.matches(&g.name)
                            || (g.name.starts_with("mcp:") && p.servers.contains(&g.server))
                    })
                },
                caller,
            );
            out.extend(gaps.into_iter().map(Unavailable::from));
        }
        out
    }

    /// One line describing the catalog, for `toolgate check` and logs.
    pub fn summary(&self) -> String {
        let mcp = match self.mcp.len() {
            0 => String::new(),
            1 => ", 1 MCP server".to_owned(),
            n => format!(", {n} MCP servers"),
        };
        // The MCP servers' tools as of now (none before they start).
        format!(
            "{} tools ({} unavailable){mcp}, {} tool sets, default set: {}",
            self.tools().count(),
            self.unavailable().count(),
            self.sets.len(),
            self.default_set.as_deref().unwrap_or("none"),
        )
    }
}
