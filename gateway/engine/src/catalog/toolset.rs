//! Tool sets: resolving names, globs and included sets into an ordered list
//! of tools, with unknown names, empty globs and include cycles reported.

use std::collections::{HashMap, HashSet};

use globset::{Glob, GlobMatcher};
use indexmap::{IndexMap, IndexSet};

use std::sync::Arc;

use crate::tools::discovery::{self, Discovery, SearchIndex};
use crate::tools::tool::{Tool, is_valid_name};
use toolgate_config::format::SetMode;
use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, Pos, ToolSetFile};

/// A resolved tool set.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolSet {
    pub name: String,
    pub description: Option<String>,
    /// Usable tools, in order: the set's own entries first, then those of
    /// included sets; each once.
    pub tools: Vec<String>,
    /// Tools the set names that are declared but unusable right now.
    pub unavailable: Vec<String>,
    pub origin: String,
    /// Entries (own and included) that name tools of MCP servers, which are
    /// only known once the servers run; matched against the live tools.
    #[serde(skip)]
    pub mcp: Vec<McpPattern>,
    /// How a model meets the tools: all at once, or by search.
    pub discovery: Discovery,
    /// The set's `find_tools` (offered with `discovery: search`, and to MCP
    /// clients that ask for the search surface).
    #[serde(skip)]
    pub search_tool: Arc<Tool>,
    /// How a model uses the tools: one call each, or a program (`code`).
    pub mode: SetMode,
    /// The set's `run_code` (offered in code mode).
    #[serde(skip)]
    pub code_tool: Arc<Tool>,
    /// The search index of the set's tools.
    #[serde(skip)]
    pub index: Arc<SearchIndex>,
    /// The prompts of MCP servers it offers (MCP clients only), its own
    /// entries and those of included sets.
    #[serde(skip)]
    pub prompts: Offers,
    /// The resources and resource templates of MCP servers it offers.
    #[serde(skip)]
    pub resources: Offers,
}

/// The prompts (by name) or resources (by URI, or a template's URI
/// template) a set offers: names and globs. Offers nothing by default.
#[derive(Debug, Clone, Default)]
pub struct Offers {
    entries: Vec<(String, Option<GlobMatcher>)>,
}

impl Offers {
    /// `true` when an entry names or matches `name`.
    pub fn admits(&self, name: &str) -> bool {
        self.entries.iter().any(|(entry, glob)| match glob {
            Some(m) => m.is_match(name),
            None => entry == name,
        })
    }

    /// `true` when the set offers none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `file`'s entries under `field`; with `report`, an invalid
    /// pattern is a diagnostic (an included set's are reported with it).
    fn add(
        &mut self,
        file: &Loaded<ToolSetFile>,
        field: &str,
        entries: &[String],
        report: bool,
        diags: &mut Vec<Diagnostic>,
    ) {
        for (j, entry) in entries.iter().enumerate() {
            if self.entries.iter().any(|(e, _)| e == entry) {
                continue;
            }
            let glob = if entry.contains(['*', '?', '[']) {
                match Glob::new(entry) {
                    Ok(g) => Some(g.compile_matcher()),
                    Err(e) => {
                        if report {
                            diags.push(Diagnostic::error(
                                &file.file,
                                file.pos(&format!("{field}[{j}]")),
                                format!("the pattern `{entry}` is invalid: {}", e.kind()),
                                "use `*` for any characters and `?` for one",
                            ));
                        }
                        continue;
                    }
                }
            } else {
                None
            };
            self.entries.push((entry.clone(), glob));
        }
    }
}

/// The prompts and resources set `i` offers: its own entries, then those
/// of the sets it includes (each once, cycles cut).
fn offers(
    i: usize,
    files: &[Loaded<ToolSetFile>],
    by_name: &HashMap<&str, usize>,
    diags: &mut Vec<Diagnostic>,
) -> (Offers, Offers) {
    let (mut prompts, mut resources) = (Offers::default(), Offers::default());
    let mut seen = HashSet::new();
    let mut todo = vec![i];
    while let Some(k) = todo.pop() {
        if !seen.insert(k) {
            continue;
        }
        let f = &files[k];
        prompts.add(f, "prompts", &f.value.prompts, k == i, diags);
        resources.add(f, "resources", &f.value.resources, k == i, diags);
        todo.extend(
            f.value
                .include
                .iter()
                .rev()
                .filter_map(|inc| by_name.get(inc.as_str()).copied()),
        );
    }
    (prompts, resources)
}

/// A tool-set entry (a name or a glob) that MCP servers may satisfy.
#[derive(Debug, Clone)]
pub struct McpPattern {
    pub entry: String,
    matcher: Option<GlobMatcher>,
    /// The servers that could offer a tool it matches.
    pub servers: Vec<String>,
    pub file: String,
    pub pos: Pos,
}

impl McpPattern {
    /// `true` when the tool `name` is one the entry asks for.
    pub fn matches(&self, name: &str) -> bool {
        match &self.matcher {
            Some(m) => m.is_match(name),
            None => self.entry == name,
        }
    }

    /// `true` for a plain name (not a glob).
    pub fn is_exact(&self) -> bool {
        self.matcher.is_none()
    }
}

/// Resolves every set. `declared` lists every declared tool (usable or not,
/// in order); `usable` says which can be used; `mcp` names the MCP servers
/// that could offer a tool an entry names or matches. When `complete` is
/// false (a tools file failed to parse), names that match nothing are not
/// reported: they may be in the broken file, whose error is reported
/// already.
pub fn resolve(
    files: &[Loaded<ToolSetFile>],
    declared: &[String],
    complete: bool,
    usable: &dyn Fn(&str) -> bool,
    mcp: &dyn Fn(&str) -> Vec<String>,
    diags: &mut Vec<Diagnostic>,
) -> IndexMap<String, ToolSet> {
    let own = Own::of(files, declared, complete, mcp, diags);
    own.check_includes(files, diags);
    // Follow includes depth first, reporting cycles once.
    let mut out = IndexMap::new();
    let mut reported_cycles: HashSet<Vec<usize>> = HashSet::new();
    for (i, file) in files.iter().enumerate() {
        if own.names[i].is_none() {
            continue;
        }
        let mut tools = IndexSet::new();
        let mut stack = vec![i];
        collect(
            i,
            files,
            &own.names,
            &own.by_name,
            &mut stack,
            &mut tools,
            &mut |cycle| {
                let mut key = cycle.to_vec();
                key.sort_unstable();
                if reported_cycles.insert(key) {
                    diags.push(cycle_error(files, cycle));
                }
            },
        );
        let mut patterns = Vec::new();
        collect_mcp(
            i,
            files,
            &own.mcp,
            &own.by_name,
            &mut HashSet::new(),
            &mut patterns,
        );
        let offered = offers(i, files, &own.by_name, diags);
        if let Some(set) = tool_set(file, tools, patterns, offered, usable, diags) {
            out.insert(file.value.name.clone(), set);
        }
    }
    out
}

/// Each set's own entries (before includes), by its place in `files`;
/// `None` for a set that is invalid or declared twice.
struct Own<'a> {
    by_name: HashMap<&'a str, usize>,
    names: Vec<Option<IndexSet<String>>>,
    mcp: Vec<Vec<McpPattern>>,
}

impl<'a> Own<'a> {
    fn of(
        files: &'a [Loaded<ToolSetFile>],
        declared: &[String],
        complete: bool,
        mcp: &dyn Fn(&str) -> Vec<String>,
        diags: &mut Vec<Diagnostic>,
    ) -> Own<'a> {
        let mut own = Own {
            by_name: HashMap::new(),
            names: Vec::with_capacity(files.len()),
            mcp: vec![Vec::new(); files.len()],
        };
        for (i, file) in files.iter().enumerate() {
            let set = &file.value;
            if !is_valid_name(&set.name) {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos("name"),
                    format!("tool set name {:?} is invalid", set.name),
                    "use 1-64 letters, digits, `_` or `-`",
                ));
                own.names.push(None);
                continue;
            }
            if let Some(&first) = own.by_name.get(set.name.as_str()) {
                let other = &files[first];
                let p = other.pos("name");
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos("name"),
                    format!(
                        "tool set `{}` is also declared at {}:{}:{}",
                        set.name, other.file, p.line, p.column
                    ),
                    "rename one of the two sets",
                ));
                own.names.push(None);
                continue;
            }
            own.by_name.insert(&set.name, i);
            let (names, patterns) = expand_entries(file, declared, complete, mcp, diags);
            own.names.push(Some(names));
            own.mcp[i] = patterns;
        }
        own
    }

    /// Includes must name sets.
    fn check_includes(&self, files: &[Loaded<ToolSetFile>], diags: &mut Vec<Diagnostic>) {
        for (i, file) in files.iter().enumerate() {
            if self.names[i].is_none() {
                continue;
            }
            for (j, inc) in file.value.include.iter().enumerate() {
                if !self.by_name.contains_key(inc.as_str()) {
                    diags.push(Diagnostic::error(
                        &file.file,
                        file.pos(&format!("include[{j}]")),
                        format!("included tool set `{inc}` does not exist"),
                        format!("name one of: {}", sorted_names(&self.by_name)),
                    ));
                }
            }
        }
    }
}

/// The error for sets that include each other in `cycle`.
fn cycle_error(files: &[Loaded<ToolSetFile>], cycle: &[usize]) -> Diagnostic {
    let names: Vec<&str> = cycle
        .iter()
        .map(|&k| files[k].value.name.as_str())
        .collect();
    let start = &files[cycle[0]];
    Diagnostic::error(
        &start.file,
        start.pos("include"),
        format!(
            "tool sets include each other in a cycle: {} -> {}",
            names.join(" -> "),
            names[0]
        ),
        "remove one of the includes",
    )
}

/// The set of `file` with its `tools` (own and included) and MCP
/// `patterns`; `None` when its discovery settings are wrong.
fn tool_set(
    file: &Loaded<ToolSetFile>,
    tools: IndexSet<String>,
    patterns: Vec<McpPattern>,
    (prompts, resources): (Offers, Offers),
    usable: &dyn Fn(&str) -> bool,
    diags: &mut Vec<Diagnostic>,
) -> Option<ToolSet> {
    let (usable_tools, unusable): (Vec<String>, Vec<String>) =
        tools.into_iter().partition(|t| usable(t));
    let mode = file.value.mode;
    if mode == SetMode::Code
        && usable_tools
            .iter()
            .chain(&unusable)
            .any(|t| t == crate::tools::code::RUN_CODE)
    {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("tools"),
            format!(
                "tool set `{}` is in code mode and has a tool named `{}`, the name of its program tool",
                file.value.name,
                crate::tools::code::RUN_CODE
            ),
            "rename that tool, or remove `mode: code`",
        ));
    }
    if usable_tools
        .iter()
        .chain(&unusable)
        .any(|t| t == discovery::FIND_TOOLS)
    {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("tools"),
            format!(
                "tool set `{}` has a tool named `{}`, the name of every set's tool search",
                file.value.name,
                discovery::FIND_TOOLS
            ),
            "rename that tool",
        ));
    }
    let discovery = resolve_discovery(file, diags)?;
    let search_tool =
        match discovery::search_tool(&file.value.name, file.value.description.as_deref()) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos("name"),
                    format!("the set's find_tools cannot be built: {e}"),
                    "report this as a bug",
                ));
                return None;
            }
        };
    let code_tool = match crate::tools::code::run_code_tool(&file.value.name) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos("name"),
                format!("the set's run_code cannot be built: {e}"),
                "report this as a bug",
            ));
            return None;
        }
    };
    Some(ToolSet {
        name: file.value.name.clone(),
        description: file.value.description.clone(),
        tools: usable_tools,
        unavailable: unusable,
        origin: file.file.clone(),
        mcp: patterns,
        discovery,
        search_tool,
        mode,
        code_tool,
        index: Arc::default(),
        prompts,
        resources,
    })
}

/// A set's `discovery`, `max_tools_in_prompt` and `preload`, checked
/// together.
fn resolve_discovery(file: &Loaded<ToolSetFile>, diags: &mut Vec<Diagnostic>) -> Option<Discovery> {
    use toolgate_config::format::Discovery as Declared;
    let max = file.value.max_tools_in_prompt;
    match file.value.discovery {
        Declared::All => {
            if file.value.preload.is_some() {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos("preload"),
                    "`preload` applies only to sets with `discovery: search`",
                    "add `discovery: search` or remove `preload`",
                ));
                return None;
            }
            if max.is_some() {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos("max_tools_in_prompt"),
                    "`max_tools_in_prompt` applies only to sets with `discovery: search`",
                    "add `discovery: search` or remove `max_tools_in_prompt`",
                ));
                return None;
            }
            Some(Discovery::All)
        }
        Declared::Search => {
            let max = max.map_or(Some(discovery::DEFAULT_MAX_IN_PROMPT), |m| {
                usize::try_from(m).ok()
            });
            match max {
                Some(m) if (1..=discovery::MAX_IN_PROMPT).contains(&m) => {
                    let preload = file.value.preload.map_or(0, |p| p as usize);
                    if preload > m {
                        diags.push(Diagnostic::error(
                            &file.file,
                            file.pos("preload"),
                            format!(
                                "`preload` is {preload}, more than `max_tools_in_prompt` ({m})"
                            ),
                            format!("give `preload` a number between 0 and {m}"),
                        ));
                        return None;
                    }
                    Some(Discovery::Search {
                        max_tools_in_prompt: m,
                        preload,
                    })
                }
                _ => {
                    diags.push(Diagnostic::error(
                        &file.file,
                        file.pos("max_tools_in_prompt"),
                        format!(
                            "`max_tools_in_prompt` is {}, outside 1-{}",
                            file.value.max_tools_in_prompt.unwrap_or_default(),
                            discovery::MAX_IN_PROMPT
                        ),
                        format!(
                            "give a number of tools between 1 and {}",
                            discovery::MAX_IN_PROMPT
                        ),
                    ));
                    None
                }
            }
        }
    }
}

fn sorted_names(by_name: &HashMap<&str, usize>) -> String {
    let mut names: Vec<&str> = by_name.keys().copied().collect();
    names.sort_unstable();
    if names.is_empty() {
        "(no tool sets are declared)".to_owned()
    } else {
        names.join(", ")
    }
}

/// The MCP entries of set `i` and of the sets it includes, each once.
fn collect_mcp(
    i: usize,
    files: &[Loaded<ToolSetFile>],
    own_mcp: &[Vec<McpPattern>],
    by_name: &HashMap<&str, usize>,
    seen: &mut HashSet<usize>,
    out: &mut Vec<McpPattern>,
) {
    if !seen.insert(i) {
        return;
    }
    for p in &own_mcp[i] {
        if !out.iter().any(|o| o.entry == p.entry) {
            out.push(p.clone());
        }
    }
    for inc in &files[i].value.include {
        if let Some(&k) = by_name.get(inc.as_str()) {
            collect_mcp(k, files, own_mcp, by_name, seen, out);
        }
    }
}

/// A set's own `tools` entries, with globs expanded against `declared`, and
/// the entries MCP servers may satisfy.
fn expand_entries(
    file: &Loaded<ToolSetFile>,
    declared: &[String],
    complete: bool,
    mcp: &dyn Fn(&str) -> Vec<String>,
    diags: &mut Vec<Diagnostic>,
) -> (IndexSet<String>, Vec<McpPattern>) {
    let mut out = IndexSet::new();
    let mut patterns = Vec::new();
    for (j, entry) in file.value.tools.iter().enumerate() {
        let path = format!("tools[{j}]");
        let servers = mcp(entry);
        let pattern = |matcher: Option<GlobMatcher>| McpPattern {
            entry: entry.clone(),
            matcher,
            servers: servers.clone(),
            file: file.file.clone(),
            pos: file.pos(&path),
        };
        if entry.contains(['*', '?', '[']) {
            match Glob::new(entry) {
                Ok(glob) => {
                    let m = glob.compile_matcher();
                    let mut matched = false;
                    for t in declared.iter().filter(|t| m.is_match(t.as_str())) {
                        matched = true;
                        out.insert(t.clone());
                    }
                    if !servers.is_empty() {
                        matched = true;
                        patterns.push(pattern(Some(m)));
                    }
                    if !matched && complete {
                        diags.push(Diagnostic::error(
                            &file.file,
                            file.pos(&path),
                            format!("the pattern `{entry}` matches no tool"),
                            "fix the pattern or declare a tool it matches (`toolgate tools` lists them)",
                        ));
                    }
                }
                Err(e) => diags.push(Diagnostic::error(
                    &file.file,
                    file.pos(&path),
                    format!("the pattern `{entry}` is invalid: {}", e.kind()),
                    "use `*` for any characters and `?` for one",
                )),
            }
        } else if declared.iter().any(|t| t == entry) {
            out.insert(entry.clone());
        } else if !servers.is_empty() {
            patterns.push(pattern(None));
        } else if complete {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(&path),
                format!("tool `{entry}` does not exist"),
                suggest(entry, declared),
            ));
        }
    }
    (out, patterns)
}

/// A hint naming the closest declared tool, if one is close.
fn suggest(name: &str, declared: &[String]) -> String {
    let close = declared
        .iter()
        .map(|t| (strsim::levenshtein(name, t), t))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d);
    match close {
        Some((_, t)) => format!("did you mean `{t}`? (`toolgate tools` lists every tool)"),
        None => {
            "declare it in tools.d/ or remove it (`toolgate tools` lists every tool)".to_owned()
        }
    }
}

fn collect(
    i: usize,
    files: &[Loaded<ToolSetFile>],
    own: &[Option<IndexSet<String>>],
    by_name: &HashMap<&str, usize>,
    stack: &mut Vec<usize>,
    tools: &mut IndexSet<String>,
    on_cycle: &mut dyn FnMut(&[usize]),
) {
    if let Some(entries) = &own[i] {
        tools.extend(entries.iter().cloned());
    }
    for inc in &files[i].value.include {
        let Some(&k) = by_name.get(inc.as_str()) else {
            continue;
        };
        if let Some(at) = stack.iter().position(|&s| s == k) {
            on_cycle(&stack[at..]);
            continue;
        }
        stack.push(k);
        collect(k, files, own, by_name, stack, tools, on_cycle);
        stack.pop();
    }
}
