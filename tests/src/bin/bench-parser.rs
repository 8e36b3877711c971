//! Throughput of the tool-call parser (`toolgate_toolcall`), whole-text and
//! streaming, on normal and adversarial inputs, next to a baseline measured
//! in the same run: one pass over the same bytes counting `<`, `{` and `[`
//! (the least any parser must do). Linear time shows as MB/s that stays
//! flat from normal to adversarial inputs. Run with `make bench`.

#![allow(clippy::print_stderr, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use toolgate_toolcall::{OfferedTool, StreamParser, parse};

fn tools() -> Vec<OfferedTool> {
    ["get_weather", "write_file", "search", "f"]
        .iter()
        .map(|n| OfferedTool {
            name: n.to_string(),
            parameters: json!({"type": "object", "properties": {"n": {"type": "integer"}}}).into(),
        })
        .collect()
}

fn inputs() -> Vec<(&'static str, String)> {
    let prose =
        "The quick brown fox jumps over the lazy dog; a < b, c > d, [1] {x} and more text. "
            .repeat(12_000);
    let hermes = format!(
        "<think>{}</think>\nLet me check.\n<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}\n</tool_call>",
        "reasoning words ".repeat(64)
    );
    let big_arg = format!(
        "<tool_call>{{\"name\": \"write_file\", \"arguments\": {{\"path\": \"a.md\", \"content\": \"{}\"}}}}</tool_call>",
        "line with } and </tool_call> and \\\"quotes\\\"\\n ".repeat(20_000)
    );
    let xml = format!(
        "<tool_call>\n<function=write_file>\n<parameter=content>\n{}\n</parameter>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>",
        "xml body text <b>bold</b> ".repeat(40_000)
    );
    let pythonic = format!(
        "[search(q='{}', n=3)]",
        "python string with \\' escapes ".repeat(30_000)
    );
    let many_calls = "{\"name\": \"f\", \"arguments\": {\"n\": 1}}; ".repeat(20_000);
    vec![
        ("normal: prose only (1 MB)", prose),
        ("normal: think + hermes call", hermes.repeat(200)),
        ("normal: 1 MB JSON argument", big_arg),
        ("normal: 1 MB XML parameter", xml),
        ("normal: 1 MB pythonic string", pythonic),
        ("normal: 20k bare calls", many_calls),
        ("adversarial: 1 MB of {", "{".repeat(1 << 20)),
        ("adversarial: 1 MB of [", "[".repeat(1 << 20)),
        (
            "adversarial: <tool_call> x 100k",
            "<tool_call>".repeat(100_000),
        ),
        (
            "adversarial: deep [ ] 100k",
            "[".repeat(100_000) + &"]".repeat(100_000),
        ),
        (
            "adversarial: deep {\"a\": 100k",
            "{\"a\":".repeat(100_000) + "1" + &"}".repeat(100_000),
        ),
        (
            "adversarial: <tool_call>{ x 100k",
            "<tool_call>{".repeat(100_000),
        ),
        ("adversarial: {\" x 500k", "{\"".repeat(500_000)),
        ("adversarial: [f(a=' x 100k", "[f(a='".repeat(100_000)),
        (
            "adversarial: <function=f><parameter=a> x 50k",
            "<function=f><parameter=a>".repeat(50_000),
        ),
    ]
}

fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64().max(1e-9)
}

/// Stream `text` in chunks of `size` bytes (rounded up to char boundaries).
fn streamed(text: &str, tools: &[OfferedTool], size: usize) -> (f64, usize) {
    let t0 = Instant::now();
    let mut p = StreamParser::new(tools.to_vec());
    let mut start = 0;
    let mut n = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        n += p.push(&text[start..end]).len();
        start = end;
    }
    n += p.finish().len();
    (mbps(text.len(), t0.elapsed()), n)
}

fn main() {
    let tools = tools();
    eprintln!(
        "{:<46} {:>9} {:>12} {:>11} {:>8} {:>14} {:>13}",
        "input", "bytes", "scan MB/s", "parse MB/s", "ratio", "stream16 MB/s", "stream1 MB/s"
    );
    for (label, text) in inputs() {
        let reps = (4_000_000 / text.len().max(1)).clamp(1, 50);
        let t0 = Instant::now();
        let mut calls = 0;
        for _ in 0..reps {
            calls = parse(&text, &tools).calls.len();
        }
        let whole = mbps(text.len() * reps, t0.elapsed());
        let t0 = Instant::now();
        let mut marks = 0usize;
        for _ in 0..reps {
            marks += std::hint::black_box(text.as_bytes())
                .iter()
                .filter(|b| matches!(b, b'<' | b'{' | b'['))
                .count();
        }
        let scan = mbps(text.len() * reps, t0.elapsed());
        std::hint::black_box(marks);

        let (streamed16, n) = streamed(&text, &tools, 16);
        let (streamed1, _) = streamed(&text, &tools, 1);
        eprintln!(
            "{:<46} {:>9} {:>12.1} {:>11.1} {:>8.3} {:>14.1} {:>13.1}   ({} calls, {} events)",
            label,
            text.len(),
            scan,
            whole,
            whole / scan,
            streamed16,
            streamed1,
            calls,
            n
        );
    }
}
