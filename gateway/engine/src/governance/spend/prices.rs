//! What a model call costs: a route's own prices, else the shipped price
//! table's (`gateway/engine/prices/prices.json`, written by `make prices`
//! from a published price list, its source and date inside).

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;
use toolgate_config::format::PriceDecl;

use crate::conversation::Usage;

/// Billionths of a US dollar: costs are whole numbers, so sums are exact
/// and Redis adds them atomically.
pub type NanoUsd = i64;

/// Nano-dollars as dollars.
pub fn usd(n: NanoUsd) -> f64 {
    n as f64 / 1e9
}

/// Dollars as nano-dollars (a configured limit).
pub fn nano(usd: f64) -> NanoUsd {
    (usd * 1e9).round() as NanoUsd
}

/// A model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cached_input: f64,
    pub cache_write: f64,
    pub reasoning: f64,
}

impl From<PriceDecl> for Price {
    fn from(p: PriceDecl) -> Price {
        Price {
            input: p.input,
            output: p.output,
            cached_input: p.cached_input.unwrap_or(p.input),
            cache_write: p.cache_write.unwrap_or(p.input),
            reasoning: p.reasoning.unwrap_or(p.output),
        }
    }
}

impl Price {
    /// What `usage` costs: input tokens neither read from nor written to
    /// a cache at `input`, cached ones at `cached_input`, written ones at
    /// `cache_write`; output tokens at `output`, the reasoning among them
    /// at `reasoning`.
    pub fn cost(&self, u: &Usage) -> NanoUsd {
        let cached = u.cache_read.min(u.input);
        let written = u.cache_write.min(u.input - cached);
        let fresh = u.input - cached - written;
        let reasoning = u.reasoning.min(u.output);
        let per_million = fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + written as f64 * self.cache_write
            + (u.output - reasoning) as f64 * self.output
            + reasoning as f64 * self.reasoning;
        // Dollars per million tokens: 1e-6 dollars per token, 1e3
        // nano-dollars.
        (per_million * 1e3).round() as NanoUsd
    }
}

/// The shipped table as written.
#[derive(Debug, Default, Deserialize)]
struct Table {
    source: String,
    date: String,
    /// Hashed with foldhash: looked up on every model call.
    models: HashMap<String, PriceDecl, foldhash::fast::FixedState>,
}

static SHIPPED: LazyLock<Table> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../../prices/prices.json")).unwrap_or_else(|e| {
        tracing::error!("the shipped price table cannot be read: {e}");
        Table::default()
    })
});

/// Where the shipped prices come from, and when they were taken.
pub fn shipped_source() -> (&'static str, &'static str) {
    (&SHIPPED.source, &SHIPPED.date)
}

/// The shipped price of `model`: its own entry, else that of the name
/// without a provider prefix (`openai/gpt-4o`) or a date suffix
/// (`gpt-4o-2024-08-06`, `claude-sonnet-4-5-20250929`).
pub fn shipped(model: &str) -> Option<Price> {
    /// Each model name's answer, remembered: asked on every model call.
    /// At most this many names (a route that passes any name on is the
    /// client's to fill).
    const REMEMBERED: usize = 1024;
    type Memo = std::sync::RwLock<HashMap<Box<str>, Option<Price>, foldhash::fast::FixedState>>;
    static MEMO: LazyLock<Memo> = LazyLock::new(Memo::default);
    if let Some(known) = MEMO.read().ok().and_then(|m| m.get(model).copied()) {
        return known;
    }
    let price = look_up(model);
    if let Ok(mut memo) = MEMO.write()
        && memo.len() < REMEMBERED
    {
        memo.insert(model.into(), price);
    }
    price
}

fn look_up(model: &str) -> Option<Price> {
    let find = |name: &str| SHIPPED.models.get(name).copied().map(Price::from);
    let bare = model.rsplit_once('/').map_or(model, |(_, m)| m);
    find(model)
        .or_else(|| find(bare))
        .or_else(|| find(without_date(bare)?))
}

/// `name` without a trailing `-YYYY-MM-DD` or `-YYYYMMDD`.
fn without_date(name: &str) -> Option<&str> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some((head, tail)) = name.rsplit_once('-')
        && tail.len() == 8
        && digits(tail)
    {
        return Some(head);
    }
    let mut parts = name.rsplitn(4, '-');
    let (d, m, y, head) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    (y.len() == 4 && m.len() == 2 && d.len() == 2 && digits(y) && digits(m) && digits(d))
        .then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, read: u64, write: u64, reasoning: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read: read,
            cache_write: write,
            reasoning,
            calls: 1,
            ..Usage::default()
        }
    }

    #[test]
    fn each_kind_of_token_at_its_price() {
        let p = Price::from(PriceDecl {
            input: 3.0,
            output: 15.0,
            cached_input: Some(0.3),
            cache_write: Some(3.75),
            reasoning: None,
        });
        // 1,000 fresh input, 2,000 read, 500 written, 400 output of which
        // 100 reasoning (at the output price).
        let cost = p.cost(&usage(3_500, 400, 2_000, 500, 100));
        let expected = (1_000.0 * 3.0 + 2_000.0 * 0.3 + 500.0 * 3.75 + 400.0 * 15.0) / 1e6;
        assert_eq!(cost, nano(expected));
        assert_eq!(p.cost(&Usage::default()), 0);
    }

    #[test]
    fn the_shipped_table_reads_and_finds_names_as_apis_spell_them() {
        let (source, date) = shipped_source();
        assert!(
            source.contains("litellm") && date.len() == 10,
            "{source} {date}"
        );
        assert!(SHIPPED.models.len() > 100);
        let gpt = shipped("gpt-4o").expect("gpt-4o has a price");
        assert!(gpt.input > 0.0 && gpt.output > gpt.input);
        assert_eq!(shipped("openai/gpt-4o"), Some(gpt));
        assert_eq!(shipped("gpt-4o-2099-01-31"), Some(gpt));
        assert!(shipped("claude-sonnet-4-5-20990101").is_some());
        assert_eq!(shipped("mock-model"), None);
        assert_eq!(without_date("gpt-4o"), None);
    }
}
