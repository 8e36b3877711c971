//! Tool sets: resolving names, globs and included sets into an ordered list
//! of tools, with unknown names, empty globs and include cycles reported.

use std::collections::{HashMap, HashSet};

use globset::Glob;
use indexmap::{IndexMap, IndexSet};

use crate::config::load::Loaded;
use crate::config::{Diagnostic, ToolSetFile};
use crate::tool::is_valid_name;

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
}

/// Resolves every set. `declared` lists every declared tool (usable or not,
/// in order); `usable` says which can be used. When `complete` is false (a
/// tools file failed to parse), names that match nothing are not reported:
/// they may be in the broken file, whose error is reported already.
pub fn resolve(
    files: &[Loaded<ToolSetFile>],
    declared: &[String],
    complete: bool,
    usable: &dyn Fn(&str) -> bool,
    diags: &mut Vec<Diagnostic>,
) -> IndexMap<String, ToolSet> {
    // First pass: each set's own entries, and its place.
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    let mut own: Vec<Option<IndexSet<String>>> = Vec::with_capacity(files.len());
    for (i, file) in files.iter().enumerate() {
        let set = &file.value;
        if !is_valid_name(&set.name) {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos("name"),
                format!("tool set name {:?} is invalid", set.name),
                "use 1-64 letters, digits, `_` or `-`",
            ));
            own.push(None);
            continue;
        }
        if let Some(&first) = by_name.get(set.name.as_str()) {
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
            own.push(None);
            continue;
        }
        by_name.insert(&set.name, i);
        own.push(Some(expand_entries(file, declared, complete, diags)));
    }

    // Includes must name sets.
    for (i, file) in files.iter().enumerate() {
        if own[i].is_none() {
            continue;
        }
        for (j, inc) in file.value.include.iter().enumerate() {
            if !by_name.contains_key(inc.as_str()) {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos(&format!("include[{j}]")),
                    format!("included tool set `{inc}` does not exist"),
                    format!("name one of: {}", sorted_names(&by_name)),
                ));
            }
        }
    }

    // Second pass: follow includes depth first, reporting cycles once.
    let mut out = IndexMap::new();
    let mut reported_cycles: HashSet<Vec<usize>> = HashSet::new();
    for (i, file) in files.iter().enumerate() {
        if own[i].is_none() {
            continue;
        }
        let mut tools = IndexSet::new();
        let mut stack = vec![i];
        collect(
            i,
            files,
            &own,
            &by_name,
            &mut stack,
            &mut tools,
            &mut |cycle| {
                let mut key = cycle.to_vec();
                key.sort_unstable();
                if reported_cycles.insert(key) {
                    let names: Vec<&str> = cycle
                        .iter()
                        .map(|&k| files[k].value.name.as_str())
                        .collect();
                    let start = &files[cycle[0]];
                    diags.push(Diagnostic::error(
                        &start.file,
                        start.pos("include"),
                        format!(
                            "tool sets include each other in a cycle: {} -> {}",
                            names.join(" -> "),
                            names[0]
                        ),
                        "remove one of the includes",
                    ));
                }
            },
        );
        let (usable_tools, unusable): (Vec<String>, Vec<String>) =
            tools.into_iter().partition(|t| usable(t));
        out.insert(
            file.value.name.clone(),
            ToolSet {
                name: file.value.name.clone(),
                description: file.value.description.clone(),
                tools: usable_tools,
                unavailable: unusable,
                origin: file.file.clone(),
            },
        );
    }
    out
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

/// A set's own `tools` entries, with globs expanded against `declared`.
fn expand_entries(
    file: &Loaded<ToolSetFile>,
    declared: &[String],
    complete: bool,
    diags: &mut Vec<Diagnostic>,
) -> IndexSet<String> {
    let mut out = IndexSet::new();
    for (j, entry) in file.value.tools.iter().enumerate() {
        let path = format!("tools[{j}]");
        if entry.contains(['*', '?', '[']) {
            match Glob::new(entry) {
                Ok(glob) => {
                    let m = glob.compile_matcher();
                    let mut matched = false;
                    for t in declared.iter().filter(|t| m.is_match(t.as_str())) {
                        matched = true;
                        out.insert(t.clone());
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
        } else if complete {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(&path),
                format!("tool `{entry}` does not exist"),
                suggest(entry, declared),
            ));
        }
    }
    out
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
