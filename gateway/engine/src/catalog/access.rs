//! Who may call which tool: the one rule every face asks (the tool API and
//! the console for any set of the caller's key, the MCP face for the set
//! it serves), before the executor runs the call. Policies on single tools
//! hang here.

use std::sync::Arc;

use super::{Catalog, Offers, ToolSet};
use crate::identity::auth::ApiKey;
use crate::tools::discovery::FIND_TOOLS;
use crate::tools::tool::Tool;
use crate::tools::tool::mcp::McpRegistry;

/// Where a call is made from.
#[derive(Debug, Clone, Copy)]
pub enum CallScope<'a> {
    /// Inside one tool set (an MCP endpoint, a chat request's set): its
    /// tools, and its `find_tools` when it searches.
    Set(&'a ToolSet),
    /// Any tool of the sets the key may use (every tool without keys, or
    /// for a key not limited to sets): the tool API and the console.
    Key(Option<&'a ApiKey>),
}

/// Why a call is refused before it runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallRefused {
    #[error("tool `{0}` does not exist")]
    Unknown(String),
    #[error("the tool set `{set}` has no tool `{name}`")]
    NotInSet { name: String, set: String },
    #[error("API key `{key}` may not use tool `{name}`: it is in none of the key's tool sets")]
    Forbidden { name: String, key: String },
    #[error("tool `{name}` is unavailable: {reason}")]
    Unavailable { name: String, reason: String },
}

/// `true` when a set's `resources` offer `uri` to `caller` (a subject):
/// an entry names or matches it, or it matches the URI template of a
/// template an entry offers.
pub fn offers_uri(
    resources: &Offers,
    registry: &McpRegistry,
    uri: &str,
    caller: Option<&str>,
) -> bool {
    resources.admits(uri)
        || registry
            .resource_templates(&|t| resources.admits(t), caller)
            .iter()
            .any(|t| crate::tools::tool::mcp::extras::template_matches(&t.uri_template, uri))
}

/// `true` when `name` is one of `set`'s tools, usable or not (declared,
/// unavailable, or matched by an MCP entry).
fn member(set: &ToolSet, name: &str) -> bool {
    set.tools.iter().any(|t| t == name)
        || set.unavailable.iter().any(|t| t == name)
        || set.mcp.iter().any(|p| p.matches(name))
}

impl Catalog {
    /// The tool a call named `name` by `caller` (a subject) from `scope`
    /// runs, or why it may not: not the scope's (403 for a key, "not in
    /// the set" for a set), then unknown (404) or unavailable (503). An MCP
    /// server called as each caller offers `caller` what it listed to them.
    pub fn callable(
        &self,
        scope: CallScope<'_>,
        name: &str,
        caller: Option<&str>,
    ) -> Result<Arc<Tool>, CallRefused> {
        match scope {
            CallScope::Set(set) => {
                if name == crate::tools::code::RUN_CODE
                    && set.mode == toolgate_config::format::SetMode::Code
                    && set.tools.iter().all(|t| t != name)
                {
                    return Ok(Arc::clone(&set.code_tool));
                }
                if name == FIND_TOOLS && set.tools.iter().all(|t| t != name) {
                    return self
                        .tool_for(name, Some(&set.name), caller)
                        .filter(|_| {
                            matches!(
                                set.discovery,
                                crate::tools::discovery::Discovery::Search { .. }
                            )
                        })
                        .ok_or_else(|| CallRefused::NotInSet {
                            name: name.to_owned(),
                            set: set.name.clone(),
                        });
                }
                if !member(set, name) {
                    return Err(if self.known(name, caller) {
                        CallRefused::NotInSet {
                            name: name.to_owned(),
                            set: set.name.clone(),
                        }
                    } else {
                        CallRefused::Unknown(name.to_owned())
                    });
                }
            }
            CallScope::Key(Some(key)) if key.tool_sets.is_some() => {
                let allowed = self
                    .sets()
                    .filter(|s| key.may_use(&s.name))
                    .any(|s| member(s, name));
                if !allowed {
                    return Err(CallRefused::Forbidden {
                        name: name.to_owned(),
                        key: key.name.clone(),
                    });
                }
            }
            CallScope::Key(_) => {}
        }
        match self.tool_as(name, caller) {
            Some(tool) => Ok(tool),
            None => Err(match self.unavailable_tool_as(name, caller) {
                Some(u) => CallRefused::Unavailable {
                    name: name.to_owned(),
                    reason: u.reason,
                },
                None => CallRefused::Unknown(name.to_owned()),
            }),
        }
    }

    /// `true` when a set the key may use holds the tool `name` and offers
    /// the resource `uri` to `caller` (a subject): how the console decides
    /// whether it shows a tool's MCP App, by the rule the MCP face reads
    /// resources by ([`offers_uri`]).
    pub fn offers_with_tool(
        &self,
        key: Option<&ApiKey>,
        name: &str,
        uri: &str,
        caller: Option<&str>,
    ) -> bool {
        self.sets()
            .filter(|s| key.is_none_or(|k| k.may_use(&s.name)))
            .filter(|s| member(s, name))
            .any(|s| offers_uri(&s.resources, &self.mcp, uri, caller))
    }

    /// `true` for a tool the catalog knows, usable or not.
    fn known(&self, name: &str, caller: Option<&str>) -> bool {
        self.tool_as(name, caller).is_some() || self.unavailable_tool_as(name, caller).is_some()
    }
}
