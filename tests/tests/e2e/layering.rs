//! The crate layering, checked on the resolved dependency graph (`cargo
//! metadata`): each crate of the workspace depends only on crates of lower
//! layers, the engine and everything below it link no HTTP server or CLI
//! framework, and no dependency of the shipped crates needs a Rust newer
//! than the workspace's declared `rust-version`. Inside the crates, the
//! module graph read from the sources (`toolgate_tests::modgraph`): no
//! files or folders refer to each other in a circle, and the engine's and
//! the server's modules follow their declared order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;
use toolgate_tests::repo_root;

/// The layers, lowest first: a crate may depend on crates of lower layers
/// only (dev-dependencies aside).
const LAYERS: &[&[&str]] = &[
    // Pure: configuration knows only its YAML (the catalog builder
    // expands `openapi:` entries), parsers know only their input.
    &[
        "toolgate-toolcall",
        "toolgate-openapi",
        "tool-macros",
        "toolgate-config",
        "toolgate-code",
        // The global allocator, knowing nothing of the gateway.
        "toolgate-alloc",
    ],
    &["toolgate"],
    &[
        "toolgate-builtins",
        "toolgate-mcp-client",
        "tool-macros-tests",
    ],
    &["toolgate-engine"],
    &["toolgate-server"],
    &["toolgate-tests", "custom-tools"],
];

/// Crates the engine (and what is below it) must never link.
const SERVER_ONLY: &[&str] = &[
    "axum",
    "clap",
    "tracing-subscriber",
    "notify",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry-otlp",
    "tracing-opentelemetry",
];

struct Graph {
    /// Package id → (name, rust-version).
    packages: HashMap<String, (String, Option<String>)>,
    /// Package id → ids of its normal and build dependencies.
    deps: HashMap<String, Vec<String>>,
    /// Ids of the workspace's own crates (not the patched dependencies
    /// under `vendor/`).
    members: Vec<String>,
    workspace_rust_version: String,
}

fn graph() -> Graph {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
            "x86_64-unknown-linux-gnu",
        ])
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_owned(),
                (
                    p["name"].as_str().unwrap().to_owned(),
                    p["rust_version"].as_str().map(str::to_owned),
                ),
            )
        })
        .collect::<HashMap<_, _>>();
    let deps = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let ids = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null() || k["kind"] == "build")
                })
                .map(|d| d["pkg"].as_str().unwrap().to_owned())
                .collect();
            (n["id"].as_str().unwrap().to_owned(), ids)
        })
        .collect();
    let workspace_rust_version = packages
        .values()
        .find(|(name, _)| name == "toolgate-engine")
        .and_then(|(_, v)| v.clone())
        .expect("the workspace declares rust-version");
    let members = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    Graph {
        packages,
        deps,
        members,
        workspace_rust_version,
    }
}

impl Graph {
    fn id(&self, name: &str) -> &str {
        self.packages
            .iter()
            .find(|(_, (n, _))| n == name)
            .map(|(id, _)| id.as_str())
            .unwrap_or_else(|| panic!("no package {name}"))
    }

    fn name(&self, id: &str) -> &str {
        &self.packages[id].0
    }

    /// Every package `name` links (normal and build dependencies, transitively).
    fn closure(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![self.id(name).to_owned()];
        while let Some(id) = todo.pop() {
            for d in self.deps.get(&id).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    }
}

fn layer_of(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&name))
}

#[test]
fn each_crate_depends_only_on_lower_layers() {
    let g = graph();
    let mut wrong = Vec::new();
    for layer in LAYERS.iter().flat_map(|l| l.iter()) {
        let own = layer_of(layer).unwrap();
        for d in &g.deps[g.id(layer)] {
            let dep = g.name(d);
            if let Some(l) = layer_of(dep)
                && l >= own
            {
                wrong.push(format!(
                    "{layer} (layer {own}) depends on {dep} (layer {l})"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Every crate of the workspace has its layer.
    for id in &g.members {
        let name = g.name(id);
        assert!(layer_of(name).is_some(), "{name} has no layer in LAYERS");
    }
}

#[test]
fn the_engine_and_below_link_no_http_server_or_cli() {
    let g = graph();
    for krate in [
        "toolgate-engine",
        "toolgate-mcp-client",
        "toolgate-builtins",
        "toolgate-code",
        "toolgate",
        "toolgate-config",
        "toolgate-toolcall",
        "toolgate-openapi",
    ] {
        let linked: Vec<&str> = g
            .closure(krate)
            .iter()
            .map(|id| g.name(id))
            .filter(|n| SERVER_ONLY.contains(n))
            .collect();
        assert!(linked.is_empty(), "{krate} links {linked:?}");
    }
    // And the check can see them: the server does link axum and clap.
    let server: Vec<String> = g
        .closure("toolgate-server")
        .iter()
        .map(|id| g.name(id).to_owned())
        .collect();
    assert!(server.iter().any(|n| n == "axum") && server.iter().any(|n| n == "clap"));
}

#[test]
fn no_dependency_needs_a_newer_rust_than_declared() {
    let g = graph();
    let declared = version(&g.workspace_rust_version);
    let mut newer = Vec::new();
    for krate in ["toolgate-server", "toolgate"] {
        for id in g.closure(krate) {
            let (name, rv) = &g.packages[&id];
            if let Some(rv) = rv
                && version(rv) > declared
            {
                newer.push(format!("{name} needs Rust {rv}"));
            }
        }
    }
    newer.sort();
    newer.dedup();
    assert!(
        newer.is_empty(),
        "rust-version is {}: {newer:#?}",
        g.workspace_rust_version
    );
}

fn version(v: &str) -> (u32, u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

/// Configuration is validated in one place: diagnostics are made only by
/// the config crate (syntax and types) and the catalog builder, never by a
/// runtime module that later uses the settings.
#[test]
fn diagnostics_are_made_only_while_the_catalog_is_built() {
    let root = repo_root().join("gateway");
    let mut found = Vec::new();
    let mut todo = vec![root.clone()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                if text.contains("Diagnostic::") {
                    found.push(path.strip_prefix(&root).unwrap().to_owned());
                }
            }
        }
    }
    let outside: Vec<_> = found
        .iter()
        .filter(|p| !(p.starts_with("config/src") || p.starts_with("engine/src/catalog")))
        .collect();
    assert!(
        outside.is_empty(),
        "diagnostics made outside the catalog builder: {outside:?}"
    );
    assert!(
        found.iter().any(|p| p.starts_with("engine/src/catalog")),
        "the scan sees the catalog builder"
    );
}

/// The module order inside the large crates, lowest first: a module
/// may refer only to modules of lower layers (its own submodules aside).
/// A new module must be given its layer here.
const MODULE_LAYERS: &[(&str, &[&[&str]])] = &[
    (
        "gateway/engine/src",
        &[
            &["support", "conversation"],
            &["identity", "model"],
            &["governance", "tools"],
            &["catalog"],
            &["executor"],
            &["chat"],
        ],
    ),
    (
        "gateway/mcp-client/src",
        &[
            &["spec", "result", "extras", "relay", "stdio", "progress"],
            &["oauth"],
            &["errors"],
            &["session"],
            &["call"],
            &["registry"],
        ],
    ),
    (
        "gateway/code/src",
        &[&["protocol", "value"], &["confine", "worker", "host"]],
    ),
    (
        "gateway/server/src",
        &[
            &["telemetry"],
            &["reload"],
            &["http"],
            &["ops", "faces"],
            &["router"],
            &["server"],
            &["cli"],
        ],
    ),
];

/// Every library crate's sources, read as a module graph.
fn crate_sources() -> Vec<std::path::PathBuf> {
    let root = repo_root();
    let mut dirs: Vec<_> = std::fs::read_dir(root.join("gateway"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .collect();
    dirs.extend(
        ["tool-macros/src", "tests/src", "examples/custom-tools/src"]
            .iter()
            .map(|d| root.join(d)),
    );
    dirs.sort();
    dirs
}

#[test]
fn no_modules_refer_to_each_other_in_a_circle() {
    use toolgate_tests::modgraph::{Graph, name, read};
    let mut circles = Vec::new();
    let mut modules = 0;
    for src in crate_sources() {
        let graph = read(&src);
        modules += graph.files.len();
        let deepest = graph.files.keys().map(Vec::len).max().unwrap_or(0);
        // Files, then folders at each depth: a circle between two folders
        // is one even when their files form none.
        for depth in (1..=deepest).rev() {
            for circle in Graph::circles(&graph.at_depth(depth)) {
                circles.push(format!(
                    "{}: {}",
                    src.display(),
                    circle.iter().map(name).collect::<Vec<_>>().join(" <-> ")
                ));
            }
        }
    }
    // The check reads the sources it should.
    assert!(modules > 100, "only {modules} modules read");
    assert!(circles.is_empty(), "{circles:#?}");
}

#[test]
fn modules_refer_only_to_lower_layers() {
    use toolgate_tests::modgraph::{name, read};
    let mut wrong = Vec::new();
    for (src, layers) in MODULE_LAYERS {
        let graph = read(&repo_root().join(src));
        let layer_of = |m: &Vec<String>| {
            m.first()
                .and_then(|top| layers.iter().position(|l| l.contains(&top.as_str())))
        };
        for module in graph.files.keys().filter(|m| !m.is_empty()) {
            assert!(
                layer_of(module).is_some(),
                "{src}: module `{}` has no layer in MODULE_LAYERS",
                module[0]
            );
        }
        let mut edges = 0;
        for (from, tos) in &graph.edges {
            for to in tos {
                let (Some(f), Some(t)) = (layer_of(from), layer_of(to)) else {
                    continue; // the crate root
                };
                edges += 1;
                if from.first() != to.first() && t >= f {
                    wrong.push(format!(
                        "{src}: {} (layer {f}) refers to {} (layer {t})",
                        name(from),
                        name(to)
                    ));
                }
            }
        }
        // The check reads the references it should (the MCP client and the
        // interpreter's crate are a handful of modules, the engine and the
        // server dozens).
        let least = if src.contains("mcp-client") || src.contains("code") {
            3
        } else {
            30
        };
        assert!(edges >= least, "{src}: only {edges} references read");
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
