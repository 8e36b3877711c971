//! Approvals: calls held until a person decides.
//!
//! A call that needs one (a policy with `action: approve`, or a
//! destructive tool under `approvals.destructive`) asks [`Approvals::ask`]:
//! an approval already given for the same [`Binding`] (caller's key and
//! subject, tool, digest of the arguments, version of the policies) lets it
//! run once;
//! otherwise it joins the open request for that binding or opens one, and
//! waits for a decision up to `approvals.wait`. A person with an
//! `approver` key decides through `/v1/approvals` or the console
//! ([`Approvals::decide`]). A request stays open `approvals.valid_for`:
//! approved after its call stopped waiting, it lets the same call run once
//! when the model makes it again. Changed arguments, another caller or
//! changed policies are another binding, and ask again.
//!
//! Bounded: at most `approvals.max_pending` requests wait at once, and
//! decided ones are forgotten when they expire (or, beyond four times that
//! many, oldest first). Per process, in memory and in the embedded store
//! (its `kept` module: a restart keeps them); with `state.redis`, in Redis
//! (its `shared` module) for every replica and across restarts, a held
//! call seeing the decision within a tenth of a second.

mod kept;
mod shared;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use toolgate_config::format::ApprovalsDecl;

use crate::support::shared::Redis;

/// What an approval is for: one call, by one caller, under one set of
/// policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// The caller's API key (its name), if any.
    pub key: Option<String>,
    /// Who calls (a token's `sub`, else the key's name): people sharing a
    /// key do not share approvals.
    pub subject: Option<String>,
    pub project: Option<String>,
    pub tool: String,
    /// SHA-256 of the call's arguments (canonical JSON, after the
    /// gateway's normalisation): any changed argument is another call.
    pub arguments_sha256: String,
    /// The version of the policies ([`crate::governance::policy::version`]).
    pub policy_version: String,
}

/// Where a request for approval stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// Waiting for a decision.
    Pending,
    /// Approved; the call has not run yet.
    Approved { by: String },
    /// Refused: the call does not run.
    Refused { by: String, reason: Option<String> },
    /// Approved, and the call ran.
    Used { by: String },
}

/// A request for approval, as an approver sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub id: String,
    #[serde(flatten)]
    pub binding: Binding,
    /// The arguments as the audit log shows them (secret properties
    /// redacted), for the approver to read; absent under a `redact` policy
    /// or `audit.arguments: digest|none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    /// Why the call needs an approval (the policy, or the tool's
    /// destructive hint).
    pub why: String,
    /// When it was asked (RFC 3339).
    pub requested_at: String,
    /// Seconds until it is forgotten.
    pub expires_in_s: u64,
    #[serde(flatten)]
    pub status: Status,
}

struct Entry {
    request: Request,
    expires: Instant,
    tx: watch::Sender<Status>,
}

/// What a call that needs an approval does now.
#[derive(Debug)]
pub enum Ask {
    /// An approval was given for this very call: run it.
    Run { by: String },
    /// Wait for the decision on request `id`.
    Wait { id: String, decision: Decision },
}

/// Where a held call learns its decision.
#[derive(Debug)]
pub enum Decision {
    /// This process's request.
    Local(watch::Receiver<Status>),
    /// A request in Redis, read again until decided.
    Shared,
}

/// Why a decision cannot be taken.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecideError {
    #[error("no request for approval `{0}` (unknown, or expired)")]
    Unknown(String),
    #[error("request for approval `{id}` is already decided ({status})")]
    Decided { id: String, status: &'static str },
    #[error("the requests for approval (kept in the shared state) cannot be reached now")]
    Unavailable,
}

/// How a held call ends.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Run {
        by: String,
    },
    /// The reason the model reads.
    Refused(String),
    /// No decision in time; the model reads this.
    NotYet(String),
}

/// The requests for approval: of this process, or of every replica.
#[derive(Default)]
pub struct Approvals {
    entries: Mutex<HashMap<String, Entry>>,
    /// Where this process's requests are kept across restarts, if
    /// anywhere; written under the lock of `entries`.
    file: Option<kept::File>,
    shared: Option<Arc<Redis>>,
}

/// How often a call held on a request in Redis reads its status again.
const SHARED_POLL: Duration = Duration::from_millis(100);

/// What the model reads when the shared state cannot be reached.
fn unavailable() -> String {
    "this call needs an approval, and the requests for approval (kept in the shared state) cannot be reached now; it was not run, try again later".to_owned()
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").finish_non_exhaustive()
    }
}

fn status_name(status: &Status) -> &'static str {
    match status {
        Status::Pending => "pending",
        Status::Approved { .. } => "approved",
        Status::Refused { .. } => "refused",
        Status::Used { .. } => "used",
    }
}

impl Approvals {
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests kept in `redis`, for every replica.
    pub fn shared(redis: Arc<Redis>) -> Self {
        Approvals {
            shared: Some(redis),
            ..Approvals::default()
        }
    }

    /// Requests of this process kept in the file `path` too: those it
    /// holds (not yet expired) are open again, a pending one to be
    /// decided, an approval to be used.
    pub fn kept(path: std::path::PathBuf) -> Self {
        let file = kept::File::new(path);
        let now = Instant::now();
        let entries = file
            .read()
            .into_iter()
            .map(|k| {
                let (tx, _) = watch::channel(k.request.status.clone());
                let entry = Entry {
                    expires: now + kept::until(k.expires_at_ms),
                    request: k.request,
                    tx,
                };
                (entry.request.id.clone(), entry)
            })
            .collect::<HashMap<_, _>>();
        if !entries.is_empty() {
            tracing::info!(
                "{} requests for approval kept before the restart are open again",
                entries.len()
            );
        }
        Approvals {
            entries: Mutex::new(entries),
            file: Some(file),
            shared: None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `entries` (changed) to the store, if there is one.
    fn save(&self, entries: &HashMap<String, Entry>) {
        let Some(file) = &self.file else {
            return;
        };
        let now = Instant::now();
        let now_ms = kept::now_ms();
        file.write(entries.values().map(|e| {
            kept::Kept {
                request: e.request.clone(),
                expires_at_ms: now_ms.saturating_add(
                    u64::try_from(e.expires.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX),
                ),
            }
        }));
    }

    /// A call bound to `binding` needs an approval: run it on one given,
    /// else wait for one. `Err` with the reason the model reads when it was
    /// refused, or when too many calls wait already.
    fn ask_local(
        &self,
        binding: Binding,
        arguments: Option<Value>,
        why: String,
        settings: &ApprovalsDecl,
    ) -> Result<Ask, String> {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| e.expires > now);
        let same = entries
            .values_mut()
            .filter(|e| e.request.binding == binding)
            .max_by_key(|e| e.expires);
        if let Some(entry) = same {
            match entry.request.status.clone() {
                Status::Approved { by } => {
                    entry.request.status = Status::Used { by: by.clone() };
                    entry.tx.send_replace(entry.request.status.clone());
                    self.save(&entries);
                    return Ok(Ask::Run { by });
                }
                Status::Pending => {
                    return Ok(Ask::Wait {
                        id: entry.request.id.clone(),
                        decision: Decision::Local(entry.tx.subscribe()),
                    });
                }
                Status::Refused { by, reason } => return Err(refusal(&by, reason.as_deref())),
                // Used: this call needs an approval of its own.
                Status::Used { .. } => {}
            }
        }
        let pending = entries
            .values()
            .filter(|e| e.request.status == Status::Pending)
            .count();
        if pending >= settings.max_pending {
            return Err(format!(
                "the call needs an approval, and {pending} calls are already waiting for one (approvals.max_pending); it was not run, try again later"
            ));
        }
        // Decided requests beyond the bound go, oldest first.
        let most = settings.max_pending.saturating_mul(4);
        while entries.len() >= most {
            let oldest = entries
                .values()
                .filter(|e| e.request.status != Status::Pending)
                .min_by_key(|e| e.expires)
                .map(|e| e.request.id.clone());
            match oldest {
                Some(id) => entries.remove(&id),
                None => break,
            };
        }
        let id = format!("apr_{}", uuid::Uuid::new_v4().simple());
        let (tx, decision) = watch::channel(Status::Pending);
        let request = Request {
            id: id.clone(),
            binding,
            arguments,
            why,
            requested_at: crate::governance::audit::now_rfc3339(),
            expires_in_s: 0,
            status: Status::Pending,
        };
        tracing::info!(approval = %id, tool = %request.binding.tool, key = ?request.binding.key, "a call waits for approval");
        entries.insert(
            id.clone(),
            Entry {
                request,
                expires: now + settings.valid_for,
                tx,
            },
        );
        self.save(&entries);
        crate::support::metrics::record(|m| m.approval("requested"));
        Ok(Ask::Wait {
            id,
            decision: Decision::Local(decision),
        })
    }

    /// Waits up to `wait` for the decision on `id`, of this process.
    async fn wait_local(
        &self,
        id: &str,
        mut decision: watch::Receiver<Status>,
        wait: Duration,
    ) -> Outcome {
        // The borrow `wait_for` gives is dropped at once: `take` writes to
        // the same channel.
        let decided = tokio::time::timeout(wait, decision.wait_for(|s| *s != Status::Pending))
            .await
            .map(|r| r.map(drop));
        match decided {
            Err(_) => not_yet(id, wait),
            Ok(Err(_)) => expired(id),
            Ok(Ok(_)) => self.take(id),
        }
    }

    /// The decision on `id`, taken by this call: an approval is used once.
    fn take(&self, id: &str) -> Outcome {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(id) else {
            return expired(id);
        };
        let before = entry.request.status.clone();
        if let Status::Approved { by } = &before {
            entry.request.status = Status::Used { by: by.clone() };
            entry.tx.send_replace(entry.request.status.clone());
            self.save(&entries);
        }
        taken(id, before)
    }

    /// Approves (or refuses) request `id` on behalf of `by`, here.
    fn decide_local(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        reason: Option<String>,
    ) -> Result<Request, DecideError> {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| e.expires > now);
        let entry = entries
            .get_mut(id)
            .ok_or_else(|| DecideError::Unknown(id.to_owned()))?;
        if entry.request.status != Status::Pending {
            return Err(DecideError::Decided {
                id: id.to_owned(),
                status: status_name(&entry.request.status),
            });
        }
        entry.request.status = if approve {
            Status::Approved { by: by.to_owned() }
        } else {
            Status::Refused {
                by: by.to_owned(),
                reason,
            }
        };
        entry.tx.send_replace(entry.request.status.clone());
        let decided = view(entry, now);
        self.save(&entries);
        tracing::info!(approval = %id, by, approve, "a request for approval is decided");
        crate::support::metrics::record(|m| {
            m.approval(if approve { "approved" } else { "refused" })
        });
        Ok(decided)
    }

    /// Every open request of this process, newest first.
    fn list_local(&self) -> Vec<Request> {
        let now = Instant::now();
        let mut entries = self.lock();
        entries.retain(|_, e| e.expires > now);
        let mut out: Vec<Request> = entries.values().map(|e| view(e, now)).collect();
        out.sort_by(|a, b| {
            b.requested_at
                .cmp(&a.requested_at)
                .then_with(|| a.expires_in_s.cmp(&b.expires_in_s))
        });
        out
    }

    /// Request `id` of this process, if open.
    fn get_local(&self, id: &str) -> Option<Request> {
        let now = Instant::now();
        self.lock()
            .get(id)
            .filter(|e| e.expires > now)
            .map(|e| view(e, now))
    }
}

impl Approvals {
    /// A call bound to `binding` needs an approval: run it on one given,
    /// else wait for one. `Err` with the reason the model reads when it was
    /// refused, when too many calls wait already, or when the shared
    /// state is out of reach (a held call is never let through unasked).
    pub async fn ask(
        &self,
        binding: Binding,
        arguments: Option<Value>,
        why: String,
        settings: &ApprovalsDecl,
    ) -> Result<Ask, String> {
        let Some(redis) = &self.shared else {
            return self.ask_local(binding, arguments, why, settings);
        };
        let digest = crate::governance::audit::sha256_hex(
            &serde_json::to_string(&binding).unwrap_or_default(),
        );
        let request = Request {
            id: format!("apr_{}", uuid::Uuid::new_v4().simple()),
            binding,
            arguments,
            why,
            requested_at: crate::governance::audit::now_rfc3339(),
            expires_in_s: 0,
            status: Status::Pending,
        };
        let asked = shared::ask(
            redis,
            &digest,
            &request,
            settings.valid_for,
            settings.max_pending,
        )
        .await
        .map_err(|_| unavailable())?;
        match asked {
            shared::Asked::Run { by } => Ok(Ask::Run { by }),
            shared::Asked::Refused { by, reason } => Err(refusal(&by, reason.as_deref())),
            shared::Asked::Full(pending) => Err(format!(
                "the call needs an approval, and {pending} calls are already waiting for one (approvals.max_pending); it was not run, try again later"
            )),
            shared::Asked::Wait { id } => {
                if id == request.id {
                    tracing::info!(approval = %id, tool = %request.binding.tool, key = ?request.binding.key, "a call waits for approval");
                    crate::support::metrics::record(|m| m.approval("requested"));
                }
                Ok(Ask::Wait {
                    id,
                    decision: Decision::Shared,
                })
            }
        }
    }

    /// Waits up to `wait` for the decision on `id`.
    pub async fn wait(&self, id: &str, decision: Decision, wait: Duration) -> Outcome {
        let (Decision::Shared, Some(redis)) = (&decision, &self.shared) else {
            return match decision {
                Decision::Local(rx) => self.wait_local(id, rx, wait).await,
                Decision::Shared => expired(id),
            };
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match shared::status_of(redis, id).await {
                Err(_) => return Outcome::Refused(unavailable()),
                Ok(None) => return expired(id),
                Ok(Some(Status::Pending)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep_until(
                        deadline.min(tokio::time::Instant::now() + SHARED_POLL),
                    )
                    .await;
                }
                Ok(Some(Status::Pending)) => return not_yet(id, wait),
                Ok(Some(_)) => {
                    return match shared::take(redis, id).await {
                        Err(_) => Outcome::Refused(unavailable()),
                        Ok(None) => expired(id),
                        Ok(Some(before)) => taken(id, before),
                    };
                }
            }
        }
    }

    /// Approves (or refuses) request `id` on behalf of `by`.
    pub async fn decide(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        reason: Option<String>,
    ) -> Result<Request, DecideError> {
        let Some(redis) = &self.shared else {
            return self.decide_local(id, approve, by, reason);
        };
        let to = if approve {
            Status::Approved { by: by.to_owned() }
        } else {
            Status::Refused {
                by: by.to_owned(),
                reason,
            }
        };
        match shared::decide(redis, id, &to).await {
            Err(_) => Err(DecideError::Unavailable),
            Ok(shared::Decided::Unknown) => Err(DecideError::Unknown(id.to_owned())),
            Ok(shared::Decided::Already(status)) => Err(DecideError::Decided {
                id: id.to_owned(),
                status: match status.as_str() {
                    "approved" => "approved",
                    "refused" => "refused",
                    "used" => "used",
                    _ => "pending",
                },
            }),
            Ok(shared::Decided::Done) => {
                tracing::info!(approval = %id, by, approve, "a request for approval is decided");
                crate::support::metrics::record(|m| {
                    m.approval(if approve { "approved" } else { "refused" })
                });
                match shared::get(redis, id).await {
                    Ok(Some(request)) => Ok(request),
                    Ok(None) => Err(DecideError::Unknown(id.to_owned())),
                    Err(_) => Err(DecideError::Unavailable),
                }
            }
        }
    }

    /// Every open request, newest first (of every replica with
    /// `state.redis`: at most four times `max_pending`, the newest).
    pub async fn list(&self, settings: &ApprovalsDecl) -> Vec<Request> {
        match &self.shared {
            None => self.list_local(),
            Some(redis) => shared::list(redis, settings.max_pending.saturating_mul(4))
                .await
                .unwrap_or_default(),
        }
    }

    /// Request `id`, if open.
    pub async fn get(&self, id: &str) -> Option<Request> {
        match &self.shared {
            None => self.get_local(id),
            Some(redis) => shared::get(redis, id).await.ok().flatten(),
        }
    }
}

/// What the model reads when no decision came in time.
fn not_yet(id: &str, wait: Duration) -> Outcome {
    Outcome::NotYet(format!(
        "this call needs a person's approval and none came within {}; it was not run. Request `{id}` stays open: once it is approved, make the same call again (same arguments) and it runs",
        humantime_serde::re::humantime::format_duration(wait)
    ))
}

fn expired(id: &str) -> Outcome {
    Outcome::Refused(format!(
        "the request for approval `{id}` expired before a decision; the call was not run"
    ))
}

/// How a held call ends, by the status its request had when it took it.
fn taken(id: &str, before: Status) -> Outcome {
    match before {
        Status::Approved { by } => Outcome::Run { by },
        Status::Refused { by, reason } => Outcome::Refused(refusal(&by, reason.as_deref())),
        Status::Used { .. } => Outcome::Refused(format!(
            "the approval `{id}` was used by an identical call that ran first; this one was not run (make it again to ask for another approval)"
        )),
        Status::Pending => Outcome::NotYet(format!(
            "request for approval `{id}` is still pending; the call was not run"
        )),
    }
}

fn view(entry: &Entry, now: Instant) -> Request {
    let mut request = entry.request.clone();
    request.expires_in_s = entry.expires.saturating_duration_since(now).as_secs();
    request
}

fn refusal(by: &str, reason: Option<&str>) -> String {
    match reason {
        Some(reason) if !reason.trim().is_empty() => {
            format!("refused by approver `{by}`: {reason}")
        }
        _ => format!("refused by approver `{by}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(args: &str) -> Binding {
        Binding {
            key: Some("alice".into()),
            subject: Some("alice".into()),
            project: None,
            tool: "post_payment".into(),
            arguments_sha256: args.into(),
            policy_version: "v1".into(),
        }
    }

    fn settings(max_pending: usize) -> ApprovalsDecl {
        ApprovalsDecl {
            max_pending,
            ..ApprovalsDecl::default()
        }
    }

    /// A call of `binding(args)` asked for, and held: its request.
    fn held(a: &Approvals, args: &str, s: &ApprovalsDecl) -> (String, watch::Receiver<Status>) {
        wait_of(
            a.ask_local(binding(args), None, "policy".into(), s)
                .unwrap(),
        )
    }

    fn wait_of(ask: Ask) -> (String, watch::Receiver<Status>) {
        match ask {
            Ask::Wait {
                id,
                decision: Decision::Local(rx),
            } => (id, rx),
            Ask::Wait { .. } => panic!("expected a request of this process"),
            Ask::Run { .. } => panic!("expected to wait"),
        }
    }

    #[tokio::test]
    async fn an_approved_call_runs_once_and_a_changed_one_asks_again() {
        let a = Approvals::new();
        let s = settings(10);
        let (id, rx) = held(&a, "d1", &s);
        let waiting = a.wait_local(&id, rx, Duration::from_secs(5));
        let decide = async {
            tokio::task::yield_now().await;
            a.decide_local(&id, true, "bob", None).unwrap();
        };
        let (outcome, ()) = tokio::join!(waiting, decide);
        assert_eq!(outcome, Outcome::Run { by: "bob".into() });
        assert_eq!(
            a.get_local(&id).unwrap().status,
            Status::Used { by: "bob".into() }
        );
        // Used: the same call again needs a new approval.
        let (again, _) = held(&a, "d1", &s);
        assert_ne!(again, id);
        // Changed arguments: another request.
        let (other, _) = held(&a, "d2", &s);
        assert_ne!(other, again);
        assert_eq!(
            a.decide_local(&id, true, "bob", None).unwrap_err(),
            DecideError::Decided {
                id: id.clone(),
                status: "used"
            }
        );
        assert!(matches!(
            a.decide_local("apr_nope", true, "bob", None),
            Err(DecideError::Unknown(_))
        ));
    }

    #[tokio::test]
    async fn an_approval_after_the_wait_lets_the_same_call_run_later() {
        let a = Approvals::new();
        let s = settings(10);
        let (id, rx) = held(&a, "d1", &s);
        let outcome = a.wait_local(&id, rx, Duration::from_millis(10)).await;
        assert!(
            matches!(outcome, Outcome::NotYet(ref m) if m.contains(&id)),
            "{outcome:?}"
        );
        // Asked again while pending: the same request.
        let (same, _) = held(&a, "d1", &s);
        assert_eq!(same, id);
        a.decide_local(&id, true, "bob", None).unwrap();
        assert!(matches!(
            a.ask_local(binding("d1"), None, "policy".into(), &s)
                .unwrap(),
            Ask::Run { .. }
        ));
    }

    #[tokio::test]
    async fn a_refusal_is_read_by_the_model_and_sticks() {
        let a = Approvals::new();
        let s = settings(10);
        let (id, rx) = held(&a, "d1", &s);
        a.decide_local(&id, false, "bob", Some("too much".into()))
            .unwrap();
        let outcome = a.wait_local(&id, rx, Duration::from_secs(1)).await;
        assert_eq!(
            outcome,
            Outcome::Refused("refused by approver `bob`: too much".into())
        );
        assert_eq!(
            a.ask_local(binding("d1"), None, "policy".into(), &s)
                .unwrap_err(),
            "refused by approver `bob`: too much"
        );
    }

    #[test]
    fn pending_requests_are_bounded() {
        let a = Approvals::new();
        let s = settings(2);
        a.ask_local(binding("1"), None, "p".into(), &s).unwrap();
        a.ask_local(binding("2"), None, "p".into(), &s).unwrap();
        let e = a.ask_local(binding("3"), None, "p".into(), &s).unwrap_err();
        assert!(e.contains("max_pending"), "{e}");
        for r in a.list_local() {
            a.decide_local(&r.id, false, "bob", None).unwrap();
        }
        // Decided ones are kept to four times the bound.
        for i in 0..20 {
            if let Ok(Ask::Wait { id, .. }) =
                a.ask_local(binding(&format!("x{i}")), None, "p".into(), &s)
            {
                a.decide_local(&id, false, "bob", None).unwrap();
            }
        }
        let kept = a.list_local();
        assert!((6..=8).contains(&kept.len()), "{}", kept.len());
        assert!(kept.iter().any(|r| r.binding.arguments_sha256 == "x19"));
    }

    #[test]
    fn expired_requests_are_forgotten() {
        let a = Approvals::new();
        let s = ApprovalsDecl {
            valid_for: Duration::ZERO,
            ..settings(2)
        };
        let (id, _) = wait_of(a.ask_local(binding("1"), None, "p".into(), &s).unwrap());
        assert!(a.get_local(&id).is_none());
        assert!(a.list_local().is_empty());
    }

    #[tokio::test]
    async fn requests_outlive_the_process_that_kept_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("approvals/approvals.json");
        let s = settings(10);
        let first = Approvals::kept(path.clone());
        let (open, _) = held(&first, "d1", &s);
        let (approved, _) = held(&first, "d2", &s);
        let (refused, _) = held(&first, "d3", &s);
        first.decide_local(&approved, true, "bob", None).unwrap();
        first
            .decide_local(&refused, false, "bob", Some("no".into()))
            .unwrap();
        drop(first);
        // The next process: the pending request is decided there, the
        // approval is used there (once), the refusal sticks.
        let next = Approvals::kept(path.clone());
        assert_eq!(next.list_local().len(), 3);
        let left = next.get_local(&open).unwrap();
        assert_eq!(left.status, Status::Pending);
        assert_eq!(left.binding, binding("d1"));
        assert!(left.expires_in_s > 800, "{}", left.expires_in_s);
        assert!(matches!(
            next.ask_local(binding("d2"), None, "p".into(), &s).unwrap(),
            Ask::Run { ref by } if by == "bob"
        ));
        assert_eq!(
            next.ask_local(binding("d3"), None, "p".into(), &s)
                .unwrap_err(),
            "refused by approver `bob`: no"
        );
        next.decide_local(&open, true, "carol", None).unwrap();
        drop(next);
        let third = Approvals::kept(path.clone());
        assert!(matches!(
            third.ask_local(binding("d1"), None, "p".into(), &s).unwrap(),
            Ask::Run { ref by } if by == "carol"
        ));
        // Used, in the next: asks again.
        let third_again = Approvals::kept(path.clone());
        let (again, _) = held(&third_again, "d2", &s);
        assert_ne!(again, approved);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Expired requests are not read back; a file that is not a store
        // is moved aside.
        let gone = ApprovalsDecl {
            valid_for: Duration::ZERO,
            ..settings(10)
        };
        let short = Approvals::kept(dir.path().join("short.json"));
        held(&short, "d1", &gone);
        assert!(
            Approvals::kept(dir.path().join("short.json"))
                .list_local()
                .is_empty()
        );
        std::fs::write(&path, b"[{").unwrap();
        assert!(Approvals::kept(path.clone()).list_local().is_empty());
        assert_eq!(
            std::fs::read(path.with_extension("json.bad")).unwrap(),
            b"[{"
        );
    }
}
