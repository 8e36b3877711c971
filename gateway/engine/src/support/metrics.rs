//! Prometheus metrics, served at `GET /metrics`.
//!
//! One process-wide registry ([`global`]): the instrumented places (HTTP
//! layer, upstream calls, the executor, the tool loop, reloads) record into
//! it without being handed anything, and a process runs one gateway. Label
//! values are bounded by the configuration (routes, tool names, upstream
//! names, outcome codes), never by what a client or a model sends: a tool
//! name the catalog does not know is recorded as `unknown`.
//!
//! MCP server health is given at scrape time; this module knows no other
//! module of the engine (it is a leaf every other module may record into).

use std::sync::OnceLock;
use std::time::Duration;

use prometheus::{
    CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Every metric the gateway exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// HTTP requests answered, by route pattern, method and status.
    pub http_requests: IntCounterVec,
    /// Time to the response head, by route pattern.
    pub http_duration: HistogramVec,
    /// Upstream model calls: time to the response head, by upstream and
    /// outcome (`ok`, or the error kind).
    pub upstream_duration: HistogramVec,
    /// Tool calls by tool and outcome (`ok` or the error code).
    pub tool_calls: IntCounterVec,
    /// Tool call duration by tool and outcome.
    pub tool_duration: HistogramVec,
    /// Tool results answered from the cache, by tool.
    pub cache_hits: IntCounterVec,
    /// Guard findings, by guard setting and action taken.
    pub guard_findings: IntCounterVec,
    /// Calls a policy decided, by policy and action.
    pub policy_decisions: IntCounterVec,
    /// Requests for approval, by event (`requested`, `approved`, `refused`).
    pub approvals: IntCounterVec,
    /// Model round trips per finished tool loop.
    pub loop_iterations: Histogram,
    /// Tool loops finished, by finish reason.
    pub loops: IntCounterVec,
    /// Tool loops running now.
    pub active_loops: IntGauge,
    /// Streaming responses open now.
    pub active_streams: IntGauge,
    /// Requests refused before any work, by reason (`unauthorized`,
    /// `forbidden`, `rate_limited`, `too_many_loops`, `too_many_streams`...).
    pub rejected: IntCounterVec,
    /// Configuration reloads by outcome (`applied`, `failed`, `unchanged`).
    pub reloads: IntCounterVec,
    /// The catalog version in service (1 at start, +1 per applied reload).
    pub config_version: IntGauge,
    /// 1 when the last reload attempt succeeded (or none was made yet).
    pub config_last_reload_ok: IntGauge,
    /// 1 per MCP server that is ready, 0 otherwise, by server.
    pub mcp_up: IntGaugeVec,
    /// Audit lines that had to wait for room in the writer's queue.
    pub audit_waits: IntCounter,
    /// Tool calls read out of a structured-prompt model's text that were
    /// broken or cut short and repaired (an unambiguous closing added).
    pub parsed_calls_repaired: IntCounter,
    /// 1 while the shared state (Redis) answers, 0 while it does not;
    /// absent without `state.redis`.
    pub shared_state_up: IntGauge,
    /// Operations that found the shared state unavailable and fell back,
    /// by what (`rate_limit`, `cache`, `formatter`) and policy outcome.
    pub shared_state_fallbacks: IntCounterVec,
    /// What priced model calls cost, in US dollars, by key, user, project
    /// and model.
    pub spend_usd: CounterVec,
    /// Model call tokens by key, user, project, model and kind (`input`,
    /// `output`, `cached_input`, `cache_write`, `reasoning`).
    pub spend_tokens: IntCounterVec,
    /// Model calls whose price is unknown, by key, user, project and model.
    pub spend_unpriced_calls: IntCounterVec,
    /// Requests refused and loops stopped by a budget, by budget.
    pub budget_refusals: IntCounterVec,
    /// The spend series of each (key, user, project, model) seen so far,
    /// resolved once (bounded: past a cap, `other`).
    spend_series: std::sync::Mutex<
        std::collections::HashMap<String, SpendSeries, foldhash::fast::RandomState>,
    >,
}

/// The spend counters of one (key, user, project, model).
#[derive(Debug)]
struct SpendSeries {
    usd: prometheus::Counter,
    unpriced: IntCounter,
    /// Input, output, cached input, cache write, reasoning.
    tokens: [IntCounter; 5],
}

/// The token kinds of `toolgate_spend_tokens_total`, in the order
/// [`Metrics::spend`] takes them.
pub const TOKEN_KINDS: [&str; 5] = [
    "input",
    "output",
    "cached_input",
    "cache_write",
    "reasoning",
];

/// Distinct (key, user, project, model) label sets the spend metrics keep
/// before the rest are counted as `other`.
const MAX_SPEND_SERIES: usize = 1000;

fn seconds_buckets() -> Vec<f64> {
    vec![
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        120.0,
    ]
}

impl Metrics {
    fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let histogram =
            |name: &str, help: &str, labels: &[&str]| -> Result<HistogramVec, prometheus::Error> {
                let h = HistogramVec::new(
                    HistogramOpts::new(name, help).buckets(seconds_buckets()),
                    labels,
                )?;
                registry.register(Box::new(h.clone()))?;
                Ok(h)
            };
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let loop_iterations = Histogram::with_opts(
            HistogramOpts::new(
                "toolgate_tool_loop_iterations",
                "Model round trips per finished tool loop.",
            )
            .buckets(vec![1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0]),
        )?;
        registry.register(Box::new(loop_iterations.clone()))?;
        let mcp_up = IntGaugeVec::new(
            Opts::new(
                "toolgate_mcp_server_up",
                "1 when the MCP server is ready, 0 when it is starting, down or disabled.",
            ),
            &["server"],
        )?;
        registry.register(Box::new(mcp_up.clone()))?;
        let audit_waits = IntCounter::new(
            "toolgate_audit_queue_waits_total",
            "Audit lines that waited for room in the writer's queue.",
        )?;
        registry.register(Box::new(audit_waits.clone()))?;
        let parsed_calls_repaired = IntCounter::new(
            "toolgate_parsed_calls_repaired_total",
            "Tool calls read out of a model's text that were cut short and repaired.",
        )?;
        registry.register(Box::new(parsed_calls_repaired.clone()))?;
        let spend_usd = CounterVec::new(
            Opts::new(
                "toolgate_spend_usd_total",
                "What priced model calls cost, in US dollars, by key, user, project and model.",
            ),
            &["key", "user", "project", "model"],
        )?;
        registry.register(Box::new(spend_usd.clone()))?;
        Ok(Metrics {
            spend_usd,
            spend_tokens: counter(
                "toolgate_spend_tokens_total",
                "Model call tokens by key, user, project, model and kind.",
                &["key", "user", "project", "model", "kind"],
            )?,
            spend_unpriced_calls: counter(
                "toolgate_spend_unpriced_calls_total",
                "Model calls whose price is unknown (counted in tokens only).",
                &["key", "user", "project", "model"],
            )?,
            budget_refusals: counter(
                "toolgate_budget_refusals_total",
                "Requests refused and loops stopped by a budget, by budget.",
                &["budget"],
            )?,
            spend_series: std::sync::Mutex::new(std::collections::HashMap::default()),
            http_requests: counter(
                "toolgate_http_requests_total",
                "HTTP requests answered, by route, method and status.",
                &["route", "method", "status"],
            )?,
            http_duration: histogram(
                "toolgate_http_request_duration_seconds",
                "Time until the response head was ready, by route.",
                &["route"],
            )?,
            upstream_duration: histogram(
                "toolgate_upstream_request_duration_seconds",
                "Upstream model calls: time to the response head, by upstream and outcome.",
                &["upstream", "outcome"],
            )?,
            tool_calls: counter(
                "toolgate_tool_calls_total",
                "Tool calls, by tool and outcome (ok or the error code).",
                &["tool", "outcome"],
            )?,
            tool_duration: histogram(
                "toolgate_tool_call_duration_seconds",
                "Tool call duration, by tool and outcome.",
                &["tool", "outcome"],
            )?,
            cache_hits: counter(
                "toolgate_tool_cache_hits_total",
                "Tool results answered from the cache, by tool.",
                &["tool"],
            )?,
            guard_findings: counter(
                "toolgate_guard_findings_total",
                "Guard findings in tool results and arguments, by guard and action.",
                &["guard", "action"],
            )?,
            policy_decisions: counter(
                "toolgate_policy_decisions_total",
                "Tool calls a policy decided, by policy and action.",
                &["policy", "action"],
            )?,
            approvals: counter(
                "toolgate_approvals_total",
                "Requests for approval of tool calls, by event (requested, approved, refused).",
                &["event"],
            )?,
            loop_iterations,
            loops: counter(
                "toolgate_tool_loops_total",
                "Tool loops finished, by finish reason.",
                &["finish_reason"],
            )?,
            active_loops: gauge("toolgate_active_tool_loops", "Tool loops running now.")?,
            active_streams: gauge("toolgate_active_streams", "Streaming responses open now.")?,
            rejected: counter(
                "toolgate_rejected_requests_total",
                "Requests refused before any work, by reason.",
                &["reason"],
            )?,
            reloads: counter(
                "toolgate_config_reloads_total",
                "Configuration reloads, by outcome (applied, failed, unchanged).",
                &["outcome"],
            )?,
            config_version: gauge(
                "toolgate_config_version",
                "The catalog version in service (1 at start, +1 per applied reload).",
            )?,
            config_last_reload_ok: gauge(
                "toolgate_config_last_reload_success",
                "1 when the last reload attempt succeeded (or none was made).",
            )?,
            mcp_up,
            audit_waits,
            parsed_calls_repaired,
            shared_state_up: gauge(
                "toolgate_shared_state_up",
                "1 while the shared state (Redis) answers, 0 while it does not.",
            )?,
            shared_state_fallbacks: counter(
                "toolgate_shared_state_fallbacks_total",
                "Operations that found the shared state (Redis) unavailable, by what and the fallback taken.",
                &["what", "fallback"],
            )?,
            registry,
        })
    }

    /// Records one answered HTTP request: its route pattern, method and
    /// status, and the time to its response head.
    pub fn http_request(&self, route: &str, method: &str, status: &str, took: Duration) {
        thread_local! {
            static KEPT: std::cell::RefCell<Handles<(IntCounter, Histogram)>> = const { std::cell::RefCell::new(Handles::new()) };
        }
        let labels = [route, method, status];
        KEPT.with_borrow_mut(|kept| {
            let (count, duration) = kept.get(self, &labels, || {
                (
                    self.http_requests.with_label_values(&labels),
                    self.http_duration.with_label_values(&[route]),
                )
            });
            count.inc();
            duration.observe(took.as_secs_f64());
        });
    }

    /// Records one call of upstream `upstream`: its outcome and the time
    /// to its response head.
    pub fn upstream_call(&self, upstream: &str, outcome: &str, took: Duration) {
        thread_local! {
            static KEPT: std::cell::RefCell<Handles<Histogram>> = const { std::cell::RefCell::new(Handles::new()) };
        }
        let labels = [upstream, outcome];
        KEPT.with_borrow_mut(|kept| {
            kept.get(self, &labels, || {
                self.upstream_duration.with_label_values(&labels)
            })
            .observe(took.as_secs_f64());
        });
    }

    /// Records one finished tool call.
    pub fn tool_call(&self, tool: &str, outcome: &str, duration: Duration, cached: bool) {
        self.tool_calls.with_label_values(&[tool, outcome]).inc();
        self.tool_duration
            .with_label_values(&[tool, outcome])
            .observe(duration.as_secs_f64());
        if cached {
            self.cache_hits.with_label_values(&[tool]).inc();
        }
    }

    /// Records a guard's finding and what was done with it.
    pub fn guard_finding(&self, guard: &str, action: &str) {
        self.guard_findings
            .with_label_values(&[guard, action])
            .inc();
    }

    /// Records a call a policy decided.
    pub fn policy_decision(&self, policy: &str, action: &str) {
        self.policy_decisions
            .with_label_values(&[policy, action])
            .inc();
    }

    /// Records an event of a request for approval.
    pub fn approval(&self, event: &str) {
        self.approvals.with_label_values(&[event]).inc();
    }

    /// Records one finished tool loop.
    pub fn loop_finished(&self, iterations: u32, finish_reason: &str) {
        self.loop_iterations.observe(f64::from(iterations));
        // Finish reasons come from the upstream; keep the label bounded.
        let reason = match finish_reason {
            "stop"
            | "length"
            | "tool_calls"
            | "content_filter"
            | "max_tool_iterations"
            | "budget_exceeded" => finish_reason,
            _ => "other",
        };
        self.loops.with_label_values(&[reason]).inc();
    }

    /// Records one model call's spend for `labels` (key, user, project,
    /// model; empty when none): its cost in dollars (`None`: unknown
    /// price) and its tokens by [`TOKEN_KINDS`]. Past 1,000 label sets
    /// (user names and projects come from callers), new ones are `other`.
    pub fn spend(&self, labels: [&str; 4], cost_usd: Option<f64>, tokens: [u64; 5]) {
        let mut series = self.spend_series.lock().unwrap_or_else(|p| p.into_inner());
        // The series' key, written where it is read: a known series costs
        // no allocation.
        thread_local! {
            static KEY: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        let bump = |entry: &SpendSeries| {
            match cost_usd {
                Some(c) => entry.usd.inc_by(c),
                None => entry.unpriced.inc(),
            }
            for (counter, n) in entry.tokens.iter().zip(tokens) {
                if n > 0 {
                    counter.inc_by(n);
                }
            }
        };
        KEY.with_borrow_mut(|key| {
            key.clear();
            for (i, l) in labels.iter().enumerate() {
                if i > 0 {
                    key.push('\u{1f}');
                }
                key.push_str(l);
            }
            if let Some(entry) = series.get(key.as_str()) {
                return bump(entry);
            }
            let (key, labels) = if series.len() >= MAX_SPEND_SERIES {
                ("other".to_owned(), ["other"; 4])
            } else {
                (key.clone(), labels)
            };
            let entry = series.entry(key).or_insert_with(|| SpendSeries {
                usd: self.spend_usd.with_label_values(&labels),
                unpriced: self.spend_unpriced_calls.with_label_values(&labels),
                tokens: TOKEN_KINDS.map(|kind| {
                    let [k, u, p, m] = labels;
                    self.spend_tokens.with_label_values(&[k, u, p, m, kind])
                }),
            });
            bump(entry);
        });
    }

    /// Records a request refused before any work.
    pub fn reject(&self, reason: &str) {
        self.rejected.with_label_values(&[reason]).inc();
    }

    /// The text exposition of every metric; `mcp_health` is each MCP
    /// server's name and whether it is ready now.
    pub fn render(&self, mcp_health: &[(String, bool)]) -> String {
        self.mcp_up.reset();
        for (server, ready) in mcp_health {
            self.mcp_up
                .with_label_values(&[server.as_str()])
                .set(i64::from(*ready));
        }
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!("cannot encode the metrics: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// How many series of one metric each thread keeps the handles of.
const MAX_KEPT_HANDLES: usize = 64;

/// The handles of a metric's series one thread recorded into, found by
/// their label values without hashing them (a short list: label values are
/// bounded by the configuration), at most [`MAX_KEPT_HANDLES`]: past that,
/// the last one kept gives way.
struct Handles<H> {
    kept: Vec<Kept<H>>,
}

/// One series' handle: the metrics it belongs to (by address), its label
/// values, the handle.
struct Kept<H> {
    metrics: usize,
    labels: Box<[Box<str>]>,
    handle: H,
}

impl<H> Handles<H> {
    const fn new() -> Handles<H> {
        Handles { kept: Vec::new() }
    }

    /// The handle of `metrics`' series `labels`, made by `make` when this
    /// thread has none kept.
    fn get(&mut self, metrics: &Metrics, labels: &[&str], make: impl FnOnce() -> H) -> &H {
        let me = std::ptr::from_ref(metrics) as usize;
        let at = self.kept.iter().position(|k| {
            k.metrics == me
                && k.labels.len() == labels.len()
                && k.labels.iter().zip(labels).all(|(a, b)| **a == **b)
        });
        let at = match at {
            Some(at) => at,
            None => {
                let handle = make();
                if self.kept.len() == MAX_KEPT_HANDLES {
                    self.kept.pop();
                }
                self.kept.push(Kept {
                    metrics: me,
                    labels: labels.iter().map(|l| Box::from(*l)).collect(),
                    handle,
                });
                self.kept.len() - 1
            }
        };
        &self.kept[at].handle
    }
}

/// The process-wide metrics; `None` only if their definitions were invalid
/// (a programming error the unit tests catch), which is logged once.
pub fn global() -> Option<&'static Metrics> {
    static METRICS: OnceLock<Option<Metrics>> = OnceLock::new();
    METRICS
        .get_or_init(|| match Metrics::new() {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::error!("metrics are disabled: their definitions are invalid: {e}");
                None
            }
        })
        .as_ref()
}

/// Runs `f` with the process-wide metrics.
pub fn record(f: impl FnOnce(&Metrics)) {
    if let Some(m) = global() {
        f(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grafana_dashboard_reads_metrics_the_gateway_exports() {
        let dashboard = include_str!("../../../../deploy/grafana/toolgate.json");
        let source = include_str!("metrics.rs");
        let names = regex::Regex::new(r"toolgate_[a-z_]+").unwrap();
        let mut checked = 0;
        for m in names.find_iter(dashboard) {
            let name = m.as_str();
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            assert!(
                source.contains(&format!("\"{base}\"")),
                "the dashboard reads `{name}`, which is not exported"
            );
            checked += 1;
        }
        assert!(checked >= 10, "{checked}");
    }

    #[test]
    fn every_metric_registers_and_renders() {
        let m = Metrics::new().unwrap_or_else(|e| panic!("{e}"));
        m.tool_call("t", "ok", Duration::from_millis(3), true);
        m.loop_finished(2, "weird");
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&m.registry.gather(), &mut out)
            .unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(text.contains("toolgate_tool_calls_total{outcome=\"ok\",tool=\"t\"} 1"));
        assert!(text.contains("toolgate_tool_cache_hits_total{tool=\"t\"} 1"));
        assert!(text.contains("toolgate_tool_loops_total{finish_reason=\"other\"} 1"));
    }

    #[test]
    fn http_requests_are_counted_by_series_whether_their_handles_are_kept_or_not() {
        let a = Metrics::new().unwrap_or_else(|e| panic!("{e}"));
        let b = Metrics::new().unwrap_or_else(|e| panic!("{e}"));
        let ms = Duration::from_millis(2);
        for _ in 0..3 {
            a.http_request("/v1/chat/completions", "POST", "200", ms);
        }
        a.http_request("/v1/chat/completions", "POST", "429", ms);
        a.http_request("/v1/models", "GET", "200", ms);
        // Another registry's series are its own, though this thread kept
        // the first one's handles.
        b.http_request("/v1/chat/completions", "POST", "200", ms);
        // Past the handles kept, series are still counted.
        for i in 0..(MAX_KEPT_HANDLES as u16 + 5) {
            a.http_request("/many", "GET", &(200 + i).to_string(), ms);
        }
        let render = |m: &Metrics| m.render(&[]);
        let (ta, tb) = (render(&a), render(&b));
        let line = |route: &str, method: &str, status: &str| {
            format!(
                "toolgate_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}}"
            )
        };
        assert!(
            ta.contains(&format!(
                "{} 3",
                line("/v1/chat/completions", "POST", "200")
            )),
            "{ta}"
        );
        assert!(ta.contains(&format!(
            "{} 1",
            line("/v1/chat/completions", "POST", "429")
        )));
        assert!(ta.contains(&format!("{} 1", line("/v1/models", "GET", "200"))));
        assert!(ta.contains(&format!("{} 1", line("/many", "GET", "268"))));
        assert!(
            ta.contains(
                "toolgate_http_request_duration_seconds_count{route=\"/v1/chat/completions\"} 4"
            ),
            "{ta}"
        );
        assert!(
            tb.contains(&format!(
                "{} 1",
                line("/v1/chat/completions", "POST", "200")
            )),
            "{tb}"
        );
    }
}
