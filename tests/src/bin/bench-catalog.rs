//! Loads a catalog of 1,000 generated HTTP tools and reports the load time
//! and memory, next to a baseline measured in the same run: parsing the same
//! files as plain YAML values (no typed structs, no validation).
//!
//! Then, when `make setup` has installed GitHub's OpenAPI description
//! (`tests/openapi/package.json`): the time to import it into tools and to
//! load the resulting catalog, next to the 1,000 generated tools' load
//! measured in the same run, and the size of the tool definitions a model
//! would be sent for the whole set.
//!
//! Run with `make bench` (release mode, nothing else compiling).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

/// The allocator the gateway runs on (`gateway/server/src/main.rs`), so
/// that times and memory are the gateway's, behind `cap`'s count of the
/// bytes live (what a structure holds, which resident memory does not tell
/// once the allocator reuses pages).
#[global_allocator]
static ALLOCATOR: cap::Cap<toolgate_alloc::Mimalloc> =
    cap::Cap::new(toolgate_alloc::Mimalloc, usize::MAX);

/// Bytes allocated and not yet freed.
fn live_bytes() -> usize {
    ALLOCATOR.allocated()
}

use std::hint::black_box;
use std::time::{Duration, Instant};

use toolgate_engine::catalog::Catalog;

const TOOLS: usize = 1_000;
const FILES: usize = 50;
const RUNS: usize = 15;

fn tool_yaml(i: usize, cached: bool) -> String {
    let cache = if cached {
        "    cache: { ttl: 1m }\n"
    } else {
        ""
    };
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
{cache}"#
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

/// Writes a configuration folder of `TOOLS` generated tools.
fn write_config(dir: &std::path::Path, cached: bool) -> u64 {
    let tools_dir = dir.join("tools.d");
    std::fs::create_dir_all(&tools_dir).unwrap();
    let per_file = TOOLS / FILES;
    for f in 0..FILES {
        let mut text = String::from("tools:\n");
        for i in f * per_file..(f + 1) * per_file {
            text.push_str(&tool_yaml(i, cached));
        }
        std::fs::write(tools_dir.join(format!("gen-{f:03}.yaml")), text).unwrap();
    }
    std::fs::create_dir_all(dir.join("tool-sets")).unwrap();
    std::fs::write(
        dir.join("tool-sets/all.yaml"),
        "name: all\ntools: [\"tool_*\"]\n",
    )
    .unwrap();
    std::fs::read_dir(&tools_dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn load(dir: &std::path::Path) -> Catalog {
    Catalog::load_with_env(dir, &|_| None).unwrap_or_else(|e| panic!("{e}"))
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = write_config(dir.path(), true);
    let plain = tempfile::tempdir().unwrap();
    write_config(plain.path(), false);
    let tools_dir = dir.path().join("tools.d");

    // Memory first, in a process that has loaded nothing yet: one catalog
    // without result caches, then one with a cache per tool.
    let rss_start = rss_bytes();
    let without_caches = load(plain.path());
    let rss_plain = rss_bytes();
    let with_caches = load(dir.path());
    let rss_cached = rss_bytes();
    assert_eq!(without_caches.tools().count(), TOOLS);
    drop(without_caches);
    drop(with_caches);

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

    let mut loads = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        let catalog = load(dir.path());
        loads.push(start.elapsed());
        assert_eq!(catalog.tools().count(), TOOLS);
        assert_eq!(catalog.set("all").unwrap().tools.len(), TOOLS);
        black_box(catalog);
    }

    let load = median(loads);
    let base = median(baseline);
    let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
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
        "  resident memory before loading:        {:>8.1} MiB",
        mib(rss_start)
    );
    println!(
        "  + one catalog, no result caches:       {:>8.1} MiB ({:.1} KiB per tool)",
        mib(rss_plain.saturating_sub(rss_start)),
        rss_plain.saturating_sub(rss_start) as f64 / 1024.0 / TOOLS as f64
    );
    println!(
        "  + one catalog, a cache on every tool:  {:>8.1} MiB ({:.1} KiB per tool)",
        mib(rss_cached.saturating_sub(rss_plain)),
        rss_cached.saturating_sub(rss_plain) as f64 / 1024.0 / TOOLS as f64
    );
    policies(dir.path());
    injection_model();
    github(load);
}

/// The built-in injection model's time per piece of 2,000 characters of
/// ordinary prose (the project's own documents: every window of a piece is
/// read, but for the few pieces flagged, which stop at their first flagged
/// window), p50 and p95 over every piece, each timed over 20 runs.
fn injection_model() {
    use toolgate_engine::governance::injection_model::MODEL;
    let model = MODEL.as_ref().expect("the built-in injection model reads");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text: String = [
        "README.md",
        "ARCHITECTURE.md",
        "SECURITY.md",
        "docs/operations.md",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
    .collect();
    let chars: Vec<char> = text.chars().collect();
    let pieces: Vec<String> = chars
        .chunks_exact(2000)
        .map(|c| c.iter().collect())
        .collect();
    let mut each: Vec<Duration> = pieces
        .iter()
        .map(|p| {
            let start = Instant::now();
            for _ in 0..20 {
                black_box(model.flags(black_box(p)));
            }
            start.elapsed() / 20
        })
        .collect();
    each.sort();
    let at = |q: f64| each[((each.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    println!(
        "  injection model, per 2,000 characters:  {:>8.1} us p50, {:.1} us p95 ({} pieces of prose, {} of them flagged)",
        at(0.5),
        at(0.95),
        pieces.len(),
        pieces.iter().filter(|p| model.flags(p)).count()
    );
}

/// The cost of `policies` per call: one and ten rules that do not match a
/// call (each evaluated), next to the same call's argument validation against
/// its tool's schema, measured in the same run.
fn policies(dir: &std::path::Path) {
    use toolgate_config::format::{PolicyAction, PolicyDecl};
    use toolgate_engine::governance::policy::{Caller, Policy, check};
    const CALLS: usize = 20_000;
    let catalog = load(dir);
    let tool = catalog.tool("tool_0001").unwrap();
    let args = serde_json::json!({"id": "item-42", "q": "blue shoes", "limit": 10});
    let rules: Vec<Policy> = (0..10)
        .map(|i| {
            Policy::compile(&PolicyDecl {
                name: format!("rule_{i}"),
                tools: vec!["tool_*".into()],
                condition: format!(
                    r#"has(args.q) && args.q.startsWith("forbidden-{i}") && caller.key != "admin""#
                ),
                action: PolicyAction::Deny,
                reason: None,
            })
            .unwrap()
        })
        .collect();
    let caller = Caller {
        key: Some("bench"),
        project: None,
        tool_set: Some("default"),
        subject: Some("bench"),
        claims: None,
    };
    let time = |f: &dyn Fn()| {
        let mut runs = Vec::new();
        for _ in 0..RUNS {
            let start = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            runs.push(start.elapsed() / CALLS as u32);
        }
        median(runs)
    };
    let validate = time(&|| {
        black_box(tool.validate(black_box(&args)).is_ok());
    });
    for n in [1, 10] {
        let checked = time(&|| {
            black_box(check(&rules[..n], "tool_0001", black_box(&args), caller).is_ok());
        });
        println!(
            "  policies, {n:>2} rule(s) per call:         {:>8.2} us  (argument validation of the same call: {:.2} us, {:.1}x)",
            checked.as_secs_f64() * 1e6,
            validate.as_secs_f64() * 1e6,
            checked.as_secs_f64() / validate.as_secs_f64().max(1e-12)
        );
    }
}

/// GitHub's description imported, then its tools loaded; `generated` is
/// the median load of the generated tools, measured just before.
fn github(generated: Duration) {
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("openapi/node_modules/@octokit/openapi/generated/api.github.com.json");
    if !spec.exists() {
        println!(
            "openapi import: skipped, {} is missing (make setup)",
            spec.display()
        );
        return;
    }
    let options = toolgate_openapi::Options::default();
    let mut imports = Vec::new();
    let mut yaml = String::new();
    let mut tools = 0;
    for _ in 0..5 {
        let start = Instant::now();
        let imported = toolgate_openapi::import_file(&spec, &options).unwrap();
        yaml = toolgate_openapi::to_yaml(&imported, "api.github.com.json").unwrap();
        imports.push(start.elapsed());
        tools = imported.tools.len();
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tools.d")).unwrap();
    std::fs::write(dir.path().join("tools.d/github.yaml"), &yaml).unwrap();

    let mut loads = Vec::new();
    let mut prompt_bytes = 0;
    for _ in 0..RUNS {
        let start = Instant::now();
        let catalog = load(dir.path());
        loads.push(start.elapsed());
        assert_eq!(catalog.tools().count(), tools);
        prompt_bytes = catalog
            .tools()
            .map(|t| serde_json::to_vec(&t.to_openai()).unwrap().len())
            .sum::<usize>();
        black_box(catalog);
    }
    let (import, load) = (median(imports), median(loads));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let per_tool = |d: Duration, n: usize| d.as_secs_f64() * 1e6 / n as f64;
    println!(
        "openapi import: GitHub's description ({:.1} MB) into {tools} tools, median of 5 / {RUNS} runs",
        std::fs::metadata(&spec).unwrap().len() as f64 / 1e6
    );
    println!(
        "  import (read, resolve, write YAML):    {:>8.2} ms",
        ms(import)
    );
    println!(
        "  load of the {tools} imported tools:     {:>8.2} ms ({:.0} us per tool; generated: {:.0} us per tool, {:.2}x)",
        ms(load),
        per_tool(load, tools),
        per_tool(generated, TOOLS),
        per_tool(load, tools) / per_tool(generated, TOOLS)
    );
    println!(
        "  tool definitions of the whole set:     {:>8.1} KiB ({} bytes per tool)",
        prompt_bytes as f64 / 1024.0,
        prompt_bytes / tools.max(1)
    );
    search_surface(dir.path(), prompt_bytes);
}

/// `discovery: search` on the GitHub set: the load with the set (its index
/// built), what a prompt carries after one search (find_tools and the 5
/// tools found) for each task of tests/openapi/github-tasks-*.yaml, and
/// how long a search takes, by words alone and with the model of
/// `search.model` (`make search-model`); then the memory of the index per
/// tool.
fn search_surface(dir: &std::path::Path, whole: usize) {
    std::fs::create_dir_all(dir.join("tool-sets")).unwrap();
    std::fs::write(
        dir.join("tool-sets/github.yaml"),
        "name: github\ntools: [\"*\"]\ndiscovery: search\n",
    )
    .unwrap();
    let mut loads = Vec::new();
    for _ in 0..RUNS {
        let start = Instant::now();
        black_box(load(dir));
        loads.push(start.elapsed());
    }
    let catalog = load(dir);
    let set = catalog.set("github").unwrap();
    let start = Instant::now();
    black_box(catalog.find_tools(set, "merge a pull request", 5, None));
    let first = start.elapsed();
    println!(
        "  load with the set declared `discovery: search`: {:>8.2} ms; the first search after it (waits for the index, built on its own thread): {:.2} ms",
        median(loads).as_secs_f64() * 1e3,
        first.as_secs_f64() * 1e3
    );
    let bytes =
        |t: &toolgate_engine::tools::tool::Tool| serde_json::to_vec(&t.to_openai()).unwrap().len();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi");
    let mut tasks: Vec<String> = Vec::new();
    for file in ["github-tasks-tuning.yaml", "github-tasks-held-out.yaml"] {
        let list = toolgate_config::load::parse_untyped(
            &std::fs::read_to_string(root.join(file)).unwrap(),
        );
        tasks.extend(
            list.as_array()
                .unwrap()
                .iter()
                .map(|t| t["task"].as_str().unwrap().to_owned()),
        );
    }
    // The first search builds nothing: the index was built at load.
    let mut times = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..RUNS {
        for task in &tasks {
            let start = Instant::now();
            let found = catalog.find_tools(set, task, 5, None);
            times.push(start.elapsed());
            sizes.push(bytes(&set.search_tool) + found.iter().map(|t| bytes(t)).sum::<usize>());
        }
    }
    sizes.sort_unstable();
    let median_bytes = sizes[sizes.len() / 2];
    let mut all: Vec<usize> = catalog.tools_in(set, None).map(|t| bytes(&t)).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    let cap = toolgate_engine::tools::discovery::DEFAULT_MAX_IN_PROMPT;
    let worst = bytes(&set.search_tool) + all.iter().take(cap).sum::<usize>();
    println!(
        "  with discovery: search, one search (5 found), {} tasks: median {:>6.1} KiB ({:.1}% of the whole set); at most {cap} found: {:.1} KiB",
        tasks.len(),
        median_bytes as f64 / 1024.0,
        median_bytes as f64 * 100.0 / whole as f64,
        worst as f64 / 1024.0,
    );
    let by_words = median(times);
    println!(
        "  a search (BM25 over {} tools, reranked):  {:>8.1} us median",
        all.len(),
        by_words.as_secs_f64() * 1e6
    );

    let model_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/models/potion-base-2M")
        .canonicalize();
    let Ok(model_dir) = model_dir else {
        println!(
            "  a search with the model: skipped, target/models/potion-base-2M is missing (make search-model)"
        );
        return;
    };
    std::fs::write(
        dir.join("toolgate.yaml"),
        format!("search:\n  model: {model_dir:?}\n"),
    )
    .unwrap();
    let catalog = load(dir);
    let set = catalog.set("github").unwrap();
    let model = catalog.search_model.clone().unwrap();
    black_box(catalog.find_tools(set, "merge a pull request", 5, None));
    let mut times = Vec::new();
    for _ in 0..RUNS {
        for task in &tasks {
            let start = Instant::now();
            black_box(catalog.find_tools(set, task, 5, None));
            times.push(start.elapsed());
        }
    }
    let with_model = median(times);
    println!(
        "  a search with the model (potion-base-2M): {:>8.1} us median ({:.2}x by words alone)",
        with_model.as_secs_f64() * 1e6,
        with_model.as_secs_f64() / by_words.as_secs_f64()
    );

    // The index's own memory: bytes live after building it, less before.
    let tools: Vec<_> = catalog.tools_in(set, None).collect();
    let indexed: Vec<toolgate_engine::tools::discovery::Indexed<'_>> = tools
        .iter()
        .map(|t| toolgate_engine::tools::discovery::Indexed {
            name: &t.name,
            description: &t.description,
            category: t.category.as_deref(),
            parameters: &t.parameters,
        })
        .collect();
    let held = |model| {
        let before = live_bytes();
        let ranker = toolgate_engine::tools::discovery::Ranker::new(&indexed, model);
        let after = live_bytes();
        black_box(ranker);
        after.saturating_sub(before)
    };
    let words = held(None);
    let both = held(Some(&model));
    println!(
        "  the search index's memory, {} tools: by words {:.1} KiB per tool; with the model {:.1} KiB per tool (the model: a file of {:.1} MiB, read once and shared by every set)",
        tools.len(),
        words as f64 / 1024.0 / tools.len() as f64,
        both as f64 / 1024.0 / tools.len() as f64,
        std::fs::metadata(model_dir.join("model.safetensors"))
            .unwrap()
            .len() as f64
            / 1048576.0
    );
}

/// Plain YAML parsing through the same parser the loader uses.
fn serde_yaml_baseline(text: &str) -> serde_json::Value {
    toolgate_config::load::parse_untyped(text)
}
