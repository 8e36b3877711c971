//! The catalog: every usable tool and tool set, validated and immutable.
//!
//! A catalog is built from a configuration folder in one go
//! ([`Catalog::load`]); any error rejects the whole configuration, so a
//! catalog that exists is valid. Requests hold an `Arc<Catalog>` for their
//! whole life.

mod build;
mod toolset;

use std::path::Path;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::config::{ConfigErrors, Diagnostic, GatewayFile};
use crate::tool::Tool;
use crate::upstream::Upstreams;

pub use toolset::ToolSet;

/// Validated tools and tool sets plus the gateway settings.
#[derive(Debug)]
pub struct Catalog {
    pub settings: GatewayFile,
    tools: IndexMap<String, Arc<Tool>>,
    unavailable: IndexMap<String, Unavailable>,
    sets: IndexMap<String, ToolSet>,
    default_set: Option<String>,
    /// Model servers and the routes to them.
    pub upstreams: Upstreams,
    /// Non-fatal problems (e.g. a tool disabled for a missing variable).
    pub warnings: Vec<Diagnostic>,
}

/// A declared tool that cannot be used, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unavailable {
    pub name: String,
    pub reason: String,
    pub origin: String,
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
        let mut diags = Vec::new();
        let raw = crate::config::load_dir(dir, &mut diags);
        build::build(raw, env, diags)
    }

    /// The usable tool called `name`.
    pub fn tool(&self, name: &str) -> Option<&Arc<Tool>> {
        self.tools.get(name)
    }

    /// Every usable tool, in declaration order (files sorted by name).
    pub fn tools(&self) -> impl Iterator<Item = &Arc<Tool>> {
        self.tools.values()
    }

    /// Declared tools that cannot be used right now.
    pub fn unavailable(&self) -> impl Iterator<Item = &Unavailable> {
        self.unavailable.values()
    }

    /// Why `name` is declared but unusable, if it is.
    pub fn unavailable_tool(&self, name: &str) -> Option<&Unavailable> {
        self.unavailable.get(name)
    }

    pub fn set(&self, name: &str) -> Option<&ToolSet> {
        self.sets.get(name)
    }

    pub fn sets(&self) -> impl Iterator<Item = &ToolSet> {
        self.sets.values()
    }

    /// The set used when a request names none, if there is one.
    pub fn default_set(&self) -> Option<&ToolSet> {
        self.default_set.as_deref().and_then(|n| self.sets.get(n))
    }

    /// The usable tools of `set`, in the set's order.
    pub fn tools_in<'a>(&'a self, set: &'a ToolSet) -> impl Iterator<Item = &'a Arc<Tool>> + 'a {
        set.tools.iter().filter_map(|n| self.tools.get(n))
    }

    /// One line describing the catalog, for `toolgate check` and logs.
    pub fn summary(&self) -> String {
        format!(
            "{} tools ({} unavailable), {} tool sets, default set: {}",
            self.tools.len(),
            self.unavailable.len(),
            self.sets.len(),
            self.default_set.as_deref().unwrap_or("none"),
        )
    }
}
