//! Tool search, for sets too large for a prompt (`discovery: search`).
//!
//! A set's tools are ranked by BM25 (the `bm25` crate: English stemming,
//! stop words) over each tool's name, description and parameter names;
//! names are split into words (`repos_create-fork`, `listForRepo`), with
//! the usual synonyms of API verbs; BM25's best matches are reranked by
//! how much of each name the query covers. With a static embedding model
//! (`search.model`, see [`crate::support::embeddings`]) each tool's score adds the
//! cosine between the request and the tool's name and description, so that
//! a request finds a tool it shares no word with. The index is built at catalog
//! load for sets that search (on a thread of its own, see [`warm`]), and
//! rebuilt on the next search when the set's tools change (an MCP
//! server's list does).
//!
//! `find_tools` is a tool like any other (validated, timed, audited) whose
//! call runs `Catalog::run_find_tools`. The chat loop then offers the tools it found (see
//! `chat/tool_loop.rs`); the MCP face lists `find_tools` and `call_tool`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use bm25::{DefaultTokenizer, Embedder, EmbedderBuilder, Language, Scorer, Tokenizer};
use serde_json::{Value, json};

use crate::support::embeddings::{self, Embeddings};
use crate::tools::tool::{Annotations, Tool, ToolKind, ToolSpec};

/// The search tool's name in every set.
pub const FIND_TOOLS: &str = "find_tools";
/// Found tools kept in a prompt at once when the set does not say.
pub const DEFAULT_MAX_IN_PROMPT: usize = 16;
/// The most `max_tools_in_prompt` may be.
pub const MAX_IN_PROMPT: usize = 128;
/// Tools one search returns when the model does not say.
pub const DEFAULT_RESULTS: usize = 5;
/// The most tools one search returns.
pub const MAX_RESULTS: usize = 20;
/// The longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 500;
/// The most queries one `find_tools` call may make (one per thing a
/// request asks for).
pub const MAX_QUERIES: usize = 8;
/// The longest description a search result carries, in characters.
pub const RESULT_DESCRIPTION_CHARS: usize = 300;

/// How a model meets a set's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Discovery {
    /// Every tool in every request.
    All,
    /// `find_tools`, and up to `max_tools_in_prompt` tools it found; the
    /// `preload` best matches for the user's latest message are offered
    /// from the first model call on.
    Search {
        max_tools_in_prompt: usize,
        preload: usize,
    },
}

/// The `find_tools` tool of the set `set` (its description names the set).
pub fn search_tool(set: &str, description: Option<&str>) -> Result<Tool, String> {
    let about = description.map_or_else(String::new, |d| format!(" ({d})"));
    Tool::new(
        ToolSpec {
            name: FIND_TOOLS.to_owned(),
            description: format!(
                "Search the tools of the `{set}` tool set{about} and make the best matches \
                 callable. Say in plain words what you want to do (\"create an issue in a \
                 repository\"); you get the matching tools' names and descriptions, and can \
                 call them by name from then on. For a request that needs several different \
                 things, give one query per thing as a list. Search again with other words \
                 when none fits."
            ),
            category: None,
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {
                        "anyOf": [
                            {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": MAX_QUERY_CHARS
                            },
                            {
                                "type": "array",
                                "items": {
                                    "type": "string",
                                    "minLength": 1,
                                    "maxLength": MAX_QUERY_CHARS
                                },
                                "minItems": 1,
                                "maxItems": MAX_QUERIES
                            }
                        ],
                        "description": "What you want to do, in a few words; several things as a list, one phrase each."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_RESULTS,
                        "description": format!("How many tools to return for each query (default {DEFAULT_RESULTS}; at most {MAX_RESULTS} in all).")
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            }),
            timeout: None,
            cache_ttl: None,
            annotations: Annotations {
                title: Some("Find tools".to_owned()),
                read_only_hint: Some(true),
                idempotent_hint: Some(true),
                open_world_hint: Some(false),
                destructive_hint: None,
            },
            output_schema: None,
            origin: "toolgate (tool search)".to_owned(),
        },
        ToolKind::Search,
    )
}

/// A set's search index, built from its tools as they are when asked.
#[derive(Default)]
pub struct SearchIndex {
    built: Mutex<Option<Arc<Built>>>,
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SearchIndex")
    }
}

struct Built {
    /// The tools indexed, in the set's order: a search ranks these, and a
    /// set whose tools are not these same tools is indexed again.
    tools: Vec<Arc<Tool>>,
    ranker: Ranker,
}

/// The embedding half of a search: a model and each tool's vector.
struct Dense {
    model: Arc<Embeddings>,
    /// One row of `model.dim()` numbers per tool, in the tools' order (a
    /// zero row for a tool with no token the model knows).
    vectors: Vec<f32>,
}

/// BM25 over tool documents, with the name-coverage rerank: a set's
/// search, built once for tools that are not the gateway's and asked many
/// times.
pub struct Ranker {
    dense: Option<Dense>,
    embedder: Embedder,
    scorer: Scorer<u32>,
    /// Per tool, per word of its name: the terms that stand for it (its
    /// stem and its aliases' stems), and how much the word says (its
    /// inverse frequency among the tools' names).
    name_terms: Vec<Vec<(Vec<String>, f32)>>,
    tokenizer: DefaultTokenizer,
}

/// What a search indexes of one tool.
pub struct Indexed<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub category: Option<&'a str>,
    pub parameters: &'a Value,
}

impl<'a> Indexed<'a> {
    fn of(tool: &'a Tool) -> Indexed<'a> {
        Indexed {
            name: &tool.name,
            description: &tool.description,
            category: tool.category.as_deref(),
            parameters: &tool.parameters,
        }
    }
}

/// The positions in `tools` of the `limit` best matches for `query`, best
/// first: the same ranking as a set's search, for tools that are not the
/// gateway's (a client's deferred tools).
pub fn rank(
    tools: &[Indexed<'_>],
    query: &str,
    limit: usize,
    model: Option<&Arc<Embeddings>>,
) -> Vec<usize> {
    Ranker::new(tools, model).search(query, limit)
}

impl SearchIndex {
    /// The index of `tools`, built now unless it is already theirs.
    /// The `limit` tools of `tools` (the set's tools now) that best match
    /// `query`, best first.
    /// `model` is the catalog's embedding model, if it has one.
    pub fn search(
        &self,
        tools: Vec<Arc<Tool>>,
        query: &str,
        limit: usize,
        model: Option<&Arc<Embeddings>>,
    ) -> Vec<Arc<Tool>> {
        self.of(tools, model).search(query, limit)
    }

    fn of(&self, tools: Vec<Arc<Tool>>, model: Option<&Arc<Embeddings>>) -> Arc<Built> {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = built.as_ref()
            && b.tools.len() == tools.len()
            && b.tools.iter().zip(&tools).all(|(a, b)| Arc::ptr_eq(a, b))
            && match (&b.ranker.dense, model) {
                (None, None) => true,
                (Some(d), Some(m)) => Arc::ptr_eq(&d.model, m),
                _ => false,
            }
        {
            return Arc::clone(b);
        }
        let fresh = Arc::new(Built::new(tools, model));
        *built = Some(Arc::clone(&fresh));
        fresh
    }
}

/// Builds `index` for `tools` on a thread of its own, ahead of the first
/// search (which waits for it if it comes first). Where no thread can be
/// started, the first search builds it.
pub fn warm(index: &Arc<SearchIndex>, tools: Vec<Arc<Tool>>, model: Option<Arc<Embeddings>>) {
    let index = Arc::clone(index);
    let spawned = std::thread::Builder::new()
        .name("toolgate-search-index".into())
        .spawn(move || {
            index.of(tools, model.as_ref());
        });
    if let Err(e) = spawned {
        tracing::debug!("the search index will be built on the first search: {e}");
    }
}

impl Built {
    fn new(tools: Vec<Arc<Tool>>, model: Option<&Arc<Embeddings>>) -> Built {
        let indexed: Vec<Indexed<'_>> = tools.iter().map(|t| Indexed::of(t)).collect();
        let ranker = Ranker::new(&indexed, model);
        Built { tools, ranker }
    }

    fn search(&self, query: &str, limit: usize) -> Vec<Arc<Tool>> {
        self.ranker
            .search(query, limit)
            .into_iter()
            .filter_map(|i| self.tools.get(i).cloned())
            .collect()
    }
}

impl Ranker {
    /// The index of `tools`, with their vectors when there is a `model`.
    pub fn new(tools: &[Indexed<'_>], model: Option<&Arc<Embeddings>>) -> Ranker {
        let dense = model.map(|model| {
            let dim = model.dim();
            let mut vectors = vec![0.0; tools.len() * dim];
            for (row, tool) in vectors.chunks_exact_mut(dim).zip(tools) {
                if let Some(v) = model.embed(&meaning(tool)) {
                    row.copy_from_slice(&v);
                }
            }
            Dense {
                model: Arc::clone(model),
                vectors,
            }
        });
        let docs: Vec<String> = tools.iter().map(document).collect();
        let corpus: Vec<&str> = docs.iter().map(String::as_str).collect();
        let embedder: Embedder =
            EmbedderBuilder::with_fit_to_corpus(Language::English, &corpus).build();
        let mut scorer = Scorer::<u32>::new();
        for (i, doc) in docs.iter().enumerate() {
            // A set has far fewer than 2^32 tools.
            if let Ok(id) = u32::try_from(i) {
                scorer.upsert(&id, embedder.embed(doc));
            }
        }
        let tokenizer = DefaultTokenizer::new(Language::English);
        let named: Vec<Vec<Vec<String>>> = tools
            .iter()
            .map(|t| {
                words(t.name)
                    .split_whitespace()
                    .map(|w| {
                        let lower = w.to_lowercase();
                        std::iter::once(lower.as_str())
                            .chain(aliases(&lower).iter().copied())
                            .flat_map(|a| tokenizer.tokenize(a))
                            .collect::<Vec<String>>()
                    })
                    .filter(|terms| !terms.is_empty())
                    .collect()
            })
            .collect();
        // How many names hold each word: `get` or `update`, in most names,
        // says less of what a tool does than `transactions`.
        let mut in_names: HashMap<&str, usize> = HashMap::new();
        for name in &named {
            let distinct: HashSet<&str> = name
                .iter()
                .filter_map(|terms| terms.first().map(String::as_str))
                .collect();
            for w in distinct {
                *in_names.entry(w).or_default() += 1;
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let n = named.len().max(1) as f32;
        let name_terms = named
            .iter()
            .map(|name| {
                name.iter()
                    .map(|terms| {
                        let df = terms
                            .first()
                            .and_then(|w| in_names.get(w.as_str()))
                            .copied()
                            .unwrap_or(1);
                        #[allow(clippy::cast_precision_loss)]
                        let idf = (1.0 + n / df as f32).ln();
                        (terms.clone(), idf)
                    })
                    .collect()
            })
            .collect();
        Ranker {
            dense,
            embedder,
            scorer,
            name_terms,
            tokenizer,
        }
    }

    /// The best `limit` tools for `query`, best first (ties in set
    /// order): BM25, then the best 50 (`RERANKED`) reranked by how much of
    /// each tool's name the query covers (each word weighted by how rare it
    /// is among the names), so that `pulls_list` beats
    /// `interactions_get-pull-request-creation-cap-for-repo` for "list pull
    /// requests" (a long name that mentions the words is not what was
    /// asked for). With a model, each tool's score is then
    /// `DENSE_WEIGHT × its cosine with the query + (1 − DENSE_WEIGHT) ×
    /// its lexical score / the best lexical score`, and a tool no word
    /// matched is found when its cosine is at least `MIN_COSINE`.
    pub fn search(&self, query: &str, limit: usize) -> Vec<usize> {
        let lexical = self.lexical(query);
        let Some((dense, asked)) = self
            .dense
            .as_ref()
            .and_then(|d| Some((d, d.model.embed(query)?)))
        else {
            return lexical.into_iter().map(|(i, _)| i).take(limit).collect();
        };
        let best = lexical.first().map_or(0.0, |(_, s)| *s);
        let mut scores: Vec<(usize, f32, bool)> = dense
            .vectors
            .chunks_exact(dense.model.dim())
            .enumerate()
            .map(|(i, row)| (i, DENSE_WEIGHT * embeddings::dot(row, &asked), false))
            .collect();
        if best > 0.0 {
            for (i, s) in lexical {
                if let Some(t) = scores.get_mut(i) {
                    t.1 += (1.0 - DENSE_WEIGHT) * s / best;
                    t.2 = true;
                }
            }
        }
        scores.retain(|(_, s, matched)| *matched || *s >= DENSE_WEIGHT * MIN_COSINE);
        scores.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scores.into_iter().map(|(i, _, _)| i).take(limit).collect()
    }

    /// Every tool a word of `query` matched, with its score, best first:
    /// BM25 with the name-coverage rerank of its best `RERANKED`.
    fn lexical(&self, query: &str) -> Vec<(usize, f32)> {
        let query = split_separators(query);
        let mut matches = self.scorer.matches(&self.embedder.embed(&query));
        matches.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        let asked: std::collections::HashSet<String> =
            self.tokenizer.tokenize(&query).into_iter().collect();
        let top = matches.len().min(RERANKED);
        for m in &mut matches[..top] {
            let Some(name) = self.name_terms.get(m.id as usize) else {
                continue;
            };
            let covered: f32 = name
                .iter()
                .filter(|(terms, _)| terms.iter().any(|t| asked.contains(t)))
                .map(|(_, idf)| idf)
                .sum();
            let whole: f32 = name.iter().map(|(_, idf)| idf).sum();
            let coverage = if whole > 0.0 { covered / whole } else { 0.0 };
            m.score *= 1.0 + NAME_COVERAGE_WEIGHT * coverage;
        }
        matches[..top].sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        matches
            .into_iter()
            .map(|m| (m.id as usize, m.score))
            .collect()
    }
}

/// What is indexed of a tool, weighted by repetition: its name (three
/// times, with the usual synonyms of its verbs and nouns, see [`aliases`]),
/// its description's first sentence (twice) and the next words of it (the
/// rest of a long description is mostly caveats that would drown the
/// rest), and its parameter names (those of an object parameter's
/// properties too, e.g. a request body's fields).
fn document(tool: &Indexed<'_>) -> String {
    let mut name = words(tool.name);
    let extra: Vec<&str> = name
        .split_whitespace()
        .flat_map(|w| aliases(&w.to_lowercase()).iter().copied())
        .collect();
    for e in extra {
        name.push(' ');
        name.push_str(e);
    }
    let (summary, rest) = first_sentence(tool.description);
    let rest: Vec<&str> = rest.split_whitespace().take(DESCRIPTION_WORDS).collect();
    let mut doc = format!(
        "{name} {name} {name} {summary} {summary} {}",
        rest.join(" ")
    );
    if let Some(category) = tool.category {
        doc.push(' ');
        doc.push_str(&words(category));
    }
    let mut add_names = |props: &serde_json::Map<String, Value>| {
        for key in props.keys() {
            doc.push(' ');
            doc.push_str(&words(key));
        }
    };
    if let Some(props) = tool.parameters.get("properties").and_then(Value::as_object) {
        add_names(props);
        for nested in props.values() {
            if let Some(inner) = nested.get("properties").and_then(Value::as_object) {
                add_names(inner);
            }
        }
    }
    doc
}

/// What a tool's vector is made of: its name as words and its description
/// (the model reads at most its first tokens).
fn meaning(tool: &Indexed<'_>) -> String {
    format!("{}: {}", words(tool.name), tool.description)
}

/// The share of a tool's score that is its cosine with the request, when
/// there is a model (chosen on the GitHub tuning tasks of
/// `tests/openapi/github-tasks-tuning.yaml`).
const DENSE_WEIGHT: f32 = 0.5;
/// The least cosine that finds a tool no word of the request matched.
const MIN_COSINE: f32 = 0.3;

/// How many of BM25's best matches are reranked by name coverage.
const RERANKED: usize = 50;
/// A match's score is multiplied by `1 + this × the share of its name's
/// words the query has`.
const NAME_COVERAGE_WEIGHT: f32 = 2.0;

/// Words of a description after its first sentence that are indexed.
const DESCRIPTION_WORDS: usize = 40;

/// The first sentence of `text` (up to a `. `) and the rest.
fn first_sentence(text: &str) -> (&str, &str) {
    match text.find(". ") {
        Some(at) => (&text[..at], &text[at + 2..]),
        None => (text, ""),
    }
}

/// Other words for a word of a tool's name: the verbs APIs name
/// operations with, as people ask for them, and common abbreviations.
fn aliases(word: &str) -> &'static [&'static str] {
    match word {
        "create" | "add" | "post" | "new" | "insert" => &["create", "add", "new"],
        "list" | "all" => &["list", "all"],
        "get" | "read" | "fetch" | "retrieve" | "show" => &["get", "read", "show"],
        "update" | "edit" | "patch" | "modify" | "set" => &["update", "edit", "change", "set"],
        "delete" | "remove" | "destroy" => &["delete", "remove"],
        "search" | "find" | "query" => &["search", "find"],
        "repo" | "repos" => &["repository"],
        "org" | "orgs" => &["organization"],
        "config" => &["configuration"],
        "env" => &["environment"],
        "auth" => &["authentication"],
        _ => &[],
    }
}

/// An identifier as words: separators to spaces, camelCase split.
fn words(ident: &str) -> String {
    let mut out = String::with_capacity(ident.len() + 8);
    let mut prev_lower = false;
    for c in ident.chars() {
        if matches!(c, '_' | '-' | '/' | '.' | ':') {
            out.push(' ');
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        out.push(c);
    }
    out
}

/// A query with identifier separators as spaces (`issues_create` is two
/// words); its capitals are left alone (`GitHub` stays one word).
fn split_separators(query: &str) -> String {
    query.replace(['_', '-', '/', '.', ':'], " ")
}

/// The names `find_tools` returned in `data` (its result), in order.
pub fn found_names(data: &Value) -> impl Iterator<Item = &str> {
    data["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str, params: Value) -> Arc<Tool> {
        Arc::new(
            Tool::new(
                ToolSpec {
                    name: name.into(),
                    description: description.into(),
                    category: None,
                    parameters: params,
                    timeout: None,
                    cache_ttl: None,
                    annotations: Annotations::default(),
                    output_schema: None,
                    origin: String::new(),
                },
                ToolKind::Search,
            )
            .unwrap(),
        )
    }

    #[test]
    fn identifiers_become_words() {
        assert_eq!(words("repos_create-fork"), "repos create fork");
        assert_eq!(words("listForRepo"), "list For Repo");
        assert_eq!(words("getV2Item"), "get V2 Item");
        assert_eq!(
            split_separators("issues_create GitHub"),
            "issues create GitHub"
        );
    }

    #[test]
    fn ranks_by_name_description_and_parameters_and_rebuilds_on_change() {
        let obj = |props: Value| json!({"type": "object", "properties": props});
        let tools = vec![
            tool(
                "issues_create",
                "Create an issue",
                obj(json!({"owner": {}, "repo": {}, "title": {}})),
            ),
            tool(
                "issues_list",
                "List issues in a repository",
                obj(json!({"owner": {}, "repo": {}})),
            ),
            tool(
                "gists_create",
                "Create a gist",
                obj(json!({"body": {"type": "object", "properties": {"files": {}}}})),
            ),
            tool(
                "weather",
                "Current weather for a city",
                obj(json!({"city": {}})),
            ),
        ];
        let index = SearchIndex::default();
        let names = |found: Vec<Arc<Tool>>| -> Vec<String> {
            found.iter().map(|t| t.name.clone()).collect()
        };
        let built = index.of(tools.clone(), None);
        assert_eq!(
            names(built.search("open a new issue", 1)),
            ["issues_create"]
        );
        assert_eq!(
            names(built.search("what issues does the repository have", 1)),
            ["issues_list"]
        );
        // A nested parameter name counts.
        assert_eq!(names(built.search("files", 5)), ["gists_create"]);
        assert_eq!(
            names(built.search("temperature in Paris city", 5)),
            ["weather"]
        );
        assert!(built.search("zebra", 5).is_empty());
        // Same tools: the same index; other tools: a new one.
        assert!(Arc::ptr_eq(&built, &index.of(tools.clone(), None)));
        let fewer = index.of(tools[..2].to_vec(), None);
        assert!(!Arc::ptr_eq(&built, &fewer));
        assert!(fewer.search("weather city", 5).is_empty());
    }

    #[test]
    fn tools_that_are_not_the_gateway_s_rank_the_same_way() {
        let params = json!({"type": "object", "properties": {"city": {}}});
        let none = Value::Null;
        let tools = [
            Indexed {
                name: "get_time",
                description: "The time in a zone.",
                category: None,
                parameters: &none,
            },
            Indexed {
                name: "get_weather",
                description: "The forecast.",
                category: None,
                parameters: &params,
            },
        ];
        assert_eq!(rank(&tools, "weather in a city", 5, None), vec![1]);
        assert_eq!(rank(&tools, "what time is it", 1, None), vec![0]);
        assert!(rank(&tools, "quantum", 5, None).is_empty());
    }

    #[test]
    fn equal_scores_keep_the_set_order() {
        let obj = json!({"type": "object"});
        let tools: Vec<Arc<Tool>> = (0..6)
            .map(|i| tool(&format!("same_{i}"), "identical text", obj.clone()))
            .collect();
        let found = SearchIndex::default()
            .of(tools, None)
            .search("identical", 3);
        let names: Vec<&str> = found.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["same_0", "same_1", "same_2"]);
    }
}
