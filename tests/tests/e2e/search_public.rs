//! Tool search judged on public data no one here wrote: two tool-retrieval
//! sets built from packages on PyPI (hash-pinned in
//! `tests/public-data/requirements.txt`, unpacked by `make setup`):
//!
//! - **BFCL v4**: every function of the Berkeley Function Calling
//!   Leaderboard's simple, multiple, parallel, parallel-multiple, live and
//!   irrelevance sets in one pool (names deduplicated), each question of
//!   the answered sets a query, the functions its answer calls the tools
//!   to find.
//! - **AgentDojo**: the tools of its four suites (workspace, travel,
//!   banking, Slack) in one pool, each user task's prompt a query, the
//!   functions its ground truth calls the tools to find (read from the
//!   source by `tests/public-data/extract.py`).
//!
//! Each query is ranked by the gateway's search (`discovery::Ranker`, what
//! `find_tools` runs) with the static embedding model `make search-model`
//! fetches and by words alone, and by a plain BM25 over name, description
//! and parameter names, in the same run. The model's share of the score
//! was chosen on the GitHub tuning tasks (`e2e/openapi.rs`), not on these
//! sets. recall@5 is the share of a query's
//! tools in the first five (of at most five: a task that needs nine tools
//! is complete with five of them there), averaged; hit@1 the share of
//! queries whose first result is one of their tools. The test prints both
//! for both rankers, and fails below the figures the gateway's search
//! reached, less a margin, as a guard against regressions. (The goal,
//! recall@5 0.95 and hit@1 0.80, is not reached: see docs/tools.md for
//! what is still missed.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use bm25::{Embedder, EmbedderBuilder, Language, Scorer};
use serde_json::Value;
use toolgate_engine::tools::discovery::{Indexed, Ranker};
use toolgate_tests::{json_lines, public_data, search_model};

use super::parser_bfcl::{IRRELEVANCE, SETS};

struct Tool {
    name: String,
    description: String,
    parameters: Value,
}

struct Query {
    text: String,
    wanted: BTreeSet<String>,
}

struct Set {
    name: &'static str,
    tools: Vec<Tool>,
    queries: Vec<Query>,
}

/// BFCL writes dotted names; the gateway's tool names have none.
fn tool_name(name: &str) -> String {
    name.replace('.', "_")
}

fn bfcl() -> Option<Set> {
    let dir = public_data("bfcl")?;
    let mut pool: BTreeMap<String, Tool> = BTreeMap::new();
    let mut queries = Vec::new();
    for set in SETS.iter().chain(IRRELEVANCE) {
        let questions = json_lines(&dir.join(format!("BFCL_v4_{set}.json")));
        let answers: BTreeMap<String, Value> = if SETS.contains(set) {
            json_lines(&dir.join(format!("possible_answer/BFCL_v4_{set}.json")))
                .into_iter()
                .map(|a| {
                    (
                        a["id"].as_str().unwrap().to_owned(),
                        a["ground_truth"].clone(),
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        for q in questions {
            for f in q["function"].as_array().unwrap() {
                let name = tool_name(f["name"].as_str().unwrap());
                pool.entry(name.clone()).or_insert_with(|| Tool {
                    name,
                    description: f["description"].as_str().unwrap_or("").to_owned(),
                    parameters: f["parameters"].clone(),
                });
            }
            let Some(truth) = answers.get(q["id"].as_str().unwrap()) else {
                continue;
            };
            let wanted: BTreeSet<String> = truth
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| c.as_object().unwrap().keys())
                .map(|n| tool_name(n))
                .collect();
            let text = q["question"][0]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            if !text.trim().is_empty() {
                queries.push(Query { text, wanted });
            }
        }
    }
    Some(Set {
        name: "BFCL v4",
        tools: pool.into_values().collect(),
        queries,
    })
}

fn agentdojo() -> Option<Set> {
    let path = public_data("agentdojo/retrieval.json")?;
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tools = data["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Tool {
            name: t["name"].as_str().unwrap().to_owned(),
            description: t["description"].as_str().unwrap().to_owned(),
            parameters: t["parameters"].clone(),
        })
        .collect();
    let queries = data["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Query {
            text: t["prompt"].as_str().unwrap().to_owned(),
            wanted: t["functions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_owned())
                .collect(),
        })
        .collect();
    Some(Set {
        name: "AgentDojo",
        tools,
        queries,
    })
}

/// The baseline: plain BM25 over a tool's name (split into words),
/// description and parameter names, nothing else.
struct Bm25 {
    embedder: Embedder,
    scorer: Scorer<u32>,
}

impl Bm25 {
    fn new(tools: &[Tool]) -> Bm25 {
        let docs: Vec<String> = tools
            .iter()
            .map(|t| {
                let params = t.parameters["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect::<Vec<_>>().join(" "))
                    .unwrap_or_default();
                format!(
                    "{} {} {params}",
                    t.name.replace(['_', '-'], " "),
                    t.description
                )
            })
            .collect();
        let corpus: Vec<&str> = docs.iter().map(String::as_str).collect();
        let embedder = EmbedderBuilder::with_fit_to_corpus(Language::English, &corpus).build();
        let mut scorer = Scorer::new();
        for (i, d) in docs.iter().enumerate() {
            scorer.upsert(&u32::try_from(i).unwrap(), embedder.embed(d));
        }
        Bm25 { embedder, scorer }
    }

    fn rank(&self, query: &str, limit: usize) -> Vec<usize> {
        let mut m = self.scorer.matches(&self.embedder.embed(query));
        m.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        m.into_iter().take(limit).map(|m| m.id as usize).collect()
    }
}

/// recall@5 and hit@1 over all of a set's queries, and by how many
/// tools a query needs (1, 2, 3, 4 or more): count, recall@5/hit@1.
struct Score {
    recall: f64,
    hit: f64,
    by_need: [(usize, f64, f64); 4],
}

fn score(set: &Set, ranked: impl Fn(&str) -> Vec<usize>) -> Score {
    let (mut recall, mut hit) = (0.0, 0.0);
    let mut by_need = [(0usize, 0.0, 0.0); 4];
    for q in &set.queries {
        let top: Vec<&str> = ranked(&q.text)
            .into_iter()
            .map(|i| set.tools[i].name.as_str())
            .collect();
        let found = q
            .wanted
            .iter()
            .filter(|w| top.contains(&w.as_str()))
            .count();
        let r = found as f64 / q.wanted.len().min(5) as f64;
        let h = f64::from(u8::from(top.first().is_some_and(|t| q.wanted.contains(*t))));
        recall += r;
        hit += h;
        let bucket = &mut by_need[q.wanted.len().clamp(1, 4) - 1];
        *bucket = (bucket.0 + 1, bucket.1 + r, bucket.2 + h);
    }
    let n = set.queries.len() as f64;
    Score {
        recall: recall / n,
        hit: hit / n,
        by_need: by_need.map(|(n, r, h)| {
            let d = n.max(1) as f64;
            (n, r / d, h / d)
        }),
    }
}

impl Score {
    fn line(&self, what: &str) -> String {
        let needs: Vec<String> = ["1", "2", "3", "4+"]
            .iter()
            .zip(&self.by_need)
            .map(|(k, (n, r, h))| format!("{k} tool(s) ×{n}: {r:.3}/{h:.3}"))
            .collect();
        format!(
            "  {what:<34} recall@5 {:.3} hit@1 {:.3}  |  {}",
            self.recall,
            self.hit,
            needs.join("  ")
        )
    }
}

/// recall@5 and hit@1 the gateway's search with the model reached on each
/// set, less a margin.
const FLOORS: [(&str, f64, f64); 2] = [("BFCL v4", 0.79, 0.54), ("AgentDojo", 0.68, 0.64)];

#[test]
fn tool_search_on_public_retrieval_sets() {
    let (Some(bfcl), Some(agentdojo), Some(model)) = (bfcl(), agentdojo(), search_model()) else {
        return;
    };
    let mut report = Vec::new();
    let mut under = Vec::new();
    for set in [bfcl, agentdojo] {
        assert!(
            set.queries.len() > 50,
            "{}: {} queries",
            set.name,
            set.queries.len()
        );
        let indexed: Vec<Indexed<'_>> = set
            .tools
            .iter()
            .map(|t| Indexed {
                name: &t.name,
                description: &t.description,
                category: None,
                parameters: &t.parameters,
            })
            .collect();
        let words = Ranker::new(&indexed, None);
        let lexical = score(&set, |q| words.search(q, 5));
        let ranker = Ranker::new(&indexed, Some(&model));
        let ours = score(&set, |q| ranker.search(q, 5));
        let baseline = Bm25::new(&set.tools);
        let bm25 = score(&set, |q| baseline.rank(q, 5));
        report.push(format!(
            "{} ({} tools, {} queries)\n{}\n{}\n{}",
            set.name,
            set.tools.len(),
            set.queries.len(),
            ours.line("find_tools with the model"),
            lexical.line("by words alone"),
            bm25.line("plain BM25"),
        ));
        let (_, recall, hit) = FLOORS.iter().find(|(n, _, _)| *n == set.name).unwrap();
        if ours.recall < *recall || ours.hit < *hit {
            under.push(set.name);
        }
    }
    eprintln!("tool search on public data:\n{}", report.join("\n"));
    assert!(
        under.is_empty(),
        "the gateway's search fell under its floors on {under:?}:\n{}",
        report.join("\n")
    );
}
