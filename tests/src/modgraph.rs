//! The module graph of one crate, read from its source: which file's
//! module refers to which (through `use` and through paths written in the
//! code: `crate::`, `super::`, `self::`), with re-exports followed to the
//! module that defines the item. The layering test checks it has no
//! circles and no arrow against each crate's declared module order.
//!
//! Text-level on purpose (no parser dependency): comments, strings and
//! character literals are blanked first, and `#[cfg(test)]` modules
//! written inside a file are left out (their `super` is the file itself).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside the crate (`["api", "layers"]`; the root is empty).
pub type Module = Vec<String>;

/// One crate's modules and the references between them.
#[derive(Debug, Default)]
pub struct Graph {
    /// Every module, with the file it is written in.
    pub files: BTreeMap<Module, PathBuf>,
    /// module → modules it refers to (itself excluded).
    pub edges: BTreeMap<Module, BTreeSet<Module>>,
}

/// Displays a module path (`api::layers`, `crate` for the root).
pub fn name(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_owned()
    } else {
        m.join("::")
    }
}

/// The text of a Rust file with comments, string and character literals
/// replaced by spaces (lengths kept).
pub fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let clear = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in out.iter_mut().take(to).skip(from) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                clear(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                let mut j = i;
                while j < b.len() {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                clear(&mut out, i, j);
                i = j;
            }
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && (i == 0 || !is_ident(b[i - 1])) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let start = i + 2 + hashes;
                let end = b[start..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| start + p + close.len());
                clear(&mut out, i, end);
                i = end;
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                clear(&mut out, i, end);
                i = end;
            }
            b'\'' => {
                // A character literal, or a lifetime (left as is).
                if b.get(i + 1) == Some(&b'\\') {
                    let mut j = i + 2;
                    while j < b.len() && b[j] != b'\'' {
                        j += 1;
                    }
                    clear(&mut out, i, j + 1);
                    i = j + 1;
                } else {
                    let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                    if b.get(i + 1 + ch_len) == Some(&b'\'') {
                        clear(&mut out, i, i + 2 + ch_len);
                        i += 2 + ch_len;
                    } else {
                        i += 1;
                    }
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The text without the `#[cfg(test)]` modules written in the file (their
/// braces matched on the blanked text); `mod tests;` declarations stay.
fn without_test_modules(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    while let Some(p) = text[from..].find("#[cfg(test)]") {
        let at = from + p;
        let rest = &text[at + "#[cfg(test)]".len()..];
        let body = rest.trim_start();
        let body = body
            .strip_prefix("pub(crate) ")
            .or_else(|| body.strip_prefix("pub "))
            .unwrap_or(body);
        let open = body.strip_prefix("mod ").and_then(|after| {
            let decl = after.find([';', '{'])?;
            (after.as_bytes()[decl] == b'{').then(|| text.len() - after.len() + decl)
        });
        let Some(open) = open else {
            out.push_str(&text[from..at + 1]);
            from = at + 1;
            continue;
        };
        let mut depth = 0usize;
        let mut end = text.len();
        for (i, c) in text[open..].bytes().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push_str(&text[from..at]);
        from = end;
    }
    out.push_str(&text[from..]);
    out
}

/// A `use` tree expanded into its paths (`a::{b, c::d}` → `a::b`, `a::c::d`;
/// `self` in braces names the prefix; `as` aliases and globs dropped).
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn go(prefix: &[String], s: &str, out: &mut Vec<Vec<String>>) {
        let s = s.trim();
        if let Some(open) = s.find('{') {
            let head: Vec<String> = s[..open]
                .split("::")
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
            let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
            let mut depth = 0;
            let mut start = 0;
            let bytes = inner.as_bytes();
            let mut parts = Vec::new();
            for (i, &c) in bytes.iter().enumerate() {
                match c {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    b',' if depth == 0 => {
                        parts.push(&inner[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            parts.push(&inner[start..]);
            let base: Vec<String> = prefix.iter().cloned().chain(head).collect();
            for part in parts {
                let part = part.trim();
                if part.is_empty() {
                    continue;
                }
                if part == "self" {
                    out.push(base.clone());
                } else {
                    go(&base, part, out);
                }
            }
        } else {
            let s = s.split(" as ").next().unwrap_or(s);
            let mut path: Vec<String> = prefix.to_vec();
            for seg in s.split("::").map(str::trim) {
                if seg == "*" || seg.is_empty() {
                    continue;
                }
                path.push(seg.to_owned());
            }
            out.push(path);
        }
    }
    let mut out = Vec::new();
    go(&[], tree, &mut out);
    out
}

/// A path as written in module `at`, made absolute in the crate
/// (`None` for a path into another crate).
fn absolute(at: &Module, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = at.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super") | Some("self") => {
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    Some(base.into_iter().chain(rest.iter().cloned()).collect())
}

/// What one file says: its references and its re-exports.
#[derive(Debug, Default)]
struct Said {
    /// Absolute paths the file refers to.
    refs: Vec<Vec<String>>,
    /// name → absolute path it re-exports (`pub use`).
    reexports: BTreeMap<String, Vec<String>>,
}

fn read_file(module: &Module, text: &str) -> Said {
    let text = without_test_modules(&blank(text));
    let text = text.as_str();
    let mut said = Said::default();
    let bytes = text.as_bytes();
    // `use` statements.
    let mut uses: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while let Some(p) = text[i..].find("use ") {
        let at = i + p;
        i = at + 4;
        if at > 0 && is_ident(bytes[at - 1]) {
            continue;
        }
        let Some(end) = text[at..].find(';').map(|e| at + e) else {
            break;
        };
        let before = text[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let public = public && !before.ends_with("pub(self)");
        for path in expand_use(&text[at + 4..end]) {
            let Some(abs) = absolute(module, &path) else {
                continue;
            };
            if public {
                if let Some(last) = path.last() {
                    let alias = text[at + 4..end]
                        .split(" as ")
                        .nth(1)
                        .map(|a| a.trim().trim_end_matches('}').trim().to_owned());
                    let key = alias
                        .filter(|a| !a.contains([',', '{']))
                        .unwrap_or_else(|| last.clone());
                    said.reexports.insert(key, abs);
                }
            } else {
                said.refs.push(abs);
            }
        }
        uses.push((at, end));
    }
    // Paths written in the code.
    for start in ["crate::", "super::", "self::"] {
        let mut i = 0;
        while let Some(p) = text[i..].find(start) {
            let at = i + p;
            i = at + start.len();
            if at > 0 && (is_ident(bytes[at - 1]) || bytes[at - 1] == b'$' || bytes[at - 1] == b':')
            {
                continue;
            }
            if uses.iter().any(|&(s, e)| at >= s && at < e) {
                continue;
            }
            let mut end = at;
            while end < bytes.len() && (is_ident(bytes[end]) || bytes[end] == b':') {
                end += 1;
            }
            let path: Vec<String> = text[at..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if let Some(abs) = absolute(module, &path) {
                said.refs.push(abs);
            }
        }
    }
    said
}

/// The module of `file` under `src` (`lib.rs` → root, `a/mod.rs` → `a`).
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if !matches!(stem, "mod" | "lib" | "main") {
            parts.push(stem.to_owned());
        }
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The graph of the library crate whose sources are under `src`
/// (`src/bin/` and a `main.rs` next to a `lib.rs` are other crates).
pub fn read(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let has_lib = src.join("lib.rs").exists();
    files.retain(|f| !(f.starts_with(src.join("bin")) || has_lib && f == &src.join("main.rs")));
    let mut graph = Graph::default();
    let mut said = BTreeMap::new();
    for file in files {
        let module = module_of(src, &file);
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        said.insert(module.clone(), read_file(&module, &text));
        graph.files.insert(module, file);
    }
    // A path resolved to the module that defines what it names: the
    // longest module prefix, then through that module's re-exports.
    let resolve = |path: &[String]| -> Option<Module> {
        let mut path = path.to_vec();
        for _ in 0..8 {
            let cut = (0..=path.len())
                .rev()
                .find(|&n| graph.files.contains_key(&path[..n]))?;
            let module = path[..cut].to_vec();
            let next = path.get(cut);
            match next.and_then(|n| said.get(&module).and_then(|s: &Said| s.reexports.get(n))) {
                Some(target) => {
                    let mut followed = target.clone();
                    followed.extend(path[cut + 1..].iter().cloned());
                    path = followed;
                }
                None => return Some(module),
            }
        }
        None
    };
    for (module, s) in &said {
        let targets = graph.edges.entry(module.clone()).or_default();
        for r in &s.refs {
            if let Some(target) = resolve(r)
                && &target != module
            {
                targets.insert(target);
            }
        }
    }
    graph
}

impl Graph {
    /// The graph with every module cut to its first `depth` segments (the
    /// folders' level: `depth` 1 is the crate's top-level modules).
    pub fn at_depth(&self, depth: usize) -> BTreeMap<Module, BTreeSet<Module>> {
        let cut = |m: &Module| m.iter().take(depth).cloned().collect::<Module>();
        let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (from, tos) in &self.edges {
            let f = cut(from);
            let entry = out.entry(f.clone()).or_default();
            for to in tos {
                let t = cut(to);
                if t != f {
                    entry.insert(t);
                }
            }
        }
        out
    }

    /// The import circles: strongly connected components of more than one
    /// module (Tarjan's algorithm), each sorted, largest first.
    pub fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
        struct State<'a> {
            edges: &'a BTreeMap<Module, BTreeSet<Module>>,
            index: BTreeMap<&'a Module, usize>,
            low: BTreeMap<&'a Module, usize>,
            stack: Vec<&'a Module>,
            on: BTreeSet<&'a Module>,
            next: usize,
            out: Vec<Vec<Module>>,
        }
        fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
            s.index.insert(v, s.next);
            s.low.insert(v, s.next);
            s.next += 1;
            s.stack.push(v);
            s.on.insert(v);
            if let Some(tos) = s.edges.get(v) {
                for w in tos {
                    let w = s.edges.get_key_value(w).map_or(w, |(k, _)| k);
                    if !s.index.contains_key(w) {
                        visit(s, w);
                        let lw = s.low[w];
                        let lv = s.low[v];
                        s.low.insert(v, lv.min(lw));
                    } else if s.on.contains(w) {
                        let iw = s.index[w];
                        let lv = s.low[v];
                        s.low.insert(v, lv.min(iw));
                    }
                }
            }
            if s.low[v] == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    s.out.push(component);
                }
            }
        }
        let mut s = State {
            edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on: BTreeSet::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in edges.keys() {
            if !s.index.contains_key(v) {
                visit(&mut s, v);
            }
        }
        s.out.sort_by_key(|c| std::cmp::Reverse(c.len()));
        s.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_strings_and_chars_are_blanked() {
        let src = "let a = \"crate::x\"; // crate::y\n/* crate::z */ let c = 'c'; let l: &'a str = r#\"crate::w\"#; crate::real::f();";
        let text = blank(src);
        assert_eq!(text.matches("crate::").count(), 1, "{text}");
        assert!(text.contains("&'a str"));
    }

    #[test]
    fn test_modules_are_left_out_and_what_follows_them_is_read() {
        let src = "use crate::a;\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nmod tests { use crate::b; fn f() { if x { crate::c(); } } }\nuse crate::d;";
        let text = without_test_modules(&blank(src));
        assert!(
            text.contains("crate::a") && text.contains("crate::d") && text.contains("mod tests;")
        );
        assert!(
            !text.contains("crate::b") && !text.contains("crate::c"),
            "{text}"
        );
    }

    #[test]
    fn use_trees_expand() {
        let got = expand_use("crate::{a::{self, b}, c as d, e::*}");
        assert_eq!(
            got,
            vec![
                vec!["crate", "a"],
                vec!["crate", "a", "b"],
                vec!["crate", "c"],
                vec!["crate", "e"],
            ]
        );
    }

    #[test]
    fn paths_are_made_absolute() {
        let at: Module = vec!["a".into(), "b".into()];
        let p = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(absolute(&at, &p("super::c")), Some(p("a::c")));
        assert_eq!(absolute(&at, &p("super::super::d")), Some(p("d")));
        assert_eq!(absolute(&at, &p("self::e")), Some(p("a::b::e")));
        assert_eq!(absolute(&at, &p("crate::f")), Some(p("f")));
        assert_eq!(absolute(&at, &p("serde::Serialize")), None);
    }

    #[test]
    fn circles_are_found() {
        let m = |s: &str| vec![s.to_owned()];
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        edges.insert(m("a"), [m("b")].into());
        edges.insert(m("b"), [m("c")].into());
        edges.insert(m("c"), [m("a"), m("d")].into());
        edges.insert(m("d"), BTreeSet::new());
        assert_eq!(Graph::circles(&edges), vec![vec![m("a"), m("b"), m("c")]]);
    }
}
