//! OpenAPI import: an API description (OpenAPI 3.0 or 3.1, Swagger 2.0;
//! YAML or JSON) to HTTP tools in the `tools.d` format, one tool per
//! operation, the same input always giving the same tools.
//!
//! The data flow: [`spec`] reads the documents and resolves `$ref`s,
//! [`schema`] turns schemas into the JSON Schema of tool parameters,
//! [`operation`] maps one operation's parameters and body to one
//! `parameters` object and a templated request, [`security`] adds the
//! credentials, [`names`] names the tools; [`to_yaml`] writes the file
//! `toolgate import openapi` prints.

mod error;
pub mod names;
pub mod operation;
pub mod schema;
pub mod security;
pub mod spec;

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;

pub use crate::error::ImportError;
use crate::names::cap;
use crate::operation::Operation;
use crate::schema::Converter;
use crate::security::Security;
use crate::spec::Dialect;
pub use crate::spec::Documents;

/// What to import, and how.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only operations matching one of these globs (tool name without the
    /// prefix, `operationId`, or path); all when empty.
    pub include: Vec<String>,
    /// Not the operations matching one of these.
    pub exclude: Vec<String>,
    /// Put before every tool name, e.g. `github_`.
    pub prefix: String,
    /// The API's base URL, instead of the spec's first server.
    pub server: Option<String>,
    /// The environment variable holding the API's credential, for every
    /// security scheme (and sent as a bearer token when the spec declares
    /// none). Default: `<TITLE>_<SCHEME>` per scheme.
    pub auth_env: Option<String>,
}

/// The tools of one spec.
#[derive(Debug)]
pub struct Imported {
    /// The spec's `info.title` and `info.version`.
    pub title: String,
    /// Operations in the spec.
    pub operations: usize,
    pub tools: Vec<ImportedTool>,
    /// Environment variables the tools read, and what each holds.
    pub env: Vec<(String, String)>,
    /// Operations not imported (filtered ones aside), and why.
    pub skipped: Vec<String>,
    /// What was approximated (recursive schemas cut, bodies left out).
    pub notes: Vec<String>,
}

/// One tool: its declaration in the `tools.d` format (a `tools:` entry).
#[derive(Debug)]
pub struct ImportedTool {
    pub name: String,
    /// `GET /pets/{petId}` and the `operationId`, if any.
    pub operation: String,
    pub decl: serde_yaml::Mapping,
}

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Imports a spec given as text (YAML or JSON), e.g. fetched from a URL:
/// its `$ref`s to other files are refused, having no folder to resolve in.
pub fn import_text(text: &str, options: &Options) -> Result<Imported, ImportError> {
    let value = spec::parse(text).map_err(|message| ImportError::Parse {
        path: PathBuf::from("(the fetched spec)"),
        message,
    })?;
    import(Documents::from_value(value, None), options)
}

/// Reads the spec at `path` and imports it.
pub fn import_file(path: &Path, options: &Options) -> Result<Imported, ImportError> {
    import(Documents::from_file(path)?, options)
}

/// Imports the spec in `docs`.
pub fn import(mut docs: Documents, options: &Options) -> Result<Imported, ImportError> {
    let root = docs.root().clone();
    let dialect = if root
        .get("openapi")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("3."))
    {
        Dialect::OpenApi3
    } else if root.get("swagger").and_then(Value::as_str) == Some("2.0") {
        Dialect::Swagger2
    } else {
        return Err(ImportError::NotOpenApi);
    };
    if let Some(env) = &options.auth_env
        && !is_env_name(env)
    {
        return Err(ImportError::EnvName(env.clone()));
    }
    let include = globs(&options.include)?;
    let exclude = globs(&options.exclude)?;
    let info = |k: &str| {
        root.pointer(&format!("/info/{k}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let title = format!("{} {}", info("title"), info("version"))
        .trim()
        .to_string();
    let stem = if options.prefix.is_empty() {
        info("title")
    } else {
        options.prefix.clone()
    };
    let mut env_stem = names::sanitize(&stem)
        .to_ascii_uppercase()
        .replace('-', "_");
    env_stem.truncate(24);
    let env_stem = env_stem.trim_end_matches('_').to_string();
    let security = Security::new(
        &root,
        dialect,
        options.auth_env.as_deref(),
        if env_stem.is_empty() || env_stem.starts_with(|c: char| c.is_ascii_digit()) {
            format!("API{env_stem}")
        } else {
            env_stem
        },
    );
    let default_server = match &options.server {
        Some(s) => s.clone(),
        None => spec_server(&root, dialect),
    };
    let root_consumes = string_list(root.get("consumes"));

    let mut names = names::Names::default();
    let mut out = Imported {
        title,
        operations: 0,
        tools: Vec::new(),
        env: Vec::new(),
        skipped: Vec::new(),
        notes: Vec::new(),
    };
    let Some(paths) = root.get("paths").and_then(Value::as_object) else {
        return Ok(out);
    };
    for (path, item) in paths {
        let mut conv = Converter::new(&mut docs);
        let (doc, item) = conv.deref(0, item);
        drop(conv);
        for method in METHODS {
            let Some(op) = item.get(*method) else {
                continue;
            };
            out.operations += 1;
            let upper = method.to_ascii_uppercase();
            let operation_id = op.get("operationId").and_then(Value::as_str);
            let base = operation_id.map_or_else(
                || names::from_method_and_path(method, path),
                names::sanitize,
            );
            let candidates = [Some(base.as_str()), operation_id, Some(path.as_str())];
            let matches = |set: &GlobSet| candidates.iter().flatten().any(|c| set.is_match(c));
            if (!options.include.is_empty() && !matches(&include)) || matches(&exclude) {
                continue;
            }
            let label = match operation_id {
                Some(id) => format!("{upper} {path} ({id})"),
                None => format!("{upper} {path}"),
            };
            if matches!(*method, "options" | "head" | "trace") {
                out.skipped.push(format!(
                    "{label}: HTTP tools send GET, POST, PUT, PATCH and DELETE"
                ));
                continue;
            }
            let server = match &options.server {
                Some(s) => s.clone(),
                None => [op, &item]
                    .iter()
                    .find_map(|v| v.pointer("/servers/0"))
                    .map_or_else(|| default_server.clone(), server_url),
            };
            let server = server.trim_end_matches('/').to_string();
            // The server URL goes into a template: a spec must not be able
            // to make it read `env` (another API's credential).
            if !(server.starts_with("http://") || server.starts_with("https://"))
                || server.contains(['{', '}'])
            {
                return Err(ImportError::Server(server));
            }
            let auth = match security.for_operation(op) {
                Ok(a) => a,
                Err(why) => {
                    out.skipped.push(format!("{label}: {why}"));
                    continue;
                }
            };
            let consumes = match op.get("consumes") {
                Some(c) => string_list(Some(c)),
                None => root_consumes.clone(),
            };
            let operation = Operation {
                method,
                path,
                doc,
                item: &item,
                op,
                server,
                dialect,
                consumes,
            };
            let name = names.assign(&options.prefix, &base, &format!("{upper} {path}"));
            let mut conv = Converter::new(&mut docs);
            let built = operation::build(
                &mut conv,
                &operation,
                &name,
                description(op, &upper, path),
                &auth,
            );
            for note in conv.notes {
                out.notes.push(format!("{label}: {note}"));
            }
            match built {
                Ok(decl) => {
                    for e in auth.env {
                        if !out.env.iter().any(|(n, _)| *n == e.0) {
                            out.env.push(e);
                        }
                    }
                    out.tools.push(ImportedTool {
                        name,
                        operation: label,
                        decl,
                    });
                }
                Err(why) => out.skipped.push(format!("{label}: {why}")),
            }
        }
    }
    Ok(out)
}

/// Writes `imported` as a `tools.d` file: a header saying where it came
/// from and what was skipped, the `env` it reads, and one tool per
/// operation, each after a comment naming its operation.
pub fn to_yaml(imported: &Imported, source: &str) -> Result<String, ImportError> {
    let mut out = String::new();
    out.push_str(&format!(
        "# Imported by `toolgate import openapi` from {source}\n# {}: {} operations, {} tools.\n",
        if imported.title.is_empty() {
            "(untitled)"
        } else {
            &imported.title
        },
        imported.operations,
        imported.tools.len()
    ));
    for (heading, lines) in [
        ("Not imported", &imported.skipped),
        ("Approximated", &imported.notes),
    ] {
        if lines.is_empty() {
            continue;
        }
        out.push_str(&format!("#\n# {heading}:\n"));
        for line in lines {
            out.push_str(&format!("#   {}\n", one_line(line)));
        }
    }
    if !imported.env.is_empty() {
        out.push_str("\nenv:\n");
        for (name, what) in &imported.env {
            out.push_str(&format!("  # {}\n  {name}: optional\n", one_line(what)));
        }
    }
    out.push_str("\ntools:\n");
    if imported.tools.is_empty() {
        out.push_str("  []\n");
    }
    for tool in &imported.tools {
        let text =
            serde_yaml::to_string(&tool.decl).map_err(|e| ImportError::Yaml(e.to_string()))?;
        out.push_str(&format!("  # {}\n", one_line(&tool.operation)));
        for (i, line) in text.lines().enumerate() {
            let lead = if i == 0 {
                "  - "
            } else if line.is_empty() {
                ""
            } else {
                "    "
            };
            out.push_str(lead);
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The tool's description: the summary and the first paragraph of the
/// description, at most 1,000 characters; else the method and path.
fn description(op: &Value, method: &str, path: &str) -> String {
    let text = |k: &str| {
        op.get(k)
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default()
            .to_string()
    };
    let summary = text("summary");
    let long = text("description");
    let first = long
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut out = match (summary.is_empty(), first.is_empty()) {
        (false, false) if first.starts_with(summary.trim_end_matches('.')) => first,
        (false, false) => format!("{}. {first}", summary.trim_end_matches('.')),
        (false, true) => summary,
        (true, false) => first,
        (true, true) => format!("{method} {path}"),
    };
    if op.get("deprecated") == Some(&Value::Bool(true)) {
        out = format!("Deprecated. {out}");
    }
    cap(&out, 1000)
}

/// The spec's first server (3.x, variables at their defaults) or
/// `scheme://host/basePath` (2.0).
fn spec_server(root: &Value, dialect: Dialect) -> String {
    match dialect {
        Dialect::OpenApi3 => root
            .pointer("/servers/0")
            .map_or_else(String::new, server_url),
        Dialect::Swagger2 => {
            let scheme = root
                .get("schemes")
                .and_then(Value::as_array)
                .and_then(|s| s.iter().find(|v| *v == "https").or_else(|| s.first()))
                .and_then(Value::as_str)
                .unwrap_or("https");
            match root.get("host").and_then(Value::as_str) {
                Some(host) => format!(
                    "{scheme}://{host}{}",
                    root.get("basePath")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                ),
                None => root
                    .get("basePath")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            }
        }
    }
}

fn server_url(server: &Value) -> String {
    let mut url = server
        .get("url")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some(vars) = server.get("variables").and_then(Value::as_object) {
        for (name, var) in vars {
            if let Some(default) = var.get("default").and_then(Value::as_str) {
                url = url.replace(&format!("{{{name}}}"), default);
            }
        }
    }
    url
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn globs(patterns: &[String]) -> Result<GlobSet, ImportError> {
    let mut set = GlobSetBuilder::new();
    for p in patterns {
        set.add(Glob::new(p).map_err(|e| ImportError::Glob {
            glob: p.clone(),
            message: e.to_string(),
        })?);
    }
    set.build().map_err(|e| ImportError::Glob {
        glob: patterns.join(" "),
        message: e.to_string(),
    })
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests;
