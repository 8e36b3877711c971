//! Code mode against direct calls and tool search: the input a model reads
//! to complete one multi-step task, and its round trips, with the scripted
//! model; then the interpreter's own cost per program and per tool call
//! from a program, next to starting a process that does nothing.
//!
//! The task: "the open issues labelled bug in three repositories,
//! summarised" — three calls of the API's list-issues operation, each
//! answering 30 issues of GitHub's shape (a local API plays GitHub). Over
//! GitHub's own description imported (1,223 tools, when `make setup` has
//! installed it) and over 500 generated tools, each set three ways:
//!
//! - direct: every tool offered; the model makes the three calls in one
//!   turn, then answers (2 model requests);
//! - search: `find_tools`, then the three calls of what it found in one
//!   turn, then the answer (3 requests);
//! - code: `find_tools` (with signatures), then one program that makes the
//!   three calls and returns the five newest titles per repository, then
//!   the answer (3 requests);
//! - code-stubs: the same program at once, the set's functions read from
//!   `run_code`'s description (stubs up to 48 KiB: for these sets not
//!   every tool is shown, the task's may not be), then the answer (2
//!   requests).
//!
//! Input is the bytes of every request the gateway sent the model (tools,
//! messages, results), and tokens as bytes / 4.
//!
//! Run with `make bench` (release mode, nothing else compiling).

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static ALLOCATOR: toolgate_alloc::Mimalloc = toolgate_alloc::Mimalloc;

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use serde_json::{Value, json};
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{ConfigDir, Gateway, load_catalog, post_json, user};

const REPOS: [&str; 3] = ["api", "web", "cli"];

/// 30 issues of GitHub's shape (the fields its API answers most).
fn issues(repo: &str) -> Value {
    let list: Vec<Value> = (1..=30)
        .map(|n| {
            json!({
                "url": format!("https://api.github.com/repos/acme/{repo}/issues/{n}"),
                "html_url": format!("https://github.com/acme/{repo}/issues/{n}"),
                "id": 1_000_000 + n,
                "node_id": format!("I_kwDOAbc{n:05}"),
                "number": n,
                "title": format!("{repo}: request {n} fails when the cache is cold"),
                "user": {"login": format!("user{}", n % 7), "id": 500 + n % 7, "type": "User", "site_admin": false},
                "labels": [{"id": 11, "name": "bug", "color": "d73a4a", "default": true, "description": "Something isn't working"}],
                "state": "open",
                "locked": false,
                "assignee": null,
                "assignees": [],
                "milestone": null,
                "comments": n % 5,
                "created_at": format!("2026-10-{:02}T10:00:00Z", 1 + n % 28),
                "updated_at": format!("2026-11-{:02}T09:00:00Z", 1 + n % 26),
                "closed_at": null,
                "author_association": "CONTRIBUTOR",
                "body": format!("Steps to reproduce:\n1. Start {repo} with an empty cache.\n2. Send request {n}.\n\nExpected: an answer within 100 ms. Actual: a timeout after 30 s, and the log shows the cache being filled twice. This happens on every cold start since the last release; a warm cache hides it."),
                "reactions": {"total_count": n % 3, "+1": n % 3, "-1": 0},
            })
        })
        .collect();
    Value::Array(list)
}

async fn api() -> String {
    let app = Router::new()
        .route(
            "/repos/{owner}/{repo}/issues",
            get(|Path((_, repo)): Path<(String, String)>| async move { axum::Json(issues(&repo)) }),
        )
        .route(
            "/svc/{n}/items",
            get(|Path(n): Path<String>| async move { axum::Json(issues(&n)) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// 500 generated tools: `svc_{i}_list_items` (the task's is number 250),
/// with their neighbours to search through.
fn generated(api: &str) -> String {
    let mut yaml = String::from("tools:\n");
    for i in 0..500 {
        let (what, desc) = match i % 5 {
            0 => (
                "list_items",
                "List the open items of a project, filtered by label and state.",
            ),
            1 => ("get_item", "Get one item of a project by its number."),
            2 => ("create_item", "Create an item in a project."),
            3 => ("list_members", "List the members of a project."),
            _ => (
                "update_item",
                "Update the title, labels or state of an item.",
            ),
        };
        yaml.push_str(&format!(
            "  - name: svc_{i}_{what}\n    description: \"Service {i}: {desc}\"\n    parameters:\n      type: object\n      properties:\n        project: {{ type: string }}\n        labels: {{ type: string }}\n        state: {{ type: string }}\n      required: [project]\n    http:\n      url: \"{api}/svc/{{{{ args.project }}}}/items\"\n      query: {{ labels: \"{{{{ args.labels }}}}\", state: \"{{{{ args.state }}}}\" }}\n"
        ));
    }
    yaml
}

struct Measured {
    bytes: usize,
    requests: usize,
    answered: bool,
}

async fn run_task(gateway: &Gateway, model: &MockLlm, set: &str, script: &str) -> Measured {
    let before = model.requests().len();
    let (status, body) = post_json(
        &gateway.url("/v1/chat/completions"),
        &json!({"model": "m", "tool_set": set, "messages": user(script)}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let requests = model.requests();
    let sent = &requests[before..];
    let answered = body["choices"][0]["message"]["content"]
        .as_str()
        .is_some_and(|t| t.starts_with("Tool results:"));
    Measured {
        bytes: sent
            .iter()
            .map(|r| serde_json::to_vec(r).unwrap().len())
            .sum(),
        requests: sent.len(),
        answered,
    }
}

fn row(name: &str, m: &Measured, direct: &Measured) {
    println!(
        "  {name:<10} {:>10} bytes  ~{:>8} tokens  {} model requests  {:>6.1}% of direct{}",
        m.bytes,
        m.bytes / 4,
        m.requests,
        100.0 * m.bytes as f64 / direct.bytes as f64,
        if m.answered { "" } else { "  (NOT ANSWERED)" }
    );
}

async fn compare(
    title: &str,
    tool: &str,
    args: impl Fn(&str) -> Value,
    query: &str,
    dir: &ConfigDir,
    model: &MockLlm,
) {
    let catalog = load_catalog(dir.path(), &[]);
    let gateway = Gateway::start(catalog).await;
    let calls = |verb: &str| {
        REPOS
            .iter()
            .map(|r| format!("{verb} {tool} {}", args(r)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let function = toolgate_engine::tools::code::function_name(tool).unwrap();
    let arg_text = |r: &str| {
        args(r)
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let program = format!(
        "summary = {{}}\n{}\nfor name, found in results.items():\n    summary[name] = {{'open_bugs': len(found), 'newest': [i['title'] for i in found[:5]]}}\nsummary",
        format_args!(
            "results = {{{}}}",
            REPOS
                .iter()
                .map(|r| format!("'{r}': {function}({})", arg_text(r)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    );
    let find = json!({ "query": query });
    let direct = run_task(&gateway, model, "direct", &calls("call")).await;
    let search = run_task(
        &gateway,
        model,
        "search",
        &format!("call find_tools {find} {}", calls("next")),
    )
    .await;
    let code = run_task(
        &gateway,
        model,
        "code",
        &format!(
            "call find_tools {find} then run_code {}",
            json!({ "code": program })
        ),
    )
    .await;
    let stubs = run_task(
        &gateway,
        model,
        "code-stubs",
        &format!("call run_code {}", json!({ "code": program })),
    )
    .await;
    println!("{title}");
    row("direct", &direct, &direct);
    row("search", &search, &direct);
    row("code", &code, &direct);
    row("code-stubs", &stubs, &direct);
}

fn sets(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("tool-sets")).unwrap();
    for (name, extra) in [
        ("direct", ""),
        ("search", "discovery: search\n"),
        ("code", "discovery: search\nmode: code\n"),
        ("code-stubs", "mode: code\n"),
    ] {
        std::fs::write(
            dir.join(format!("tool-sets/{name}.yaml")),
            format!("name: {name}\ntools: [\"*\"]\n{extra}"),
        )
        .unwrap();
    }
}

fn gateway_yaml(model: &MockLlm) -> String {
    format!(
        "upstreams:\n  - name: mock\n    base_url: {}\n    retries: {{ max_attempts: 1 }}\nmodels:\n  - model: \"*\"\n    upstream: mock\n    formatter: function_calling\nlimits: {{ max_tool_iterations: 8 }}\n",
        model.base_url()
    )
}

async fn interpreter_cost() {
    let worker = toolgate_code::Worker::current().unwrap();
    let limits = toolgate_code::Limits::default();
    let time = |code: &'static str, functions: Vec<String>| {
        let worker = worker.clone();
        async move {
            let mut runs = Vec::new();
            for _ in 0..21 {
                let start = Instant::now();
                let out = worker
                    .run(code, &functions, &limits, |_| async { Ok(Value::Null) })
                    .await;
                assert!(out.value.is_ok(), "{out:?}");
                runs.push(start.elapsed());
            }
            runs.sort();
            runs[runs.len() / 2]
        }
    };
    let mut spawns = Vec::new();
    for _ in 0..21 {
        let start = Instant::now();
        tokio::process::Command::new("/bin/true")
            .status()
            .await
            .unwrap();
        spawns.push(start.elapsed());
    }
    spawns.sort();
    let spawn = spawns[spawns.len() / 2];
    let empty = time("1", Vec::new()).await;
    let calls = time("for i in range(50):\n    f(i=i)", vec!["f".into()]).await;
    let per_call = calls.saturating_sub(empty) / 50;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("the interpreter's own cost (median of 21)");
    println!(
        "  a program (worker start, confinement, run, exit): {:>8.0} us  ({:.2}x starting /bin/true: {:.0} us)",
        us(empty),
        us(empty) / us(spawn),
        us(spawn)
    );
    println!(
        "  a tool call from a program (no tool behind it):   {:>8.1} us  (50 calls: {:.0} us)",
        us(per_call),
        us(calls)
    );
}

#[tokio::main]
async fn main() {
    let api = api().await;
    let model = MockLlm::start().await;

    // 500 generated tools.
    let dir = ConfigDir::new(&[("toolgate.yaml", &gateway_yaml(&model))]);
    std::fs::create_dir_all(dir.path().join("tools.d")).unwrap();
    std::fs::write(dir.path().join("tools.d/gen.yaml"), generated(&api)).unwrap();
    sets(dir.path());
    compare(
        "code mode, 500 generated tools: input of one task of 3 calls (30 issues each)",
        "svc_250_list_items",
        |r| json!({"project": r, "labels": "bug", "state": "open"}),
        "service 250 list the open items of a project",
        &dir,
        &model,
    )
    .await;

    // GitHub's description.
    let spec = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("openapi/node_modules/@octokit/openapi/generated/api.github.com.json");
    if spec.exists() {
        let dir = ConfigDir::new(&[("toolgate.yaml", &gateway_yaml(&model))]);
        std::fs::create_dir_all(dir.path().join("tools.d")).unwrap();
        std::fs::write(
            dir.path().join("tools.d/github.yaml"),
            format!(
                "openapi:\n  - spec: {}\n    server: {api}\n",
                spec.display()
            ),
        )
        .unwrap();
        sets(dir.path());
        let catalog = load_catalog(dir.path(), &[]);
        let tool = catalog
            .tools()
            .map(|t| t.name.clone())
            .find(|n| n.contains("list-for-repo") && n.starts_with("issues"))
            .expect("GitHub's list-issues operation");
        drop(catalog);
        compare(
            &format!(
                "code mode, GitHub's {} tools: input of one task of 3 calls (30 issues each)",
                1223
            ),
            &tool,
            |r| json!({"owner": "acme", "repo": r, "labels": "bug", "state": "open"}),
            "list issues of a repository",
            &dir,
            &model,
        )
        .await;
    } else {
        println!(
            "code mode, GitHub: skipped, {} is missing (make setup)",
            spec.display()
        );
    }
    interpreter_cost().await;
}
