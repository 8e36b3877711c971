//! Pins kept beyond one process: with a [`PinStore`] (the gateway's
//! `state.redis`, shared by replicas, or its embedded store, which
//! outlives restarts), the definition pinned first, or the change a person
//! accepted on any replica, is the one every replica and every later
//! process trusts.
//!
//! Before a listing is made into tools, its definitions are settled with
//! the store: each tool's trusted definition (with its fingerprint) is
//! recorded where none is, and the one recorded wins over the replica's
//! own. A replica that starts after a server changed a tool therefore
//! holds the change, as the one that saw the first definition does, and
//! under `keep_old` serves the trusted definition from the store. After
//! the listing, what the replica came to trust (a change accepted here, or
//! `on_change: accept`) is recorded. A replica holding a change asks the
//! store every [`POLL`] whether it was accepted elsewhere, and lists again
//! when so. A tool the server's pin file names is left to the pin file,
//! which every replica reads.
//!
//! While the store is unavailable the replica pins on its own, as without
//! one, and agrees again at its next listing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;

use serde_json::Value;

use super::listing::{Pin, build_tools, definition, fingerprint, make_tool};
use super::{Listed, Server};
use crate::Offer;

/// How often a replica holding a changed definition asks whether another
/// replica accepted it.
pub const POLL: Duration = Duration::from_secs(2);

/// The store was not reachable; the replica pins on its own.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the shared pins are unavailable")]
pub struct Unavailable;

/// Where the replicas keep each tool's trusted definition (a record the
/// MCP client writes and reads; opaque to the store), by server and the
/// server's name for the tool.
pub trait PinStore: Send + Sync + 'static {
    /// For each `(tool, record)` of `server`: keeps the record where none
    /// is kept, and answers the one kept (for every tool proposed).
    fn settle<'a>(
        &'a self,
        server: &'a str,
        proposed: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Unavailable>>;

    /// Keeps `record` as the trusted definition of `server`'s `tool` (a
    /// change accepted).
    fn trust<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        record: &'a str,
    ) -> BoxFuture<'a, Result<(), Unavailable>>;
}

/// What the store keeps for one tool: its trusted definition's
/// fingerprint and, when known, the definition itself (so a replica that
/// never saw it can still serve it under `keep_old`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Record {
    fingerprint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    definition: Option<Value>,
    /// A person accepted it (or `on_change: accept` took it), rather than
    /// a replica seeing it first: only such a record replaces a pin a
    /// replica already holds (a store that lost its records, and was
    /// refilled by what a server lists now, changes no replica's trust).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    accepted: bool,
}

impl Record {
    fn write(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A record as the store gave it; one that does not read as a record
    /// is taken as a bare fingerprint.
    fn read(text: &str) -> Record {
        serde_json::from_str(text).unwrap_or_else(|_| Record {
            fingerprint: text.to_owned(),
            definition: None,
            accepted: false,
        })
    }
}

/// Makes `tools` (as the server lists them) into the gateway's tools,
/// pinned as the replicas agree when a store is set.
pub(super) async fn build<T: Offer>(
    server: &Arc<Server<T>>,
    tools: Vec<rmcp::model::Tool>,
) -> Vec<Listed<T>> {
    let Some(store) = server.pin_store() else {
        return build_tools(server, tools);
    };
    let agreed = agree(server, store.as_ref(), &tools).await;
    let listed = build_tools(server, tools);
    match agreed {
        Some(agreed) => record(server, store.as_ref(), &agreed).await,
        // Settled again (and what was accepted meanwhile recorded) at the
        // next poll.
        None => server.pins_unsettled.store(true, Ordering::SeqCst),
    }
    listed
}

/// What the server lists now that the replicas share, by the server's
/// name for each tool admitted: its definition and fingerprint. A tool
/// its pin file names is left to the pin file, which every replica reads.
fn listed_now<T>(server: &Server<T>, tools: &[rmcp::model::Tool]) -> Vec<(String, Value, String)> {
    tools
        .iter()
        .filter(|t| server.spec.tools.admits(&t.name) && !server.spec.pins.contains_key(&*t.name))
        .map(|t| {
            let seen = definition(t);
            let fingerprint = fingerprint(&seen);
            (t.name.to_string(), seen, fingerprint)
        })
        .collect()
}

/// Settles the listing's definitions with the store and brings the
/// replica's own pins in line: `None` when the store was unavailable.
async fn agree<T: Offer>(
    server: &Arc<Server<T>>,
    store: &dyn PinStore,
    tools: &[rmcp::model::Tool],
) -> Option<HashMap<String, Record>> {
    let now = listed_now(server, tools);
    let proposed: Vec<(String, String)> = {
        let pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
        now.iter()
            .map(|(remote, seen, fingerprint)| {
                let trusted = match pins.get(remote) {
                    Some(pin) => Record {
                        fingerprint: pin.fingerprint().to_owned(),
                        definition: pin.definition().cloned(),
                        accepted: false,
                    },
                    None => Record {
                        fingerprint: fingerprint.clone(),
                        definition: Some(seen.clone()),
                        accepted: false,
                    },
                };
                (remote.clone(), trusted.write())
            })
            .collect()
    };
    let Ok(agreed) = store.settle(&server.spec.name, &proposed).await else {
        tracing::warn!(mcp_server = %server.spec.name, "the pin store (Redis, or the embedded store) is unavailable; MCP server `{}`'s tool definitions are pinned by this process alone until it answers again (tried again every 2 s)", server.spec.name);
        return None;
    };
    let agreed: HashMap<String, Record> = agreed
        .into_iter()
        .map(|(remote, text)| (remote, Record::read(&text)))
        .collect();
    let mut pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
    for (remote, _, seen) in &now {
        let Some(shared) = agreed.get(remote) else {
            continue;
        };
        let pin = pins.get_mut(remote);
        if pin
            .as_ref()
            .is_some_and(|p| p.fingerprint() == shared.fingerprint || !shared.accepted)
        {
            // The same trust, or a record that was only seen first by
            // another replica: this replica keeps the pin it holds.
            continue;
        }
        if *seen == shared.fingerprint {
            // The replicas trust what the server lists: so does this one,
            // whatever it trusted before.
            if let Some(pin) = pin {
                pin.accept_now(seen.clone());
            }
        } else {
            // Another replica trusts a definition this one has not
            // pinned: served here too when the store has it whole.
            let held = trusted_elsewhere(server, remote, shared);
            match pin {
                Some(pin) => pin.replace_keeping_report(held),
                None => {
                    pins.insert(remote.clone(), held);
                }
            }
        }
    }
    Some(agreed)
}

/// The pin of a definition another replica trusts: the tool made of it
/// when the store holds the definition (and it is the one fingerprinted),
/// else known by its fingerprint only.
fn trusted_elsewhere<T: Offer>(server: &Arc<Server<T>>, remote: &str, shared: &Record) -> Pin<T> {
    let tool = shared
        .definition
        .as_ref()
        .filter(|d| fingerprint(d) == shared.fingerprint)
        .and_then(|d| {
            let tool = serde_json::from_value::<rmcp::model::Tool>(d.clone()).ok()?;
            let name = server.spec.tools.local_name(remote).ok()?;
            Some((d.clone(), make_tool(server, &name, remote, &tool)))
        });
    match tool {
        Some((definition, tool)) => Pin::trusted(shared.fingerprint.clone(), definition, tool),
        None => Pin::unknown(shared.fingerprint.clone(), &server.spec.name),
    }
}

/// Records what the replica trusts now where the store recorded another
/// definition (a change accepted here, or taken by `on_change: accept`).
async fn record<T>(server: &Server<T>, store: &dyn PinStore, agreed: &HashMap<String, Record>) {
    let moved: Vec<(String, String)> = {
        let pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
        agreed
            .iter()
            .filter_map(|(remote, shared)| {
                let pin = pins.get(remote)?;
                let definition = pin.definition()?;
                (pin.fingerprint() != shared.fingerprint).then(|| {
                    let record = Record {
                        fingerprint: pin.fingerprint().to_owned(),
                        definition: Some(definition.clone()),
                        accepted: true,
                    };
                    (remote.clone(), record.write())
                })
            })
            .collect()
    };
    for (remote, trusted) in moved {
        if store
            .trust(&server.spec.name, &remote, &trusted)
            .await
            .is_err()
        {
            tracing::warn!(mcp_server = %server.spec.name, tool = remote, "the pin store (Redis, or the embedded store) is unavailable; the definition of `{remote}` accepted here is kept by this process alone until it answers again");
            server.pins_unsettled.store(true, Ordering::SeqCst);
        }
    }
}

/// Whether a change this replica holds was accepted on another one; if
/// so, the server's tools are listed again (and the change taken).
pub(super) async fn poll<T>(server: &Server<T>) {
    let Some(store) = server.pin_store() else {
        return;
    };
    if server.pins_unsettled.swap(false, Ordering::SeqCst) {
        // The last listing could not settle with the store: list again.
        server.rebuild.store(true, Ordering::SeqCst);
        server.list_changed.notify_one();
        return;
    }
    // Tools the server still lists (a change of one it dropped is moot).
    let listed: std::collections::HashSet<String> = server
        .state()
        .listed
        .iter()
        .map(|l| l.remote.clone())
        .collect();
    let held: Vec<(String, Record)> = {
        let pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
        pins.iter()
            .filter(|(remote, pin)| {
                pin.changed_fingerprint().is_some()
                    && !server.spec.pins.contains_key(*remote)
                    && listed.contains(*remote)
            })
            .map(|(remote, pin)| {
                let trusted = Record {
                    fingerprint: pin.fingerprint().to_owned(),
                    definition: pin.definition().cloned(),
                    accepted: false,
                };
                (remote.clone(), trusted)
            })
            .collect()
    };
    if held.is_empty() {
        return;
    }
    let proposed: Vec<(String, String)> = held
        .iter()
        .map(|(remote, trusted)| (remote.clone(), trusted.write()))
        .collect();
    let Ok(agreed) = store.settle(&server.spec.name, &proposed).await else {
        return;
    };
    let moved = held.iter().any(|(remote, trusted)| {
        agreed.get(remote).is_some_and(|s| {
            let shared = Record::read(s);
            shared.accepted && shared.fingerprint != trusted.fingerprint
        })
    });
    if moved {
        tracing::info!(mcp_server = %server.spec.name, "a changed tool definition of MCP server `{}` was accepted on another replica; listing its tools again", server.spec.name);
        server.rebuild.store(true, Ordering::SeqCst);
        server.list_changed.notify_one();
    }
}
