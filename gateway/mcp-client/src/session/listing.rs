//! What a server lists, made into the gateway's tools: the listing, each
//! tool's handle ([`McpTool`]), and its definition pinned against changes.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rmcp::{Peer, RoleClient};
use serde_json::Value;

use super::{Listed, Server};
use crate::Offer;
use crate::extras::{self, Extras};
use crate::spec::ServerSpec;

/// The bounds on how long a server's tool list is kept before it is listed
/// again when the server gives it a `ttlMs` (2026-07-28) and does not
/// announce list changes: a server cannot make the gateway list every
/// instant, nor keep a list for ever by asking to.
pub(super) const MIN_LIST_TTL: Duration = Duration::from_secs(5);
pub(super) const MAX_LIST_TTL: Duration = Duration::from_secs(24 * 3600);
/// The most pages of `tools/list` read (a server that keeps giving cursors
/// fails the listing).
const MAX_LIST_PAGES: usize = 1000;

// Made with the listing (`make_tool`); called in `crate::call`.
/// One tool of an MCP server, as the gateway calls it.
pub struct McpTool<T> {
    pub(crate) server: Weak<Server<T>>,
    pub(crate) server_name: String,
    /// The server's name for the tool.
    pub(crate) remote: String,
    /// The server marks it `readOnlyHint`.
    pub read_only: bool,
    /// The tool's `_meta` as the server listed it (an MCP App names its
    /// `ui://` resource there), passed to MCP clients unchanged.
    pub meta: Option<Arc<serde_json::Map<String, Value>>>,
}

impl<T> std::fmt::Debug for McpTool<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("server", &self.server_name)
            .field("remote", &self.remote)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// A tool definition the gateway trusts: the first it saw (or the pin
/// file's, or the last change a person accepted).
pub(super) struct Pin<T> {
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
    pub(super) fn trusted(
        fingerprint: String,
        definition: Value,
        tool: Result<Arc<T>, String>,
    ) -> Pin<T> {
        Pin {
            fingerprint,
            definition: Some(definition),
            tool,
            changed: None,
            accept: None,
        }
    }
}

impl<T> Pin<T> {
    /// A definition known only by its fingerprint (another replica's pin),
    /// out of service here until a change is accepted.
    pub(super) fn unknown(fingerprint: String, server: &str) -> Pin<T> {
        Pin {
            fingerprint,
            definition: None,
            tool: Err(format!(
                "MCP server `{server}` lists a definition of this tool that the gateway's replicas do not trust (another replica trusted another definition first); it is out of service until someone accepts the change (`POST /v1/tool-changes` or the console)"
            )),
            changed: None,
            accept: None,
        }
    }

    /// The trusted definition's fingerprint.
    pub(super) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The trusted definition, when it is known (not only its
    /// fingerprint).
    pub(super) fn definition(&self) -> Option<&Value> {
        self.definition.as_ref()
    }

    /// The fingerprint of the changed definition held, if any.
    pub(super) fn changed_fingerprint(&self) -> Option<&str> {
        self.changed.as_ref().map(|c| c.fingerprint.as_str())
    }

    /// Takes the definition `fingerprint` at the next listing, if the
    /// server lists exactly it.
    pub(super) fn accept_now(&mut self, fingerprint: String) {
        self.accept = Some(fingerprint);
    }

    /// Becomes `other`, keeping the change held (so it is not reported
    /// again).
    pub(super) fn replace_keeping_report(&mut self, other: Pin<T>) {
        let changed = self.changed.take();
        *self = Pin { changed, ..other };
    }
}

/// A changed definition, held.
#[derive(Debug, Clone)]
struct Changed {
    fingerprint: String,
    definition: Value,
    /// When it was first seen (RFC 3339).
    since: String,
    /// A person refused it: the trusted definition stays (or the tool out
    /// of service), and the change is listed as refused, not pending.
    refused: Option<Refusal>,
}

/// Who refused a held change, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Refusal {
    pub by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Why a held change of a tool's definition was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error("no MCP server `{0}`")]
    NoServer(String),
    #[error("MCP server `{server}` has no held change of `{tool}`")]
    NoChange { server: String, tool: String },
    /// The fingerprint is not the held definition's: it changed again
    /// since it was shown.
    #[error("the definition of `{0}` changed again since it was shown; review it again")]
    ChangedAgain(String),
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
    /// `pending`, or `refused` (with `refused`): a refused change is not
    /// taken, and listed until the server lists another definition.
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
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
                    status: if changed.refused.is_some() {
                        "refused"
                    } else {
                        "pending"
                    },
                    refused: changed.refused.clone(),
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

    /// The held change of `tool` to the definition `fingerprint`, under
    /// the lock of the pins.
    fn held_change<'a>(
        &self,
        pins: &'a mut HashMap<String, Pin<T>>,
        tool: &str,
        fingerprint: &str,
    ) -> Result<&'a mut Pin<T>, AcceptError> {
        let pin = pins
            .get_mut(tool)
            .filter(|p| p.changed.is_some())
            .ok_or_else(|| AcceptError::NoChange {
                server: self.spec.name.clone(),
                tool: tool.to_owned(),
            })?;
        if pin.changed.as_ref().map(|c| c.fingerprint.as_str()) != Some(fingerprint) {
            return Err(AcceptError::ChangedAgain(tool.to_owned()));
        }
        Ok(pin)
    }

    /// Refuses the change of `tool` to the definition `fingerprint`: the
    /// trusted definition stays in service (`keep_old`) or the tool out of
    /// it (`disable`), and the change is listed as refused until the
    /// server lists another definition (which is held again). A refused
    /// change may still be accepted.
    pub fn refuse_change(
        &self,
        tool: &str,
        fingerprint: &str,
        refusal: Refusal,
    ) -> Result<(), AcceptError> {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let pin = self.held_change(&mut pins, tool, fingerprint)?;
        if let Some(changed) = pin.changed.as_mut() {
            changed.refused = Some(refusal);
        }
        pin.accept = None;
        tracing::info!(mcp_server = %self.spec.name, tool, "a changed tool definition is refused");
        Ok(())
    }

    /// Accepts the change of `tool` to the definition `fingerprint`: the
    /// tools are listed again, and that definition (only it) is pinned.
    pub fn accept_change(&self, tool: &str, fingerprint: &str) -> Result<(), AcceptError> {
        let mut pins = self.pins.lock().unwrap_or_else(|p| p.into_inner());
        let pin = self.held_change(&mut pins, tool, fingerprint)?;
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

/// The server's prompts, resources and templates, listed within its
/// `startup_timeout` (what is not listed in time is offered empty).
pub(super) async fn list_extras(peer: &Peer<RoleClient>, spec: &ServerSpec) -> Extras {
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
pub(super) async fn list_tools(
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

/// Turns a listing into gateway tools: filtered, renamed, with their schema
/// compiled.
pub(super) fn build_tools<T: Offer>(
    server: &Arc<Server<T>>,
    tools: Vec<rmcp::model::Tool>,
) -> Vec<Listed<T>> {
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
pub(super) fn definition(t: &rmcp::model::Tool) -> Value {
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
    spec: &crate::spec::ServerSpec,
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
            refused: None,
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

/// The gateway's tool for the server's tool `t` (named `name` here,
/// `remote` by the server).
pub(super) fn make_tool<T: Offer>(
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
            .map(|m| Arc::new(crate::extras::app_meta(&spec.name, m.0.clone()))),
    };
    T::offer(spec, name, t, handle).map(Arc::new)
}

pub(super) fn report_listing<T>(server: &Server<T>, listed: &[Listed<T>]) {
    let name = &server.spec.name;
    let usable = listed.iter().filter(|l| l.tool.is_ok()).count();
    tracing::info!(mcp_server = %name, "MCP server `{name}` is ready with {usable} tools");
    for l in listed {
        if let Err(reason) = &l.tool {
            tracing::warn!(mcp_server = %name, "tool `{}` of MCP server `{name}` is unavailable: {reason}", l.remote);
        }
    }
}
