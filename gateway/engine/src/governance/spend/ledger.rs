//! Spend by the hour: model calls (tokens and cost) by model, and tool
//! calls by tool, each by key, user and project; summed over a time range
//! and grouped as the spend API asks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::prices::{NanoUsd, usd};

/// Seconds in a ledger bucket.
pub const HOUR: i64 = 3600;

/// What one bucket sums: the hour, what was called, and by whom.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Group {
    /// The hour's start, in seconds since the epoch.
    pub hour: i64,
    /// The model (for model calls), else empty.
    pub model: String,
    /// The tool (for tool calls), else empty.
    pub tool: String,
    pub key: String,
    pub user: String,
    pub project: String,
}

/// A group by its parts, borrowed: what a count is looked up by, so that
/// counting into a known bucket allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupRef<'a> {
    pub hour: i64,
    pub model: &'a str,
    pub tool: &'a str,
    pub key: &'a str,
    pub user: &'a str,
    pub project: &'a str,
}

impl GroupRef<'_> {
    /// The group as a Redis hash field with `metric` ([`Group::field`]).
    pub fn field(&self, metric: &str) -> String {
        [
            self.model,
            self.tool,
            self.key,
            self.user,
            self.project,
            metric,
        ]
        .join(&SEP.to_string())
    }

    pub fn to_owned(self) -> Group {
        Group {
            hour: self.hour,
            model: self.model.to_owned(),
            tool: self.tool.to_owned(),
            key: self.key.to_owned(),
            user: self.user.to_owned(),
            project: self.project.to_owned(),
        }
    }
}

/// What a [`Group`] and a [`GroupRef`] are hashed and compared by.
pub trait GroupKey {
    fn parts(&self) -> GroupRef<'_>;
}

impl GroupKey for Group {
    fn parts(&self) -> GroupRef<'_> {
        GroupRef {
            hour: self.hour,
            model: &self.model,
            tool: &self.tool,
            key: &self.key,
            user: &self.user,
            project: &self.project,
        }
    }
}

impl GroupKey for GroupRef<'_> {
    fn parts(&self) -> GroupRef<'_> {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn GroupKey + 'a> for Group {
    fn borrow(&self) -> &(dyn GroupKey + 'a) {
        self
    }
}

impl std::hash::Hash for dyn GroupKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let g = self.parts();
        (g.hour, g.model, g.tool, g.key, g.user, g.project).hash(state);
    }
}

impl PartialEq for dyn GroupKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn GroupKey + '_ {}

impl std::hash::Hash for Group {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self as &dyn GroupKey).hash(state);
    }
}

/// The sums of one bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub model_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_input_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    /// What the priced calls cost, in nano-dollars.
    pub cost: NanoUsd,
    /// Model calls whose price is unknown.
    pub unpriced_calls: i64,
    pub tool_calls: i64,
    pub tool_failures: i64,
    /// Model calls by how long they took: one count per bound of
    /// [`LATENCY_MS`] (the call took at most that long, and more than the
    /// bound before).
    #[serde(default)]
    pub latency: [i64; LATENCY_MS.len()],
}

/// The upper bounds of the latency buckets, in milliseconds (the last:
/// anything longer).
pub const LATENCY_MS: [i64; 10] = [
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
    i64::MAX,
];

/// The latency bucket of a call of `ms` milliseconds.
pub fn latency_bucket(ms: i64) -> usize {
    LATENCY_MS
        .iter()
        .position(|b| ms <= *b)
        .unwrap_or(LATENCY_MS.len() - 1)
}

/// The `q` quantile (0..1) of the calls counted in `buckets`, in
/// milliseconds: the bound of the bucket it falls in (`None`: no calls).
pub fn quantile(buckets: &[i64], q: f64) -> Option<i64> {
    let total: i64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATENCY_MS[i].min(60_000));
        }
    }
    None
}

/// The metrics of a bucket by name (Redis hash fields).
pub const METRICS: [&str; 10] = [
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cost",
    "unpriced_calls",
    "tool_calls",
    "tool_failures",
];

impl Totals {
    pub fn fields(&self) -> [i64; 10] {
        [
            self.model_calls,
            self.input_tokens,
            self.output_tokens,
            self.cached_input_tokens,
            self.cache_write_tokens,
            self.reasoning_tokens,
            self.cost,
            self.unpriced_calls,
            self.tool_calls,
            self.tool_failures,
        ]
    }

    fn field_mut(&mut self, i: usize) -> Option<&mut i64> {
        Some(match i {
            0 => &mut self.model_calls,
            1 => &mut self.input_tokens,
            2 => &mut self.output_tokens,
            3 => &mut self.cached_input_tokens,
            4 => &mut self.cache_write_tokens,
            5 => &mut self.reasoning_tokens,
            6 => &mut self.cost,
            7 => &mut self.unpriced_calls,
            8 => &mut self.tool_calls,
            9 => &mut self.tool_failures,
            _ => return None,
        })
    }

    pub fn add(&mut self, other: &Totals) {
        for (i, v) in other.fields().into_iter().enumerate() {
            if let Some(f) = self.field_mut(i) {
                *f += v;
            }
        }
        for (mine, theirs) in self.latency.iter_mut().zip(other.latency) {
            *mine += theirs;
        }
    }

    /// Every metric with its name (Redis hash fields): the named ones,
    /// then the latency buckets (`latency_0`...).
    pub fn named(&self) -> Vec<(String, i64)> {
        METRICS
            .iter()
            .map(|m| (*m).to_owned())
            .zip(self.fields())
            .chain(
                self.latency
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (format!("latency_{i}"), *n)),
            )
            .collect()
    }

    /// Adds `value` to the metric named `name`.
    pub fn add_named(&mut self, name: &str, value: i64) {
        if let Some(i) = name
            .strip_prefix("latency_")
            .and_then(|i| i.parse::<usize>().ok())
        {
            if let Some(b) = self.latency.get_mut(i) {
                *b += value;
            }
            return;
        }
        if let Some(i) = METRICS.iter().position(|m| *m == name)
            && let Some(f) = self.field_mut(i)
        {
            *f += value;
        }
    }
}

/// Separates a group's parts in a Redis hash field (never in a name the
/// gateway accepts: key, user, project and model names are printable).
const SEP: char = '\u{1f}';

impl Group {
    /// The group as a Redis hash field with `metric` (the hour is the
    /// hash's key).
    pub fn field(&self, metric: &str) -> String {
        self.parts().field(metric)
    }

    /// A group and metric read back from [`Group::field`].
    pub fn parse(hour: i64, field: &str) -> Option<(Group, String)> {
        let mut p = field.split(SEP);
        let mut next = || p.next().map(str::to_owned);
        let group = Group {
            hour,
            model: next()?,
            tool: next()?,
            key: next()?,
            user: next()?,
            project: next()?,
        };
        Some((group, next()?))
    }
}

/// How the spend API groups: by any of these, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Model,
    Tool,
    Key,
    User,
    Project,
    Day,
    Hour,
}

impl Dimension {
    pub fn parse(s: &str) -> Option<Dimension> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
    }

    fn of(self, g: &Group) -> serde_json::Value {
        let text = |s: &str| (!s.is_empty()).then(|| s.to_owned()).into();
        match self {
            Dimension::Model => text(&g.model),
            Dimension::Tool => text(&g.tool),
            Dimension::Key => text(&g.key),
            Dimension::User => text(&g.user),
            Dimension::Project => text(&g.project),
            Dimension::Day => time(g.hour - g.hour.rem_euclid(86_400)).into(),
            Dimension::Hour => time(g.hour).into(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dimension::Model => "model",
            Dimension::Tool => "tool",
            Dimension::Key => "key",
            Dimension::User => "user",
            Dimension::Project => "project",
            Dimension::Day => "day",
            Dimension::Hour => "hour",
        }
    }
}

fn time(secs: i64) -> String {
    chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// Sums `buckets` grouped by `by`, each row its dimensions' values and
/// its sums (cost in dollars; `null` when a call's price was unknown).
pub fn rows<'a>(
    buckets: impl IntoIterator<Item = (&'a Group, &'a Totals)>,
    by: &[Dimension],
    keep: impl Fn(&Group) -> bool,
) -> Vec<serde_json::Value> {
    let mut sums: BTreeMap<Vec<String>, (serde_json::Map<String, serde_json::Value>, Totals)> =
        BTreeMap::new();
    for (g, t) in buckets {
        if !keep(g) {
            continue;
        }
        let values: Vec<serde_json::Value> = by.iter().map(|d| d.of(g)).collect();
        let sort_key = values.iter().map(serde_json::Value::to_string).collect();
        let entry = sums.entry(sort_key).or_insert_with(|| {
            let dims = by
                .iter()
                .zip(values)
                .map(|(d, v)| (d.name().to_owned(), v))
                .collect();
            (dims, Totals::default())
        });
        entry.1.add(t);
    }
    sums.into_values()
        .map(|(mut row, t)| {
            let cost = (t.unpriced_calls == 0).then(|| (usd(t.cost) * 1e9).round() / 1e9);
            row.insert("cost_usd".into(), cost.into());
            row.insert("priced_cost_usd".into(), usd(t.cost).into());
            for (name, v) in METRICS.iter().zip(t.fields()) {
                if *name != "cost" {
                    row.insert((*name).into(), v.into());
                }
            }
            row.insert("latency_p50_ms".into(), quantile(&t.latency, 0.5).into());
            row.insert("latency_p95_ms".into(), quantile(&t.latency, 0.95).into());
            serde_json::Value::Object(row)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(hour: i64, model: &str, key: &str) -> Group {
        Group {
            hour,
            model: model.into(),
            tool: String::new(),
            key: key.into(),
            user: String::new(),
            project: String::new(),
        }
    }

    #[test]
    fn latency_quantiles_come_from_the_buckets() {
        let mut t = Totals::default();
        for ms in [10, 20, 30, 40, 300, 300, 300, 300, 300, 4_000] {
            t.latency[latency_bucket(ms)] += 1;
        }
        assert_eq!(quantile(&t.latency, 0.5), Some(500));
        assert_eq!(quantile(&t.latency, 0.95), Some(5_000));
        assert_eq!(quantile(&[0; 10], 0.5), None);
        let mut back = Totals::default();
        for (name, n) in t.named() {
            back.add_named(&name, n);
        }
        assert_eq!(back, t);
    }

    #[test]
    fn a_group_goes_to_a_field_and_back() {
        let g = group(7200, "gpt-4o", "alice");
        assert_eq!(
            Group::parse(7200, &g.field("cost")),
            Some((g, "cost".into()))
        );
        assert_eq!(Group::parse(0, "no separators"), None);
    }

    #[test]
    fn rows_sum_by_the_dimensions_asked() {
        let priced = Totals {
            model_calls: 1,
            cost: 1_500,
            ..Totals::default()
        };
        let unpriced = Totals {
            model_calls: 1,
            unpriced_calls: 1,
            ..Totals::default()
        };
        let data = [
            (group(0, "a", "k1"), priced.clone()),
            (group(3600, "a", "k2"), priced.clone()),
            (group(90_000, "b", "k1"), unpriced),
        ];
        let by_model = rows(
            data.iter().map(|(g, t)| (g, t)),
            &[Dimension::Model],
            |_| true,
        );
        assert_eq!(by_model.len(), 2);
        assert_eq!(by_model[0]["model"], "a");
        assert_eq!(by_model[0]["model_calls"], 2);
        assert_eq!(by_model[0]["cost_usd"], 3e-6);
        // A call of unknown price: the cost is unknown, never zero.
        assert_eq!(by_model[1]["cost_usd"], serde_json::Value::Null);
        let by_day = rows(data.iter().map(|(g, t)| (g, t)), &[Dimension::Day], |g| {
            g.key == "k1"
        });
        assert_eq!(by_day.len(), 2);
        assert_eq!(by_day[1]["day"], "1970-01-02T00:00:00Z");
    }
}
