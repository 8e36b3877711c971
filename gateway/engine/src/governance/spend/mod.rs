//! What model calls cost and who spent it: prices ([`prices`]), budgets
//! ([`budgets`]) and spend by the hour ([`ledger`]), counted where the
//! calls happen (each model call of a loop, a proxied request, each tool
//! call) and kept in the embedded store (a file, written a second after a
//! change and at shutdown) or, with `state.redis`, in Redis for every
//! replica.

pub mod budgets;
pub mod ledger;
pub mod prices;
mod who;

pub use self::who::Who;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use toolgate_config::format::{SpendDecl, Unavailable};

use self::budgets::{Budget, Exceeded};
use self::ledger::{Dimension, Group, GroupKey, GroupRef, HOUR, Totals};
use self::prices::{NanoUsd, Price};
use crate::conversation::Usage;
use crate::support::shared::Redis;

/// What the configuration says of spend: the budgets and whether the
/// shipped prices apply.
#[derive(Debug, Clone)]
pub struct Rules {
    pub budgets: Vec<Budget>,
    pub shipped_prices: bool,
    /// Seconds spend by the hour is kept.
    pub keep_secs: i64,
    /// The embedded store's file.
    pub store: Option<PathBuf>,
}

impl Default for Rules {
    fn default() -> Rules {
        Rules::new(&SpendDecl::default())
    }
}

impl Rules {
    pub fn new(decl: &SpendDecl) -> Rules {
        Rules {
            budgets: decl.budgets.iter().map(Budget::from).collect(),
            shipped_prices: decl.shipped_prices,
            keep_secs: i64::from(decl.keep_days.max(1)) * 86_400,
            store: None,
        }
    }

    /// The same, kept in the folder `dir` (the embedded store).
    pub fn stored_in(mut self, dir: PathBuf) -> Rules {
        self.store = Some(dir.join("spend.json"));
        self
    }

    /// The price of `model` on a route with `route_price` (its own).
    pub fn price(&self, route_price: Option<Price>, model: &str) -> Option<Price> {
        route_price.or_else(|| {
            self.shipped_prices
                .then(|| prices::shipped(model))
                .flatten()
        })
    }

    /// The budgets of `who`, each with the subject it counts.
    fn of<'a>(&'a self, who: &'a Who) -> impl Iterator<Item = (&'a Budget, String)> + 'a {
        self.budgets
            .iter()
            .filter_map(move |b| b.subject(who).map(|s| (b, s)))
    }
}

/// Why a call may not go on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpendError {
    #[error(transparent)]
    Exceeded(Exceeded),
    /// Budgets are kept in Redis, which does not answer, and
    /// `state.redis.on_unavailable` is `closed`.
    #[error(
        "budgets cannot be checked: the shared state (Redis) is unavailable and state.redis.on_unavailable is `closed`"
    )]
    Unavailable,
}

/// One budget count a call holds a reservation on.
#[derive(Debug)]
struct Held {
    budget: Budget,
    counter: String,
    reserved: i64,
    /// Counted by this replica (Redis was down, or there is none).
    local: bool,
}

/// A model call admitted by every budget of its caller: the reservations
/// it holds until [`Spend::settle`] (dropped unsettled, they are
/// released).
#[derive(Debug)]
pub struct Admission {
    spend: Arc<Spend>,
    held: Vec<Held>,
    /// Budgets past their warning share when the call was admitted.
    pub warnings: Vec<String>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        let spend = Arc::clone(&self.spend);
        let release = async move {
            for h in &held {
                spend.count(h, 0, false).await;
            }
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release);
        }
    }
}

/// What a settled call cost, and what its caller's budgets say now.
#[derive(Debug, Default)]
pub struct Settled {
    /// `None`: the model's price is unknown.
    pub cost: Option<NanoUsd>,
    /// A budget the call spent to its limit.
    pub exceeded: Option<Exceeded>,
    /// Budgets past their warning share.
    pub warnings: Vec<String>,
}

/// A budget count.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Counter {
    spent: i64,
    /// What the count's latest call cost (the next call's reservation).
    last: i64,
    #[serde(skip)]
    reserved: i64,
    /// When the count's period ends (seconds since the epoch), if it does.
    #[serde(default)]
    ends: Option<i64>,
}

/// What this replica counts itself.
#[derive(Debug, Default)]
struct Local {
    counters: HashMap<String, Counter>,
    ledger: HashMap<Group, Totals, foldhash::fast::RandomState>,
}

/// The embedded store's file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    counters: HashMap<String, Counter>,
    ledger: Vec<(Group, Totals)>,
}

/// The spend store: budgets' counts and spend by the hour. Outlives
/// reloads (the rules come from the catalog in service).
#[derive(Debug)]
pub struct Spend {
    local: Mutex<Local>,
    redis: Option<Arc<Redis>>,
    file: Option<PathBuf>,
    dirty: AtomicBool,
}

/// The spend of one model call, as the ledger and metrics keep it.
#[derive(Debug)]
pub struct ModelSpend<'a> {
    pub model: &'a str,
    pub usage: &'a Usage,
    pub price: Option<Price>,
    /// How long the call took, to its answer's end.
    pub took: std::time::Duration,
}

impl Spend {
    /// A store in memory alone (tests; a gateway without a folder).
    pub fn in_memory() -> Arc<Spend> {
        Arc::new(Spend {
            local: Mutex::new(Local::default()),
            redis: None,
            file: None,
            dirty: AtomicBool::new(false),
        })
    }

    /// The store kept in `file` (read now, if it exists), or in `redis`.
    pub fn open(file: Option<PathBuf>, redis: Option<Arc<Redis>>) -> Arc<Spend> {
        let mut local = Local::default();
        if let Some(path) = &file
            && let Ok(bytes) = std::fs::read(path)
        {
            match serde_json::from_slice::<Saved>(&bytes) {
                Ok(saved) => {
                    local.counters = saved.counters;
                    local.ledger = saved.ledger.into_iter().collect();
                }
                Err(e) => tracing::warn!(
                    "the spend store {} cannot be read ({e}); counting starts again",
                    path.display()
                ),
            }
        }
        Arc::new(Spend {
            local: Mutex::new(local),
            redis,
            file,
            dirty: AtomicBool::new(false),
        })
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Redis, when the counts are kept there and it answers; `Err` when
    /// it does not answer and the policy refuses.
    fn shared_or_fallback(&self, down: bool) -> Result<Option<&Arc<Redis>>, SpendError> {
        match &self.redis {
            None => Ok(None),
            Some(r) if !down => Ok(Some(r)),
            Some(r) => match r.policy() {
                Unavailable::Closed => Err(SpendError::Unavailable),
                Unavailable::Local | Unavailable::Open => Ok(None),
            },
        }
    }

    /// Admits a model call of `who` under every budget of theirs, each
    /// reserving what its previous call cost, or what `guess` (the call's
    /// input tokens, guessed, at `price`) costs if more; refused when one
    /// is spent.
    pub async fn admit(
        self: &Arc<Self>,
        rules: &Rules,
        who: &Who,
        guess: &Usage,
        price: Option<Price>,
    ) -> Result<Admission, SpendError> {
        self.admit_at(rules, who, guess, price, Utc::now()).await
    }

    /// [`Spend::admit`] at `now` (a budget's period is the one `now` is in).
    pub async fn admit_at(
        self: &Arc<Self>,
        rules: &Rules,
        who: &Who,
        guess: &Usage,
        price: Option<Price>,
        now: DateTime<Utc>,
    ) -> Result<Admission, SpendError> {
        let mut admission = Admission {
            spend: Arc::clone(self),
            held: Vec::new(),
            warnings: Vec::new(),
        };
        let guess_cost = price.map(|p| p.cost(guess));
        for (budget, subject) in rules.of(who) {
            let guess = budget.amount(guess_cost, guess);
            let counter = budget.counter(&subject, now);
            let ends = budget.window(now).1.map(|e| e.timestamp());
            let ttl = ends.map_or(0, |e| (e - now.timestamp()).max(1) + 86_400);
            let mut outcome = None;
            if let Some(redis) = self.shared_or_fallback(false)? {
                match redis.budget_admit(&counter, budget.limit, guess, ttl).await {
                    Ok(r) => outcome = Some((r, false)),
                    Err(_) => {
                        crate::support::shared::fell_back("budget", "the replica's own count");
                        if self.shared_or_fallback(true)?.is_none()
                            && self
                                .redis
                                .as_ref()
                                .is_some_and(|r| r.policy() == Unavailable::Open)
                        {
                            continue;
                        }
                    }
                }
            }
            let (result, local) = match outcome {
                Some(o) => o,
                None => (self.admit_local(&counter, budget.limit, guess, ends), true),
            };
            match result {
                Ok(reserved) => {
                    let spent = self.spent(&counter, local).await;
                    admission.warnings.extend(budgets::warning(budget, spent));
                    admission.held.push(Held {
                        budget: budget.clone(),
                        counter,
                        reserved,
                        local,
                    });
                }
                Err(spent) => {
                    crate::support::metrics::record(|m| {
                        m.budget_refusals
                            .with_label_values(&[budget.name.as_str()])
                            .inc();
                    });
                    // `admission` drops: the reservations made are released.
                    return Err(SpendError::Exceeded(Exceeded::new(budget, spent, now)));
                }
            }
        }
        Ok(admission)
    }

    fn admit_local(
        &self,
        counter: &str,
        limit: i64,
        guess: i64,
        ends: Option<i64>,
    ) -> Result<i64, i64> {
        let mut local = self.local();
        let c = local.counters.entry(counter.to_owned()).or_default();
        c.ends = ends;
        if c.spent + c.reserved >= limit {
            return Err(c.spent);
        }
        let reserved = c.last.max(guess);
        c.reserved += reserved;
        Ok(reserved)
    }

    async fn spent(&self, counter: &str, local: bool) -> i64 {
        if !local && let Some(redis) = &self.redis {
            return redis.budget_spent(counter).await.unwrap_or(0);
        }
        self.local().counters.get(counter).map_or(0, |c| c.spent)
    }

    /// Replaces `held`'s reservation by `actual`; returns what is spent.
    async fn count(&self, held: &Held, actual: i64, learn: bool) -> i64 {
        if !held.local
            && let Some(redis) = &self.redis
        {
            let ttl = held.budget.window(Utc::now()).1.map_or(0, |e| {
                (e.timestamp() - Utc::now().timestamp()).max(1) + 86_400
            });
            if let Ok(spent) = redis
                .budget_settle(&held.counter, held.reserved, actual, learn, ttl)
                .await
            {
                return spent;
            }
        }
        let mut local = self.local();
        let c = local.counters.entry(held.counter.clone()).or_default();
        c.reserved = (c.reserved - held.reserved).max(0);
        c.spent += actual;
        if learn {
            c.last = actual;
        }
        self.dirty.store(true, Ordering::Release);
        c.spent
    }

    /// Settles an admitted call: its cost replaces its reservations, and
    /// its tokens and cost go to the ledger and the metrics.
    pub async fn settle(
        &self,
        mut admission: Admission,
        who: &Who,
        call: ModelSpend<'_>,
    ) -> Settled {
        let cost = call.price.map(|p| p.cost(call.usage));
        let now = Utc::now();
        let mut settled = Settled {
            cost,
            ..Settled::default()
        };
        for held in std::mem::take(&mut admission.held) {
            let amount = held.budget.amount(cost, call.usage);
            let spent = self.count(&held, amount, true).await;
            if spent >= held.budget.limit && settled.exceeded.is_none() {
                settled.exceeded = Some(Exceeded::new(&held.budget, spent, now));
            } else {
                settled
                    .warnings
                    .extend(budgets::warning(&held.budget, spent));
            }
        }
        self.record_model(who, &call, cost, now).await;
        settled
    }

    /// Counts a model call no budget admitted (a caller without budgets).
    pub async fn record(&self, who: &Who, call: ModelSpend<'_>) -> Option<NanoUsd> {
        let cost = call.price.map(|p| p.cost(call.usage));
        self.record_model(who, &call, cost, Utc::now()).await;
        cost
    }

    async fn record_model(
        &self,
        who: &Who,
        call: &ModelSpend<'_>,
        cost: Option<NanoUsd>,
        now: DateTime<Utc>,
    ) {
        let (group, totals) = self.model_totals(who, call, cost, now.timestamp());
        self.add(group, totals).await;
    }

    /// Counts a finished model call off the caller's path: at once when
    /// nothing needs waiting for (no budget to settle, no shared store),
    /// else on a task of its own.
    pub fn count_soon(
        self: &Arc<Self>,
        admission: Option<Admission>,
        who: Who,
        model: String,
        usage: Usage,
        price: Option<Price>,
        took: std::time::Duration,
    ) {
        let now = ModelSpend {
            model: &model,
            usage: &usage,
            price,
            took,
        };
        if admission.is_none() && self.record_now(&who, now).is_some() {
            return;
        }
        let spend = Arc::clone(self);
        let count = async move {
            let call = ModelSpend {
                model: &model,
                usage: &usage,
                price,
                took,
            };
            match admission {
                Some(a) => {
                    spend.settle(a, &who, call).await;
                }
                None => {
                    spend.record(&who, call).await;
                }
            }
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(count);
        }
    }

    /// Whether the counts are kept in Redis.
    pub fn is_shared(&self) -> bool {
        self.redis.is_some()
    }

    /// [`Spend::record`] done now, without waiting: for a store that is
    /// not shared (`None` when it is: use [`Spend::record`]).
    pub fn record_now(&self, who: &Who, call: ModelSpend<'_>) -> Option<Option<NanoUsd>> {
        if self.redis.is_some() {
            return None;
        }
        let cost = call.price.map(|p| p.cost(call.usage));
        let (group, totals) = self.model_totals(who, &call, cost, unix_now());
        self.add_local(group, &totals);
        Some(cost)
    }

    /// A model call's ledger bucket and sums, recorded in the metrics.
    fn model_totals<'a>(
        &self,
        who: &'a Who,
        call: &ModelSpend<'a>,
        cost: Option<NanoUsd>,
        now: i64,
    ) -> (GroupRef<'a>, Totals) {
        let u = call.usage;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut latency = [0; ledger::LATENCY_MS.len()];
        let ms = i64::try_from(call.took.as_millis()).unwrap_or(i64::MAX);
        latency[ledger::latency_bucket(ms)] = 1;
        let totals = Totals {
            latency,
            model_calls: 1,
            input_tokens: n(u.input),
            output_tokens: n(u.output),
            cached_input_tokens: n(u.cache_read),
            cache_write_tokens: n(u.cache_write),
            reasoning_tokens: n(u.reasoning),
            cost: cost.unwrap_or(0),
            unpriced_calls: i64::from(cost.is_none()),
            ..Totals::default()
        };
        crate::support::metrics::record(|m| {
            fn label(v: &Option<String>) -> &str {
                v.as_deref().unwrap_or("")
            }
            m.spend(
                [
                    label(&who.key),
                    label(&who.user),
                    label(&who.project),
                    call.model,
                ],
                cost.map(prices::usd),
                [u.input, u.output, u.cache_read, u.cache_write, u.reasoning],
            );
        });
        (self.group(who, call.model, "", now), totals)
    }

    /// Counts a tool call of `who`.
    pub async fn record_tool(&self, who: &Who, tool: &str, success: bool) {
        let (group, totals) = self.tool_totals(who, tool, success);
        self.add(group, totals).await;
    }

    /// [`Spend::record_tool`] done now, for a store that is not shared
    /// (`false` when it is).
    pub fn record_tool_now(&self, who: &Who, tool: &str, success: bool) -> bool {
        if self.redis.is_some() {
            return false;
        }
        let (group, totals) = self.tool_totals(who, tool, success);
        self.add_local(group, &totals);
        true
    }

    fn tool_totals<'a>(
        &self,
        who: &'a Who,
        tool: &'a str,
        success: bool,
    ) -> (GroupRef<'a>, Totals) {
        let totals = Totals {
            tool_calls: 1,
            tool_failures: i64::from(!success),
            ..Totals::default()
        };
        (self.group(who, "", tool, unix_now()), totals)
    }

    fn group<'a>(&self, who: &'a Who, model: &'a str, tool: &'a str, at: i64) -> GroupRef<'a> {
        let text = |v: &'a Option<String>| v.as_deref().unwrap_or_default();
        GroupRef {
            hour: at - at.rem_euclid(HOUR),
            model,
            tool,
            key: text(&who.key),
            user: text(&who.user),
            project: text(&who.project),
        }
    }

    async fn add(&self, group: GroupRef<'_>, totals: Totals) {
        if let Some(redis) = &self.redis {
            let fields: Vec<(String, i64)> = totals
                .named()
                .into_iter()
                .filter(|(_, v)| *v != 0)
                .map(|(m, v)| (group.field(&m), v))
                .collect();
            // Kept long enough for any `keep_days` (the query bounds it).
            if redis
                .spend_add(group.hour, &fields, 400 * 86_400)
                .await
                .is_ok()
            {
                return;
            }
        }
        self.add_local(group, &totals);
    }

    fn add_local(&self, group: GroupRef<'_>, totals: &Totals) {
        let mut local = self.local();
        match local.ledger.get_mut(&group as &dyn GroupKey) {
            Some(t) => t.add(totals),
            None => {
                local.ledger.insert(group.to_owned(), totals.clone());
            }
        }
        self.dirty.store(true, Ordering::Release);
    }

    /// Spend from `from` to `to` (seconds since the epoch), grouped by
    /// `by`, of the groups `keep` keeps.
    pub async fn query(
        &self,
        from: i64,
        to: i64,
        by: &[Dimension],
        keep: impl Fn(&Group) -> bool,
    ) -> Vec<serde_json::Value> {
        let first = from - from.rem_euclid(HOUR);
        let in_range = |g: &Group| g.hour >= first && g.hour <= to;
        let mut buckets: BTreeMap<Group, Totals> = self
            .local()
            .ledger
            .iter()
            .filter(|(g, _)| in_range(g))
            .map(|(g, t)| (g.clone(), t.clone()))
            .collect();
        if let Some(redis) = &self.redis {
            // At most a year of hours is read from Redis.
            let hours: Vec<i64> = (0..)
                .map(|i| first + i * HOUR)
                .take_while(|h| *h <= to)
                .take(24 * 366)
                .collect();
            if let Ok(all) = redis.spend_hours(&hours).await {
                for (hour, fields) in all {
                    for (field, n) in fields {
                        if let Some((g, metric)) = Group::parse(hour, &field) {
                            buckets.entry(g).or_default().add_named(&metric, n);
                        }
                    }
                }
            }
        }
        ledger::rows(buckets.iter(), by, keep)
    }

    /// Each budget of `rules` that `keep` keeps, for each subject that
    /// spent in its current period (and `who`'s own, spent or not).
    pub async fn budgets(&self, rules: &Rules, who: Option<&Who>) -> Vec<serde_json::Value> {
        let now = Utc::now();
        let mut out = Vec::new();
        for b in &rules.budgets {
            let mut subjects: Vec<String> = match who {
                Some(w) => b.subject(w).into_iter().collect(),
                None => {
                    let (start, _) = b.window(now);
                    let suffix = format!("|{}", start.timestamp());
                    let prefix = format!("{}|", b.name);
                    self.local()
                        .counters
                        .keys()
                        .filter_map(|k| k.strip_prefix(&prefix)?.strip_suffix(&suffix))
                        .map(str::to_owned)
                        .collect()
                }
            };
            if who.is_none() {
                use toolgate_config::format::BudgetScope;
                match &b.scope {
                    BudgetScope::Keys(names) => subjects.push(names.join(",")),
                    BudgetScope::Key(n) | BudgetScope::User(n) | BudgetScope::Project(n)
                        if n != "*" =>
                    {
                        subjects.push(n.clone());
                    }
                    _ => {}
                }
                subjects.sort();
                subjects.dedup();
            }
            for subject in subjects {
                let counter = b.counter(&subject, now);
                let local = self.redis.is_none();
                let spent = self.spent(&counter, local).await;
                let (start, resets) = b.window(now);
                out.push(serde_json::json!({
                    "budget": b.name,
                    "for": b.scope,
                    "subject": subject,
                    "unit": b.unit,
                    "limit": b.shown(b.limit),
                    "spent": b.shown(spent),
                    "left": b.shown((b.limit - spent).max(0)),
                    "period": b.period,
                    "period_start": start.to_rfc3339(),
                    "resets_at": resets.map(|r| r.to_rfc3339()),
                    "warn_at": b.warn_at,
                }));
            }
        }
        out
    }

    /// Writes the embedded store's file, if anything changed (dropping
    /// spend older than `keep_secs` and counts of ended periods).
    pub fn flush(&self, keep_secs: i64) {
        let Some(path) = &self.file else {
            return;
        };
        if !self.dirty.swap(false, Ordering::AcqRel) {
            return;
        }
        let now = Utc::now().timestamp();
        let saved = {
            let mut local = self.local();
            local.ledger.retain(|g, _| g.hour >= now - keep_secs);
            local
                .counters
                .retain(|_, c| c.reserved > 0 || c.ends.is_none_or(|e| e > now));
            Saved {
                counters: local.counters.clone(),
                ledger: local
                    .ledger
                    .iter()
                    .map(|(g, t)| (g.clone(), t.clone()))
                    .collect(),
            }
        };
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let temp = path.with_extension("tmp");
            std::fs::write(
                &temp,
                serde_json::to_vec(&saved).map_err(std::io::Error::other)?,
            )?;
            std::fs::rename(&temp, path)
        };
        if let Err(e) = write() {
            self.dirty.store(true, Ordering::Release);
            tracing::warn!("cannot write the spend store {}: {e}", path.display());
        }
    }

    /// Writes the store a second after each change, and once more when
    /// `stop` is cancelled.
    pub async fn keep(self: Arc<Self>, keep_secs: i64, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
            let me = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || me.flush(keep_secs)).await;
        }
        self.flush(keep_secs);
    }
}

/// Seconds since the epoch, now: what a ledger bucket is named by (no
/// calendar arithmetic, which `Utc::now` does).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_config::format::{BudgetDecl, BudgetLimit, BudgetPeriod, BudgetScope, PriceDecl};

    fn rules(limit: f64) -> Rules {
        Rules::new(&SpendDecl {
            budgets: vec![BudgetDecl {
                name: "daily".into(),
                scope: BudgetScope::Key("*".into()),
                limit: BudgetLimit::Usd(limit),
                period: BudgetPeriod::Day,
                warn_at: 50,
            }],
            ..SpendDecl::default()
        })
    }

    fn alice() -> Who {
        Who {
            key: Some("alice".into()),
            ..Who::default()
        }
    }

    const PRICE: PriceDecl = PriceDecl {
        input: 1000.0,
        output: 1000.0,
        cached_input: None,
        cache_write: None,
        reasoning: None,
    };

    fn usage(tokens: u64) -> Usage {
        Usage {
            input: tokens,
            calls: 1,
            ..Usage::default()
        }
    }

    async fn call(spend: &Arc<Spend>, rules: &Rules, tokens: u64) -> Result<Settled, SpendError> {
        let a = spend
            .admit(rules, &alice(), &Usage::default(), None)
            .await?;
        let u = usage(tokens);
        Ok(spend
            .settle(
                a,
                &alice(),
                ModelSpend {
                    model: "m",
                    usage: &u,
                    price: Some(PRICE.into()),
                    took: Default::default(),
                },
            )
            .await)
    }

    #[tokio::test]
    async fn a_budget_admits_until_spent_and_then_refuses() {
        let spend = Spend::in_memory();
        // $1,000 per million tokens: 1,000 tokens cost $1.
        let rules = rules(2.5);
        assert_eq!(
            call(&spend, &rules, 1000).await.unwrap().cost,
            Some(1_000_000_000)
        );
        let second = call(&spend, &rules, 1000).await.unwrap();
        assert!(second.exceeded.is_none() && !second.warnings.is_empty());
        let third = call(&spend, &rules, 1000).await.unwrap();
        assert_eq!(third.exceeded.map(|e| e.budget), Some("daily".to_owned()));
        let Err(SpendError::Exceeded(e)) = call(&spend, &rules, 1000).await else {
            panic!("a spent budget admits no call");
        };
        assert_eq!(e.details()["spent"], 3.0);
        // Another key has its own count.
        let bob = Who {
            key: Some("bob".into()),
            ..Who::default()
        };
        assert!(
            spend
                .admit(&rules, &bob, &Usage::default(), None)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn concurrent_calls_overspend_by_at_most_one_call() {
        let spend = Spend::in_memory();
        let rules = rules(10.0);
        // The first call teaches the count what a call costs.
        call(&spend, &rules, 1000).await.unwrap();
        let mut admitted = Vec::new();
        for _ in 0..20 {
            if let Ok(a) = spend.admit(&rules, &alice(), &Usage::default(), None).await {
                admitted.push(a);
            }
        }
        // $1 spent, $1 reserved per call: 9 more fit under $10.
        assert_eq!(admitted.len(), 9);
        for a in admitted {
            let u = usage(1000);
            spend
                .settle(
                    a,
                    &alice(),
                    ModelSpend {
                        model: "m",
                        usage: &u,
                        price: Some(PRICE.into()),
                        took: Default::default(),
                    },
                )
                .await;
        }
        let left = spend.budgets(&rules, Some(&alice())).await;
        assert_eq!(left[0]["spent"], 10.0);
    }

    #[tokio::test]
    async fn a_new_period_starts_a_new_count() {
        let spend = Spend::in_memory();
        let rules = rules(1.5);
        call(&spend, &rules, 2000).await.unwrap();
        let none = Usage::default();
        assert!(spend.admit(&rules, &alice(), &none, None).await.is_err());
        let tomorrow = Utc::now() + chrono::Duration::days(1);
        assert!(
            spend
                .admit_at(&rules, &alice(), &none, None, tomorrow)
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn the_first_calls_reserve_their_guess() {
        let spend = Spend::in_memory();
        let rules = rules(2.5);
        // Nothing counted yet: each call reserves its guessed input ($1).
        let guess = usage(1000);
        let mut admitted = Vec::new();
        while let Ok(a) = spend
            .admit(&rules, &alice(), &guess, Some(PRICE.into()))
            .await
        {
            admitted.push(a);
            assert!(admitted.len() < 10, "the guesses are reserved");
        }
        assert_eq!(admitted.len(), 3);
    }

    #[tokio::test]
    async fn an_unsettled_admission_releases_its_reservation() {
        let spend = Spend::in_memory();
        let rules = rules(1.5);
        call(&spend, &rules, 1000).await.unwrap();
        let none = Usage::default();
        drop(spend.admit(&rules, &alice(), &none, None).await.unwrap());
        tokio::task::yield_now().await;
        assert!(spend.admit(&rules, &alice(), &none, None).await.is_ok());
    }

    #[tokio::test]
    async fn the_store_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spend.json");
        let rules = rules(1.5);
        let spend = Spend::open(Some(file.clone()), None);
        call(&spend, &rules, 1000).await.unwrap();
        spend.record_tool(&alice(), "lookup", false).await;
        spend.flush(rules.keep_secs);
        let again = Spend::open(Some(file), None);
        let left = again.budgets(&rules, Some(&alice())).await;
        assert_eq!(left[0]["spent"], 1.0);
        let rows = again
            .query(0, i64::MAX / 2, &[Dimension::Tool], |g| !g.tool.is_empty())
            .await;
        assert_eq!(
            (rows[0]["tool"].as_str(), rows[0]["tool_failures"].as_i64()),
            (Some("lookup"), Some(1))
        );
    }

    #[tokio::test]
    async fn a_model_without_a_price_is_counted_in_tokens_and_its_cost_is_unknown() {
        let spend = Spend::in_memory();
        let u = usage(10);
        let cost = spend
            .record(
                &alice(),
                ModelSpend {
                    model: "mine",
                    usage: &u,
                    price: None,
                    took: Default::default(),
                },
            )
            .await;
        assert_eq!(cost, None);
        let rows = spend
            .query(0, i64::MAX / 2, &[Dimension::Model], |_| true)
            .await;
        assert_eq!(rows[0]["cost_usd"], serde_json::Value::Null);
        assert_eq!(rows[0]["input_tokens"], 10);
    }
}
