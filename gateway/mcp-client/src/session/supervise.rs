//! A server's supervisor: its sessions one after the other, with backoff;
//! each serves calls and lists again on changes until it ends.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rmcp::service::QuitReason;
use rmcp::{Peer, RoleClient};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::connect::{StartFailure, connect};
use super::listing::{MAX_LIST_TTL, MIN_LIST_TTL, list_extras, list_tools, report_listing};
use super::{Owner, Server, ServerState, Status};
use crate::Offer;

/// First delay before a restart; doubled after each failure.
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
/// Longest delay between restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A session that lived this long resets the backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How long a stopping server may take to close.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Runs a server until it is stopped: sessions one after the other, with
/// backoff.
pub(crate) async fn supervise<T: Offer>(server: Arc<Server<T>>) {
    let stop = server.stop.clone();
    let name = server.spec.name.clone();
    if server.spec.disabled.is_some() {
        return;
    }
    let mut backoff = INITIAL_BACKOFF;
    loop {
        server.update(|old| ServerState {
            status: Status::Starting,
            peer: None,
            listed: Arc::clone(&old.listed),
            extras: Arc::clone(&old.extras),
            attempts: old.attempts + 1,
            server_info: old.server_info.clone(),
            last_error: old.last_error.clone(),
        });
        publish(&server);
        let began = Instant::now();
        let end = run_session(&server, &stop).await;
        // The same failure again is logged at debug level only.
        let repeated = |reason: &str| server.state().last_error.as_deref() == Some(reason);
        let reason = match end {
            SessionEnd::Stopped => break,
            // A server called as each caller may well refuse the gateway
            // itself: its tools are then listed to each caller alone.
            SessionEnd::NeedsToken(reason) if server.spec.per_caller() => {
                tracing::info!(mcp_server = %name, "MCP server `{name}` refused the gateway's own session ({reason}); it lists its tools to each caller who has connected");
                let how = match server.spec.credentials() {
                    Some(toolgate_config::format::CredentialsDecl::PerUser(connection)) => format!(
                        "`POST /v1/connections/{connection}/link` or the console's catalog gives a link to connect; "
                    ),
                    _ => String::new(),
                };
                server.set_status(Status::PerCaller {
                    reason: format!("{how}it refused the gateway's own session: {reason}"),
                });
                publish(&server);
                stop.cancelled().await;
                break;
            }
            SessionEnd::NeedsToken(reason) => {
                tracing::error!(mcp_server = %name, "MCP server `{name}` refused the gateway: {reason}; it is not retried until the configuration changes");
                server.set_status(Status::Down { reason });
                publish(&server);
                stop.cancelled().await;
                break;
            }
            SessionEnd::FailedToStart(reason) if repeated(&reason) => {
                tracing::debug!(mcp_server = %name, "MCP server `{name}` failed to start again: {reason}");
                reason
            }
            SessionEnd::FailedToStart(reason) => {
                tracing::error!(mcp_server = %name, "MCP server `{name}` failed to start: {reason}");
                reason
            }
            SessionEnd::Ended(reason) => {
                tracing::warn!(mcp_server = %name, "MCP server `{name}` stopped: {reason}");
                reason
            }
        };
        if began.elapsed() >= HEALTHY_AFTER {
            backoff = INITIAL_BACKOFF;
        }
        server.set_status(Status::Down { reason });
        publish(&server);
        tracing::debug!(mcp_server = %name, "restarting MCP server `{name}` in {backoff:?}");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    server.set_status(Status::Stopped);
    publish(&server);
}

/// Rebuilds the snapshots of the registries holding `server`, then wakes
/// whoever waits for a change of it (so they see the snapshots up to date).
fn publish<T>(server: &Server<T>) {
    // Upgraded outside the lock: dropping the last reference to a registry
    // runs its `Drop`, which takes the lock.
    let owners: Vec<Weak<dyn Owner>> = server.owners().clone();
    for registry in owners.iter().filter_map(Weak::upgrade) {
        registry.publish();
    }
    server.changes.send_modify(|n| *n += 1);
}

enum SessionEnd {
    Stopped,
    FailedToStart(String),
    /// It refused the gateway's credentials: not retried until the
    /// configuration changes (a reload starts a new server).
    NeedsToken(String),
    Ended(String),
}

/// One session: start it, serve calls until it ends or `stop`.
async fn run_session<T: Offer>(server: &Arc<Server<T>>, stop: &CancellationToken) -> SessionEnd {
    let spec = &server.spec;
    let startup = async {
        let session = connect(server, None).await?;
        let tools = list_tools(session.peer()).await.map_err(|e| StartFailure {
            reason: format!("`tools/list` failed: {}", crate::errors::in_words(&e, spec)),
            needs_token: crate::errors::needs_token(&e) && !spec.uses_oauth(),
        })?;
        Ok::<_, StartFailure>((session, tools))
    };
    let (session, (tools, ttl)) = tokio::select! {
        r = tokio::time::timeout(spec.startup_timeout, startup) => match r {
            Ok(Ok(started)) => started,
            Ok(Err(StartFailure { reason, needs_token: true })) => return SessionEnd::NeedsToken(reason),
            Ok(Err(StartFailure { reason, .. })) => return SessionEnd::FailedToStart(reason),
            Err(_) => return SessionEnd::FailedToStart(format!(
                "it did not complete `initialize` and `tools/list` within {}",
                humantime_serde::re::humantime::format_duration(spec.startup_timeout)
            )),
        },
        () = stop.cancelled() => return SessionEnd::Stopped,
    };
    let peer = session.peer().clone();
    let info = peer.peer_info().and_then(|i| {
        i.server_info
            .as_ref()
            .map(|s| format!("{} {}", s.name, s.version).trim().to_owned())
    });
    // What the server listed last, to tell a change from a listing made
    // because the list went stale.
    let mut last = tools.clone();
    let listed = super::shared_pins::build(server, tools).await;
    report_listing(server, &listed);
    let mut last_extras = list_extras(&peer, spec).await;
    resubscribe(server, &peer).await;
    server.update(|old| ServerState {
        status: Status::Ready,
        peer: Some(peer.clone()),
        listed: Arc::new(listed),
        extras: Arc::new(last_extras.clone()),
        attempts: old.attempts,
        server_info: info.clone(),
        last_error: None,
    });
    publish(server);

    let cancel = session.cancellation_token();
    // A list with a `ttlMs` is listed again when it goes stale, unless the
    // server announces its changes (then they come as notifications).
    let announces = announces_list_changes(&peer);
    let stale_after = |ttl: Option<Duration>| {
        ttl.filter(|_| !announces)
            .map(|t| tokio::time::Instant::now() + t.clamp(MIN_LIST_TTL, MAX_LIST_TTL))
    };
    let mut ttl = ttl;
    let mut stale = stale_after(ttl);
    let mut listening = std::pin::pin!(listen_for_changes(
        peer.clone(),
        Arc::clone(&server.list_changed),
        spec.name.clone(),
    ));
    let mut waiting = std::pin::pin!(session.waiting());
    // A break reported by a call of an earlier session is old news.
    server
        .broken
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    loop {
        tokio::select! {
            () = server.broken_notify.notified() => {
                let Some(reason) = server.broken.lock().unwrap_or_else(|p| p.into_inner()).take() else {
                    continue;
                };
                cancel.cancel();
                let _ = tokio::time::timeout(STOP_GRACE, &mut waiting).await;
                return SessionEnd::Ended(reason);
            }
            quit = &mut waiting => {
                return SessionEnd::Ended(match quit {
                    Ok(QuitReason::Closed) => "the session was closed (the process exited or the connection dropped)".to_owned(),
                    Ok(QuitReason::Cancelled) => "the session was cancelled".to_owned(),
                    Ok(QuitReason::JoinError(e)) | Err(e) => format!("the session task failed: {e}"),
                    Ok(other) => format!("the session ended ({other:?})"),
                });
            }
            never = &mut listening => match never {},
            () = async {
                match stale {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => server.list_changed.notify_one(),
            () = async {
                if server.pin_store().is_some() {
                    tokio::time::sleep(super::shared_pins::POLL).await;
                    super::shared_pins::poll(server).await;
                } else {
                    std::future::pending::<()>().await;
                }
            } => {}
            () = server.list_changed.notified() => {
                // A listing that fails is tried again when the last list's
                // `ttlMs` runs out again.
                stale = stale_after(ttl);
                match tokio::time::timeout(spec.startup_timeout, list_tools(&peer)).await {
                    Ok(Ok((tools, fresh_for))) => {
                        ttl = fresh_for;
                        stale = stale_after(ttl);
                        let extras = list_extras(&peer, spec).await;
                        let extras_changed = extras != last_extras;
                        if extras_changed {
                            tracing::info!(mcp_server = %spec.name, prompts = extras.prompts.len(), resources = extras.resources.len(), templates = extras.templates.len(), "MCP server `{}` changed its prompts or resources", spec.name);
                            last_extras = extras;
                        }
                        let rebuild = server.rebuild.swap(false, Ordering::SeqCst);
                        if tools == last && !rebuild && !extras_changed {
                            tracing::debug!(mcp_server = %spec.name, "MCP server `{}` listed the same tools", spec.name);
                            continue;
                        }
                        let listed = if tools == last && !rebuild {
                            Arc::clone(&server.state().listed)
                        } else {
                            last = tools.clone();
                            let listed = super::shared_pins::build(server, tools).await;
                            tracing::info!(mcp_server = %spec.name, tools = listed.len(), "MCP server `{}` changed its tools", spec.name);
                            report_listing(server, &listed);
                            Arc::new(listed)
                        };
                        let extras = Arc::new(last_extras.clone());
                        server.update(|old| ServerState {
                            status: Status::Ready,
                            peer: Some(peer.clone()),
                            listed,
                            extras,
                            attempts: old.attempts,
                            server_info: old.server_info.clone(),
                            last_error: None,
                        });
                        publish(server);
                    }
                    Ok(Err(e)) => tracing::warn!(mcp_server = %spec.name, "listing the tools of MCP server `{}` again failed: {}", spec.name, crate::errors::in_words(&e, spec)),
                    Err(_) => tracing::warn!(mcp_server = %spec.name, "listing the tools of MCP server `{}` again timed out", spec.name),
                }
            }
            () = stop.cancelled() => {
                cancel.cancel();
                let _ = tokio::time::timeout(STOP_GRACE, &mut waiting).await;
                return SessionEnd::Stopped;
            }
        }
    }
}

/// Subscribes a new session to the resources the gateway's clients are
/// subscribed to (a failure is logged: the clients miss updates, nothing
/// else).
async fn resubscribe<T>(server: &Server<T>, peer: &Peer<RoleClient>) {
    let uris: Vec<String> = server
        .subscribed
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .cloned()
        .collect();
    for uri in uris {
        #[allow(deprecated)] // resources/subscribe: 2025-11-25 sessions
        let sent = tokio::time::timeout(
            server.spec.startup_timeout,
            peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri.clone())),
        )
        .await;
        if !matches!(sent, Ok(Ok(_))) {
            tracing::warn!(mcp_server = %server.spec.name, "subscribing again to `{uri}` failed; its updates are not relayed until a client subscribes again");
        }
    }
}

/// `true` when the server says it announces changes to its tool list.
fn announces_list_changes(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|i| i.capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true))
}

/// `true` when the session speaks the stateless revision (2026-07-28 or
/// later), where list changes come over `subscriptions/listen`.
fn is_stateless(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|i| !i.protocol_version.has_initialize())
}

/// Wakes `list_changed` on each `notifications/tools/list_changed` of a
/// stateless session that announces list changes, through a
/// `subscriptions/listen` stream, opened again (after a pause of 1 s,
/// doubling up to 60 s while streams fail or end at once) when it ends
/// while the session lives. On a session with `initialize`, the
/// notifications come to the handler instead, and this waits forever.
async fn listen_for_changes(
    peer: Peer<RoleClient>,
    list_changed: Arc<Notify>,
    server: String,
) -> std::convert::Infallible {
    let announces = announces_list_changes(&peer);
    if !is_stateless(&peer) || !announces {
        return std::future::pending().await;
    }
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .build();
    let mut reopened = false;
    let mut pause = RELISTEN_AFTER;
    loop {
        let began = Instant::now();
        match peer.listen(filter.clone()).await {
            Ok(mut subscription) => {
                tracing::debug!(mcp_server = %server, "listening for tool list changes of MCP server `{server}`");
                if reopened {
                    // A change may have come while no stream was open.
                    list_changed.notify_one();
                }
                while let Ok(Some(notification)) = subscription.next().await {
                    if matches!(
                        notification,
                        rmcp::model::ServerNotification::ToolListChangedNotification(_)
                    ) {
                        list_changed.notify_one();
                    }
                }
            }
            Err(e) => {
                tracing::debug!(mcp_server = %server, "`subscriptions/listen` of MCP server `{server}` failed: {e}")
            }
        }
        reopened = true;
        // A stream that lived long was healthy: open the next one soon.
        // One that failed or ended at once waits longer each time.
        if began.elapsed() >= HEALTHY_AFTER {
            pause = RELISTEN_AFTER;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_RELISTEN_PAUSE);
    }
}

/// The first pause before a `subscriptions/listen` stream that ended is
/// opened again; doubled after each stream that did not last.
const RELISTEN_AFTER: Duration = Duration::from_secs(1);
/// The longest pause between two `subscriptions/listen` streams.
const MAX_RELISTEN_PAUSE: Duration = Duration::from_secs(60);
