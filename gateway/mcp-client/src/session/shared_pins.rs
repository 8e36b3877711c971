//! Pins agreed among replicas: with a [`PinStore`] (the gateway's
//! `state.redis`), the definition a replica pinned first, or the change a
//! person accepted on any replica, is the one every replica trusts.
//!
//! Before a listing is made into tools, its definitions are settled with
//! the store: each tool's trusted fingerprint is recorded where none is,
//! and the one recorded wins over the replica's own. A replica that starts
//! after a server changed a tool therefore holds the change, as the one
//! that saw the first definition does; it cannot serve the first
//! definition (it never saw it), so under `keep_old` the tool is out of
//! service there until the change is accepted. After the listing, what the
//! replica came to trust (a change accepted here, or `on_change: accept`)
//! is recorded. A replica holding a change asks the store every
//! [`POLL`] whether it was accepted elsewhere, and lists again when so.
//!
//! While the store is unavailable the replica pins on its own, as without
//! one, and agrees again at its next listing.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;

use super::listing::{Pin, build_tools, definition, fingerprint};
use super::{Listed, Server};
use crate::Offer;

/// How often a replica holding a changed definition asks whether another
/// replica accepted it.
pub const POLL: Duration = Duration::from_secs(2);

/// The store was not reachable; the replica pins on its own.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the shared pins are unavailable")]
pub struct Unavailable;

/// Where the replicas keep the fingerprint each tool's trusted definition
/// has, by server and the server's name for the tool.
pub trait PinStore: Send + Sync + 'static {
    /// For each `(tool, fingerprint)` of `server`: records the fingerprint
    /// where none is recorded, and answers the one recorded (for every
    /// tool proposed).
    fn settle<'a>(
        &'a self,
        server: &'a str,
        proposed: &'a [(String, String)],
    ) -> BoxFuture<'a, Result<HashMap<String, String>, Unavailable>>;

    /// Records `fingerprint` as the trusted definition of `server`'s
    /// `tool` (a change accepted).
    fn trust<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<(), Unavailable>>;
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
    if let Some(agreed) = agreed {
        record(server, store.as_ref(), &agreed).await;
    }
    listed
}

/// What the server lists now, by the server's name for each tool admitted:
/// its fingerprint.
fn listed_now<T>(server: &Server<T>, tools: &[rmcp::model::Tool]) -> Vec<(String, String)> {
    tools
        .iter()
        .filter(|t| server.spec.tools.admits(&t.name))
        .map(|t| (t.name.to_string(), fingerprint(&definition(t))))
        .collect()
}

/// Settles the listing's definitions with the store and brings the
/// replica's own pins in line: `None` when the store was unavailable.
async fn agree<T>(
    server: &Server<T>,
    store: &dyn PinStore,
    tools: &[rmcp::model::Tool],
) -> Option<HashMap<String, String>> {
    let now = listed_now(server, tools);
    let proposed: Vec<(String, String)> = {
        let pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
        now.iter()
            .map(|(remote, seen)| {
                let trusted = pins
                    .get(remote)
                    .map(Pin::fingerprint)
                    .or_else(|| server.spec.pins.get(remote).map(String::as_str))
                    .unwrap_or(seen);
                (remote.clone(), trusted.to_owned())
            })
            .collect()
    };
    let Ok(agreed) = store.settle(&server.spec.name, &proposed).await else {
        tracing::warn!(mcp_server = %server.spec.name, "the replicas' shared pins are unavailable; MCP server `{}`'s tool definitions are pinned by this replica alone until the next listing", server.spec.name);
        return None;
    };
    let mut pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
    for (remote, seen) in &now {
        let Some(shared) = agreed.get(remote) else {
            continue;
        };
        let pin = pins.get_mut(remote);
        if pin.as_ref().is_some_and(|p| p.fingerprint() == shared) {
            continue;
        }
        if seen == shared {
            // The replicas trust what the server lists: so does this one,
            // whatever it (or its pin file) trusted before.
            match pin {
                Some(pin) => pin.accept_now(seen.clone()),
                None => {
                    if let Some(filed) = server.spec.pins.get(remote)
                        && filed != seen
                    {
                        let mut pin = Pin::unknown(filed.clone(), &server.spec.name);
                        pin.accept_now(seen.clone());
                        pins.insert(remote.clone(), pin);
                    }
                }
            }
        } else {
            // Another replica trusts a definition this one did not see.
            let held = Pin::unknown(shared.clone(), &server.spec.name);
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

/// Records what the replica trusts now where the store recorded another
/// definition (a change accepted here, or taken by `on_change: accept`).
async fn record<T>(server: &Server<T>, store: &dyn PinStore, agreed: &HashMap<String, String>) {
    let moved: Vec<(String, String)> = {
        let pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
        agreed
            .iter()
            .filter_map(|(remote, shared)| {
                let pin = pins.get(remote)?;
                (pin.fingerprint() != shared && pin.knows_definition())
                    .then(|| (remote.clone(), pin.fingerprint().to_owned()))
            })
            .collect()
    };
    for (remote, trusted) in moved {
        if store
            .trust(&server.spec.name, &remote, &trusted)
            .await
            .is_err()
        {
            tracing::warn!(mcp_server = %server.spec.name, tool = remote, "the replicas' shared pins are unavailable; the definition of `{remote}` accepted here is not yet trusted by the other replicas");
        }
    }
}

/// Whether a change this replica holds was accepted on another one; if
/// so, the server's tools are listed again (and the change taken).
pub(super) async fn poll<T>(server: &Server<T>) {
    let Some(store) = server.pin_store() else {
        return;
    };
    let held: Vec<(String, String, String)> = {
        let pins = server.pins.lock().unwrap_or_else(|p| p.into_inner());
        pins.iter()
            .filter_map(|(remote, pin)| {
                let changed = pin.changed_fingerprint()?;
                Some((
                    remote.clone(),
                    pin.fingerprint().to_owned(),
                    changed.to_owned(),
                ))
            })
            .collect()
    };
    if held.is_empty() {
        return;
    }
    let proposed: Vec<(String, String)> = held
        .iter()
        .map(|(remote, trusted, _)| (remote.clone(), trusted.clone()))
        .collect();
    let Ok(agreed) = store.settle(&server.spec.name, &proposed).await else {
        return;
    };
    let moved = held
        .iter()
        .any(|(remote, trusted, _)| agreed.get(remote).is_some_and(|s| s != trusted));
    if moved {
        tracing::info!(mcp_server = %server.spec.name, "another replica accepted a changed tool definition of MCP server `{}`; listing its tools again", server.spec.name);
        server.rebuild.store(true, Ordering::SeqCst);
        server.list_changed.notify_one();
    }
}
