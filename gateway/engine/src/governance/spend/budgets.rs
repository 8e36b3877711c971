//! Budgets: limits on what a key, a user, a project or a group of keys
//! spends in a period, and the counts behind them.
//!
//! A model call is admitted while `spent + reserved < limit`, and reserves
//! what the budget's previous call cost; once it answered, its reservation
//! is replaced by what it cost. So loops racing for the last of a budget
//! overspend it by about one call's worth, not one per loop.

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use serde::Serialize;
use toolgate_config::format::{BudgetDecl, BudgetLimit, BudgetPeriod, BudgetScope};

use super::prices::{NanoUsd, nano, usd};
use super::who::Who;
use crate::conversation::Usage;

/// A budget as configured, its limit in the unit it counts.
#[derive(Debug, Clone)]
pub struct Budget {
    pub name: String,
    pub scope: BudgetScope,
    pub unit: Unit,
    /// In nano-dollars or tokens.
    pub limit: i64,
    pub period: BudgetPeriod,
    pub warn_at: u8,
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Usd,
    Tokens,
}

impl From<&BudgetDecl> for Budget {
    fn from(d: &BudgetDecl) -> Budget {
        let (unit, limit) = match d.limit {
            BudgetLimit::Usd(u) => (Unit::Usd, nano(u)),
            BudgetLimit::Tokens(t) => (Unit::Tokens, i64::try_from(t).unwrap_or(i64::MAX)),
        };
        Budget {
            name: d.name.clone(),
            scope: d.scope.clone(),
            unit,
            limit,
            period: d.period,
            warn_at: d.warn_at.min(100),
        }
    }
}

impl Budget {
    /// Whose count of this budget a caller's calls go to (`None`: the
    /// budget is not the caller's).
    pub fn subject(&self, who: &Who) -> Option<String> {
        let of = |name: &str, theirs: &Option<String>| match theirs {
            Some(t) if name == "*" || name == t => Some(t.clone()),
            _ => None,
        };
        match &self.scope {
            BudgetScope::Key(n) => of(n, &who.key),
            BudgetScope::User(n) => of(n, &who.user),
            BudgetScope::Project(n) => of(n, &who.project),
            BudgetScope::Keys(names) => who
                .key
                .as_ref()
                .filter(|k| names.contains(k))
                .map(|_| names.join(",")),
        }
    }

    /// The current period's start and, if it ends, its end.
    pub fn window(&self, now: DateTime<Utc>) -> (DateTime<Utc>, Option<DateTime<Utc>>) {
        let day = Utc
            .with_ymd_and_hms(now.year(), now.month(), now.day(), 0, 0, 0)
            .single()
            .unwrap_or(now);
        match self.period {
            BudgetPeriod::Day => (day, Some(day + Duration::days(1))),
            BudgetPeriod::Week => {
                let start = day - Duration::days(i64::from(now.weekday().num_days_from_monday()));
                (start, Some(start + Duration::days(7)))
            }
            BudgetPeriod::Month => {
                let start = Utc
                    .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
                    .single()
                    .unwrap_or(day);
                let (y, m) = if now.month() == 12 {
                    (now.year() + 1, 1)
                } else {
                    (now.year(), now.month() + 1)
                };
                (start, Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single())
            }
            BudgetPeriod::None => (DateTime::<Utc>::UNIX_EPOCH, None),
        }
    }

    /// The key of `subject`'s count in the current period.
    pub fn counter(&self, subject: &str, now: DateTime<Utc>) -> String {
        let (start, _) = self.window(now);
        format!("{}|{}|{}", self.name, subject, start.timestamp())
    }

    /// What a call adds to this budget's count.
    pub fn amount(&self, cost: Option<NanoUsd>, usage: &Usage) -> i64 {
        match self.unit {
            Unit::Usd => cost.unwrap_or(0),
            Unit::Tokens => i64::try_from(usage.total()).unwrap_or(i64::MAX),
        }
    }

    /// A count in the budget's unit, for people (dollars or tokens).
    pub fn shown(&self, amount: i64) -> serde_json::Value {
        match self.unit {
            Unit::Usd => serde_json::json!((usd(amount) * 1e6).round() / 1e6),
            Unit::Tokens => serde_json::json!(amount),
        }
    }

    fn unit_name(&self) -> &'static str {
        match self.unit {
            Unit::Usd => "USD",
            Unit::Tokens => "tokens",
        }
    }
}

/// A budget that stops a call: its limit, what is spent, when it resets.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "the budget `{budget}` is spent: {spent} of {limit} {unit}{}",
    resets_at.map(|r| format!("; it resets at {}", r.to_rfc3339())).unwrap_or_default()
)]
pub struct Exceeded {
    pub budget: String,
    pub limit: serde_json::Value,
    pub spent: serde_json::Value,
    pub unit: &'static str,
    pub resets_at: Option<DateTime<Utc>>,
}

impl Exceeded {
    pub fn new(b: &Budget, spent: i64, now: DateTime<Utc>) -> Exceeded {
        Exceeded {
            budget: b.name.clone(),
            limit: b.shown(b.limit),
            spent: b.shown(spent),
            unit: b.unit_name(),
            resets_at: b.window(now).1,
        }
    }

    /// Seconds until the budget resets, if it does.
    pub fn retry_after(&self, now: DateTime<Utc>) -> Option<u64> {
        self.resets_at
            .map(|r| u64::try_from((r - now).num_seconds().max(1)).unwrap_or(1))
    }

    /// What a refusal shows of it.
    pub fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "budget": self.budget,
            "limit": self.limit,
            "spent": self.spent,
            "unit": self.unit,
            "resets_at": self.resets_at.map(|r| r.to_rfc3339()),
        })
    }
}

/// A budget past its warning share.
pub fn warning(b: &Budget, spent: i64) -> Option<String> {
    let threshold = (b.limit as f64) * f64::from(b.warn_at) / 100.0;
    (spent as f64 >= threshold && b.warn_at < 100).then(|| {
        format!(
            "budget `{}`: {} of {} {} spent",
            b.name,
            b.shown(spent),
            b.shown(b.limit),
            b.unit_name()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(scope: BudgetScope, period: BudgetPeriod) -> Budget {
        Budget::from(&BudgetDecl {
            name: "b".into(),
            scope,
            limit: BudgetLimit::Usd(2.5),
            period,
            warn_at: 80,
        })
    }

    fn who(key: &str, user: Option<&str>) -> Who {
        Who {
            key: Some(key.into()),
            user: user.map(Into::into),
            project: None,
        }
    }

    #[test]
    fn a_budget_counts_for_whom_it_names() {
        let each = budget(BudgetScope::Key("*".into()), BudgetPeriod::Day);
        assert_eq!(each.subject(&who("alice", None)), Some("alice".into()));
        let one = budget(BudgetScope::Key("bob".into()), BudgetPeriod::Day);
        assert_eq!(one.subject(&who("alice", None)), None);
        let group = budget(
            BudgetScope::Keys(vec!["a".into(), "b".into()]),
            BudgetPeriod::Day,
        );
        assert_eq!(group.subject(&who("b", None)), Some("a,b".into()));
        assert_eq!(group.subject(&who("c", None)), None);
        let users = budget(BudgetScope::User("*".into()), BudgetPeriod::Day);
        assert_eq!(users.subject(&who("k", Some("u1"))), Some("u1".into()));
        assert_eq!(users.subject(&who("k", None)), None);
        assert_eq!(each.limit, 2_500_000_000);
    }

    #[test]
    fn periods_start_and_reset_in_utc() {
        let now = Utc.with_ymd_and_hms(2026, 12, 31, 15, 4, 5).unwrap();
        let at = |y, m, d| Utc.with_ymd_and_hms(y, m, d, 0, 0, 0).unwrap();
        let b = |p| budget(BudgetScope::Key("*".into()), p).window(now);
        assert_eq!(
            b(BudgetPeriod::Day),
            (at(2026, 12, 31), Some(at(2027, 1, 1)))
        );
        // 2026-12-31 is a Thursday: its week began on Monday the 28th.
        assert_eq!(
            b(BudgetPeriod::Week),
            (at(2026, 12, 28), Some(at(2027, 1, 4)))
        );
        assert_eq!(
            b(BudgetPeriod::Month),
            (at(2026, 12, 1), Some(at(2027, 1, 1)))
        );
        assert_eq!(b(BudgetPeriod::None).1, None);
    }

    #[test]
    fn a_refusal_says_the_limit_the_spend_and_the_reset() {
        let now = Utc.with_ymd_and_hms(2026, 12, 31, 23, 0, 0).unwrap();
        let b = budget(BudgetScope::Key("*".into()), BudgetPeriod::Day);
        let e = Exceeded::new(&b, 2_600_000_000, now);
        assert_eq!(e.details()["limit"], 2.5);
        assert_eq!(e.details()["spent"], 2.6);
        assert_eq!(e.retry_after(now), Some(3600));
        assert!(e.to_string().contains("resets at 2027-01-01"), "{e}");
        assert!(warning(&b, 2_000_000_000).is_some());
        assert!(warning(&b, 1_000_000_000).is_none());
    }
}
