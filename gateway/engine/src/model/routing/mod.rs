//! Model routes: which deployments (targets) serve a model name, the
//! order a request tries them in, and which of them a conversation
//! belongs to.
//!
//! A route has one target (`upstream:`) or several (`targets:`). A request
//! on a route of several goes to one of the healthy targets of the lowest
//! priority, drawn by weight, then on a failure that another deployment
//! may not share (a connection error, a timeout, 429, 5xx) to the next,
//! each tried once; the failing one counts toward its cooldown
//! ([`Health`]). A conversation carrying opaque state one target made (a
//! thinking signature, encrypted reasoning, a thought signature) goes to
//! that target first ([`Provenance`]); when it cannot, the state is left
//! out with a notice, since no other deployment can read it.

mod health;
mod provenance;

use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobMatcher};
use toolgate_config::format::{CooldownDecl, FormatterKind, PriceDecl};

use crate::conversation::{Item, Notices, Turn};
use crate::model::prompt::PromptTemplate;
use crate::model::upstream::{Upstream, UpstreamError};
use crate::support::shared::Redis;

pub use health::Health;
pub use provenance::Provenance;

/// One deployment a route may send a request to.
#[derive(Debug)]
pub struct Target {
    pub upstream: Arc<Upstream>,
    /// The model name it is sent; `None`: the name the client asked for.
    pub model: Option<String>,
    pub weight: u32,
    pub priority: u32,
}

impl Target {
    /// A route's only target.
    pub fn only(upstream: Arc<Upstream>, model: Option<String>) -> Target {
        Target {
            upstream,
            model,
            weight: 1,
            priority: 0,
        }
    }
}

/// How a model is served: the target in use, and the route's others.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub upstream: Arc<Upstream>,
    /// The model name to send upstream.
    pub model: String,
    pub formatter: FormatterKind,
    /// The structured-prompt template of the route, if it has its own.
    pub template: Option<Arc<PromptTemplate>>,
    /// Every target of the route, in the order declared.
    pub targets: Arc<[Target]>,
    /// The route's cooldown and prices, shared with the route.
    pub terms: Arc<Terms>,
    /// The model name the client asked for.
    asked: String,
}

/// What a route declares beside its targets: shared by every request the
/// route serves (a request's state lives as long as its stream).
#[derive(Debug, Clone, Default)]
pub struct Terms {
    pub cooldown: CooldownDecl,
    /// The route's own prices (else the shipped table's for the model).
    pub price: Option<PriceDecl>,
}

impl Resolved {
    /// The route has several targets.
    pub fn several(&self) -> bool {
        self.targets.len() > 1
    }

    /// The target in use, as `upstream/model`.
    pub fn key(&self) -> String {
        key(&self.upstream.name, &self.model)
    }

    /// Target `i`, as `upstream/model`.
    pub fn key_of(&self, i: usize) -> Option<String> {
        let t = self.targets.get(i)?;
        Some(key(&t.upstream.name, self.model_of(t)))
    }

    fn model_of<'a>(&'a self, t: &'a Target) -> &'a str {
        t.model.as_deref().unwrap_or(&self.asked)
    }

    /// Makes target `i` the one in use.
    pub fn switch(&mut self, i: usize) {
        if let Some(t) = self.targets.get(i) {
            self.model = self.model_of(t).to_owned();
            self.upstream = Arc::clone(&t.upstream);
        }
    }
}

/// A target's name in provenance, health and reports: `upstream/model`.
pub fn key(upstream: &str, model: &str) -> String {
    format!("{upstream}/{model}")
}

/// What a glob route's pattern matches.
#[derive(Debug)]
enum Matcher {
    /// `*`: every name (matched without running a glob).
    Any,
    Glob(GlobMatcher),
}

impl Matcher {
    fn is_match(&self, model: &str) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::Glob(g) => g.is_match(model),
        }
    }
}

#[derive(Debug)]
struct Route {
    pattern: String,
    glob: Option<Matcher>,
    targets: Arc<[Target]>,
    terms: Arc<Terms>,
    formatter: FormatterKind,
    template: Option<Arc<PromptTemplate>>,
}

/// Every upstream and the model routes, first match wins.
#[derive(Debug, Default)]
pub struct Upstreams {
    upstreams: Vec<Arc<Upstream>>,
    routes: Vec<Route>,
}

impl Upstreams {
    /// Builds from declarations already validated by the catalog.
    pub fn new(upstreams: Vec<Arc<Upstream>>) -> Upstreams {
        Upstreams {
            upstreams,
            routes: Vec::new(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.name == name)
    }

    pub fn is_empty(&self) -> bool {
        self.upstreams.is_empty()
    }

    pub fn upstreams(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        self.upstreams.iter()
    }

    /// Adds a route of one target or more (in the order declared).
    /// `pattern` is an exact name or a glob.
    pub fn add_route(
        &mut self,
        pattern: &str,
        targets: Vec<Target>,
        cooldown: CooldownDecl,
        formatter: FormatterKind,
        template: Option<Arc<PromptTemplate>>,
        price: Option<PriceDecl>,
    ) -> Result<(), String> {
        if targets.is_empty() {
            return Err("a route needs a target".into());
        }
        let glob = if pattern == "*" {
            Some(Matcher::Any)
        } else if pattern.contains(['*', '?', '[']) {
            Some(Matcher::Glob(
                Glob::new(pattern)
                    .map_err(|e| e.kind().to_string())?
                    .compile_matcher(),
            ))
        } else {
            None
        };
        self.routes.push(Route {
            pattern: pattern.to_owned(),
            glob,
            targets: targets.into(),
            terms: Arc::new(Terms { cooldown, price }),
            formatter,
            template,
        });
        Ok(())
    }

    /// How `model` is served (its first declared target in use), or
    /// `None` when no route matches.
    pub fn resolve(&self, model: &str) -> Option<Resolved> {
        let r = self.routes.iter().find(|r| match &r.glob {
            Some(g) => g.is_match(model),
            None => r.pattern == model,
        })?;
        let first = r.targets.first()?;
        Some(Resolved {
            upstream: Arc::clone(&first.upstream),
            model: first.model.clone().unwrap_or_else(|| model.to_owned()),
            formatter: r.formatter,
            template: r.template.clone(),
            targets: Arc::clone(&r.targets),
            terms: Arc::clone(&r.terms),
            asked: model.to_owned(),
        })
    }

    /// The names routes spell out (exact names and aliases), and the glob
    /// routes' upstreams' models the globs match.
    pub async fn list_models(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .routes
            .iter()
            .filter(|r| r.glob.is_none())
            .map(|r| (r.pattern.clone(), r.targets[0].upstream.name.clone()))
            .collect();
        let mut asked: Vec<&str> = Vec::new();
        for route in self.routes.iter().filter(|r| r.glob.is_some()) {
            let upstream = &route.targets[0].upstream;
            if asked.contains(&upstream.name.as_str()) {
                continue;
            }
            asked.push(&upstream.name);
            match upstream.list_models().await {
                Ok(models) => {
                    for m in models {
                        if out.iter().all(|(n, _)| n != &m)
                            && self
                                .resolve(&m)
                                .is_some_and(|r| Arc::ptr_eq(&r.upstream, upstream))
                        {
                            out.push((m, upstream.name.clone()));
                        }
                    }
                }
                Err(e) => tracing::warn!("cannot list models: {e}"),
            }
        }
        out
    }
}

/// Whether a failed call may go to another target: the deployment could
/// not be reached, did not answer in time, is rate limited or failing —
/// not a request it refused, which another would refuse too.
pub fn fails_over(e: &UpstreamError) -> bool {
    match e {
        UpstreamError::Status { status, .. } => status.as_u16() == 429 || status.is_server_error(),
        UpstreamError::Timeout { .. } | UpstreamError::Unreachable { .. } => true,
        UpstreamError::Invalid { .. } | UpstreamError::TooLarge { .. } => false,
    }
}

/// One try of one target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Attempt {
    /// `upstream/model`.
    pub target: String,
    /// `ok`, or the error's code (`upstream_rate_limited`…).
    pub outcome: &'static str,
}

/// Attempts as a header value: `a/m=upstream_unavailable, b/m=ok`.
pub fn attempts_header(attempts: &[Attempt]) -> Option<String> {
    (!attempts.is_empty()).then(|| {
        attempts
            .iter()
            .map(|a| format!("{}={}", a.target, a.outcome))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// The gateway's routing state, shared by every request (and, through
/// `state.redis`, every replica): the targets' health and which target
/// made which opaque state.
#[derive(Debug)]
pub struct Router {
    pub health: Health,
    pub provenance: Provenance,
}

impl Default for Router {
    fn default() -> Self {
        Router::new(None)
    }
}

/// The most opaque values of a request looked up for its affinity (the
/// latest first): bounded work per request whatever its history.
const AFFINITY_LOOKUPS: usize = 8;

impl Router {
    pub fn new(redis: Option<Arc<Redis>>) -> Router {
        Router {
            health: Health::new(redis.clone()),
            provenance: Provenance::new(redis),
        }
    }

    /// The order a request on `r` tries its targets in (indices into
    /// `r.targets`): `affinity`'s target first unless it cools down; then
    /// by priority, the healthy targets of each drawn by weight; the
    /// cooling ones last (a request is never refused for want of a
    /// healthy target).
    pub async fn order(&self, r: &Resolved, affinity: Option<&str>) -> Vec<usize> {
        if !r.several() {
            return vec![0];
        }
        let mut cooling = Vec::with_capacity(r.targets.len());
        for i in 0..r.targets.len() {
            let key = r.key_of(i).unwrap_or_default();
            cooling.push(self.health.cooling(&key).await);
        }
        let preferred = affinity
            .and_then(|a| (0..r.targets.len()).find(|&i| r.key_of(i).as_deref() == Some(a)));
        order(&r.targets, &cooling, preferred, &mut fastrand::Rng::new())
    }

    /// The target of `r` that made the latest opaque state of `turns`
    /// that a target of it made, if any.
    pub async fn affinity(&self, r: &Resolved, turns: &[Turn]) -> Option<String> {
        if !r.several() {
            return None;
        }
        let keys: Vec<String> = (0..r.targets.len()).filter_map(|i| r.key_of(i)).collect();
        let mut looked = 0;
        for turn in turns.iter().rev() {
            if let Some(maker) = turn.origin.as_ref().and_then(|o| o.made_by.as_ref())
                && keys.contains(maker)
            {
                return Some(maker.clone());
            }
            for data in opaque_of(turn).into_iter().rev() {
                if looked == AFFINITY_LOOKUPS {
                    return None;
                }
                looked += 1;
                if let Some(maker) = self.provenance.maker(data).await
                    && keys.iter().any(|k| **k == *maker)
                {
                    return Some(maker.to_string());
                }
            }
        }
        None
    }

    /// Remembers that target `key` made the opaque state of `items`.
    pub async fn remember(&self, items: &[Item], key: &str) {
        for data in items.iter().filter_map(opaque_data) {
            self.provenance.remember(data, key).await;
        }
    }
}

/// The opaque state an item carries (a reasoning's, a call's).
fn opaque_data(item: &Item) -> Option<&str> {
    match item {
        Item::Reasoning(r) => r.opaque.as_ref().map(|o| o.data.as_str()),
        Item::Call(c) => c.opaque.as_ref().map(|o| o.data.as_str()),
        _ => None,
    }
}

fn opaque_of(turn: &Turn) -> Vec<&str> {
    turn.items.iter().filter_map(opaque_data).collect()
}

/// The order of `targets` given which cool down and which is preferred.
fn order(
    targets: &[Target],
    cooling: &[bool],
    preferred: Option<usize>,
    rng: &mut fastrand::Rng,
) -> Vec<usize> {
    let mut priorities: Vec<u32> = targets.iter().map(|t| t.priority).collect();
    priorities.sort_unstable();
    priorities.dedup();
    let mut out = Vec::with_capacity(targets.len());
    if let Some(p) = preferred.filter(|&p| !cooling.get(p).copied().unwrap_or(true)) {
        out.push(p);
    }
    for p in priorities {
        let mut group: Vec<usize> = (0..targets.len())
            .filter(|&i| targets[i].priority == p && !cooling[i] && !out.contains(&i))
            .collect();
        // A draw by weight, then another among the rest, and so on.
        while !group.is_empty() {
            let total: u64 = group
                .iter()
                .map(|&i| u64::from(targets[i].weight.max(1)))
                .sum();
            let mut x = rng.u64(0..total);
            let mut pick = 0;
            for (n, &i) in group.iter().enumerate() {
                let w = u64::from(targets[i].weight.max(1));
                if x < w {
                    pick = n;
                    break;
                }
                x -= w;
            }
            out.push(group.remove(pick));
        }
    }
    let mut rest: Vec<usize> = (0..targets.len()).filter(|i| !out.contains(i)).collect();
    rest.sort_by_key(|&i| targets[i].priority);
    out.extend(rest);
    out
}

/// `turns` for target `keep` when the conversation's opaque state belongs
/// to another target: that state left out (turns another target wrote are
/// written again from their items), with a notice.
pub fn without_others_state(turns: &[Turn], keep: &str, notices: &mut Notices) -> Vec<Turn> {
    let mut left_out = false;
    let out = turns
        .iter()
        .map(|turn| {
            let own = turn
                .origin
                .as_ref()
                .and_then(|o| o.made_by.as_deref())
                .is_some_and(|m| m == keep);
            if own || !turn.items.iter().any(|i| opaque_data(i).is_some()) {
                return turn.clone();
            }
            left_out = true;
            let items = turn
                .items
                .iter()
                .filter(|i| !matches!(i, Item::Reasoning(r) if r.opaque.is_some()))
                .cloned()
                .map(|i| match i {
                    Item::Call(mut c) => {
                        c.opaque = None;
                        Item::Call(c)
                    }
                    other => other,
                })
                .collect();
            Turn {
                role: turn.role,
                items,
                origin: None,
            }
        })
        .collect();
    if left_out {
        notices.add(format!(
            "reasoning state made by another deployment of this model (its signatures or encrypted reasoning) cannot be read by `{keep}`, which answered in its place, and was left out"
        ));
    }
    out
}

/// How long a target cools down after a failure, if it does.
pub fn cooldown_for(
    failures: u32,
    retry_after: Option<Duration>,
    decl: &CooldownDecl,
) -> Option<Duration> {
    match retry_after {
        Some(ra) if !ra.is_zero() => Some(ra.min(decl.max_retry_after)),
        _ if decl.failures > 0 && failures >= decl.failures => Some(decl.duration),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::upstream::Timeouts;
    use toolgate_config::format::RetryDecl;

    fn up(name: &str) -> Arc<Upstream> {
        Arc::new(
            Upstream::new(
                name.into(),
                "http://127.0.0.1:1/v1/",
                None,
                Timeouts {
                    connect: Duration::from_secs(1),
                    read: Duration::from_secs(1),
                    total: Duration::from_secs(1),
                },
                RetryDecl::default(),
            )
            .unwrap(),
        )
    }

    fn one(name: &str, model: Option<&str>) -> Vec<Target> {
        vec![Target::only(up(name), model.map(str::to_owned))]
    }

    #[test]
    fn routes_match_in_order() {
        let mut u = Upstreams::new(vec![up("a"), up("b")]);
        let fc = FormatterKind::FunctionCalling;
        let cd = CooldownDecl::default;
        u.add_route("fast", one("a", Some("gpt-4o-mini")), cd(), fc, None, None)
            .unwrap();
        u.add_route("llama-*", one("b", None), cd(), fc, None, None)
            .unwrap();
        u.add_route("*", one("a", None), cd(), fc, None, None)
            .unwrap();
        let r = u.resolve("fast").unwrap();
        assert_eq!(
            (r.upstream.name.as_str(), r.model.as_str()),
            ("a", "gpt-4o-mini")
        );
        let r = u.resolve("llama-3").unwrap();
        assert_eq!(
            (r.upstream.name.as_str(), r.model.as_str()),
            ("b", "llama-3")
        );
        assert!(!r.several());
        assert_eq!(u.resolve("other").unwrap().upstream.name, "a");
        // `*` matches what the glob `*` matches: any name, slashes too.
        let star = Glob::new("*").unwrap().compile_matcher();
        for name in ["org/model:free", "", "llama"] {
            assert!(star.is_match(name) && Matcher::Any.is_match(name));
        }
        assert_eq!(u.resolve("org/model:free").unwrap().upstream.name, "a");
        assert_eq!(up("x").base_url, "http://127.0.0.1:1/v1");
    }

    fn targets(spec: &[(u32, u32)]) -> Vec<Target> {
        spec.iter()
            .enumerate()
            .map(|(i, &(weight, priority))| Target {
                upstream: up(&format!("t{i}")),
                model: None,
                weight,
                priority,
            })
            .collect()
    }

    #[test]
    fn weights_share_the_first_place_and_priorities_come_after() {
        let t = targets(&[(3, 0), (1, 0), (5, 1)]);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut first = [0u32; 3];
        for _ in 0..10_000 {
            let o = order(&t, &[false; 3], None, &mut rng);
            assert_eq!(o.len(), 3);
            assert_eq!(o[2], 2, "the higher priority comes last: {o:?}");
            first[o[0]] += 1;
        }
        let share = f64::from(first[0]) / 10_000.0;
        assert!((0.73..=0.77).contains(&share), "{share}");
    }

    #[test]
    fn cooling_targets_go_last_and_affinity_first() {
        let t = targets(&[(1, 0), (1, 0), (1, 1)]);
        let mut rng = fastrand::Rng::with_seed(1);
        assert_eq!(order(&t, &[true, false, false], None, &mut rng), [1, 2, 0]);
        assert_eq!(order(&t, &[false, false, false], Some(2), &mut rng)[0], 2);
        // A preferred target that cools down is not preferred.
        assert_eq!(
            order(&t, &[false, true, false], Some(1), &mut rng),
            [0, 2, 1]
        );
        assert_eq!(order(&t, &[true, true, true], None, &mut rng), [0, 1, 2]);
    }

    #[test]
    fn a_cooldown_follows_retry_after_or_the_failures_in_a_row() {
        let d = CooldownDecl::default();
        assert_eq!(cooldown_for(1, None, &d), None);
        assert_eq!(cooldown_for(3, None, &d), Some(Duration::from_secs(30)));
        assert_eq!(
            cooldown_for(1, Some(Duration::from_secs(7)), &d),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            cooldown_for(1, Some(Duration::from_secs(3600)), &d),
            Some(d.max_retry_after)
        );
    }

    #[test]
    fn only_what_another_deployment_might_serve_fails_over() {
        let status = |code: u16| UpstreamError::Status {
            upstream: "u".into(),
            status: http::StatusCode::from_u16(code).unwrap(),
            message: String::new(),
            retry_after: None,
        };
        assert!(fails_over(&status(429)));
        assert!(fails_over(&status(503)));
        assert!(fails_over(&status(529)));
        assert!(!fails_over(&status(400)));
        assert!(!fails_over(&status(401)));
        assert!(fails_over(&UpstreamError::Unreachable {
            upstream: "u".into(),
            message: "reset".into()
        }));
        assert!(!fails_over(&UpstreamError::Invalid {
            upstream: "u".into(),
            message: "x".into()
        }));
    }
}
