//! Loads a catalog of 1,000 generated HTTP tools and reports the load time
//! and memory, next to a baseline measured in the same run: parsing the same
//! files as plain YAML values (no typed structs, no validation).
//!
//! Run with `make bench` (release mode, nothing else compiling).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use gateway::catalog::Catalog;

const TOOLS: usize = 1_000;
const FILES: usize = 50;
const RUNS: usize = 15;

fn tool_yaml(i: usize) -> String {
    format!(
        r#"  - name: tool_{i:04}
    description: Generated tool number {i}, which looks up an item by id and query.
    category: bench
    parameters:
      type: object
      properties:
        id: {{ type: string, description: The item id., minLength: 1 }}
        q: {{ type: string, description: Free text. }}
        limit: {{ type: integer, minimum: 1, maximum: 100 }}
      required: [id]
    http:
      method: GET
      url: "https://api.example.com/v1/items/{{{{ args.id }}}}"
      query:
        q: "{{{{ args.q }}}}"
        limit: "{{{{ args.limit or 10 }}}}"
      headers:
        Accept: application/json
      timeout: 5s
    response:
      select: /data
    cache: {{ ttl: 1m }}
"#
    )
}

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let tools_dir = dir.path().join("tools.d");
    std::fs::create_dir_all(&tools_dir).unwrap();
    let per_file = TOOLS / FILES;
    for f in 0..FILES {
        let mut text = String::from("tools:\n");
        for i in f * per_file..(f + 1) * per_file {
            text.push_str(&tool_yaml(i));
        }
        std::fs::write(tools_dir.join(format!("gen-{f:03}.yaml")), text).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("tool-sets")).unwrap();
    std::fs::write(
        dir.path().join("tool-sets/all.yaml"),
        "name: all\ntools: [\"tool_*\"]\n",
    )
    .unwrap();
    let bytes: u64 = std::fs::read_dir(&tools_dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();

    // Baseline: read and parse the same files as untyped YAML.
    let mut baseline = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let mut entries: Vec<_> = std::fs::read_dir(&tools_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            let text = std::fs::read_to_string(p).unwrap();
            let v: serde_json::Value = serde_yaml_baseline(&text);
            black_box(v);
        }
        baseline.push(start.elapsed());
    }

    let rss_before = rss_bytes();
    let mut loads = Vec::new();
    let mut kept = None;
    for _ in 0..RUNS {
        let start = Instant::now();
        let catalog =
            Catalog::load_with_env(dir.path(), &|_| None).unwrap_or_else(|e| panic!("{e}"));
        loads.push(start.elapsed());
        kept = Some(catalog);
    }
    let catalog = kept.unwrap();
    let rss_after = rss_bytes();
    assert_eq!(catalog.tools().count(), TOOLS);
    assert_eq!(catalog.set("all").unwrap().tools.len(), TOOLS);

    let load = median(loads);
    let base = median(baseline);
    println!(
        "catalog load: {TOOLS} HTTP tools in {FILES} files ({} KiB of YAML), median of {RUNS} runs",
        bytes / 1024
    );
    println!(
        "  baseline (parse as untyped YAML only): {:>8.2} ms",
        base.as_secs_f64() * 1e3
    );
    println!(
        "  full load (parse, validate, compile):  {:>8.2} ms",
        load.as_secs_f64() * 1e3
    );
    println!(
        "  ratio full/baseline:                   {:>8.2}x",
        load.as_secs_f64() / base.as_secs_f64()
    );
    println!(
        "  resident memory after loading:         {:>8.1} MiB (growth over the process before loading: {:.1} MiB)",
        rss_after as f64 / (1024.0 * 1024.0),
        rss_after.saturating_sub(rss_before) as f64 / (1024.0 * 1024.0)
    );
    black_box(catalog);
}

/// Plain YAML parsing through the same parser the loader uses.
fn serde_yaml_baseline(text: &str) -> serde_json::Value {
    gateway::config::load::parse_untyped(text)
}
