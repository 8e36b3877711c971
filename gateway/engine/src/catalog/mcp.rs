//! Validating `mcp_servers` declarations into server specs, collecting every
//! error with its position. What can be known before connecting is checked
//! here (fields per transport, templates and the variables they read,
//! prefixes, names the include list spells out, collisions between
//! servers); the rest is checked when a server lists its tools.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use reqwest::header::{HeaderName, HeaderValue};

use super::ToolSet;
use crate::template::{self, TemplateSet};
use crate::tool::mcp::spec::{
    HttpSpec, RESERVED_HEADERS, StdioSpec, ToolFilter, Transport, is_glob,
};
use crate::tool::mcp::{Expected, McpRegistry, ServerSpec};
use crate::tool::{Tool, is_valid_name};
use toolgate_config::format::{McpServerDecl, McpTransport};
use toolgate_config::load::{Loaded, RawToolFile};
use toolgate_config::{Diagnostic, RawConfig};

/// Default of `startup_timeout`.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Collects the servers of every tools file.
#[derive(Default)]
pub(super) struct McpChecker {
    pub specs: Vec<ServerSpec>,
    /// Where each server name is first declared.
    seen: HashMap<String, (String, toolgate_config::Pos)>,
}

impl McpChecker {
    /// Checks the `i`th server of `file`. `tools` maps the names of the
    /// catalog's other tools to where they are declared.
    #[allow(clippy::too_many_arguments)]
    pub fn check(
        &mut self,
        dir: &Path,
        file: &Loaded<RawToolFile>,
        i: usize,
        decl: &McpServerDecl,
        env_values: &BTreeMap<String, String>,
        tools: &HashMap<String, String>,
        diags: &mut Vec<Diagnostic>,
    ) {
        let at = |p: &str| file.pos(&format!("mcp_servers[{i}]{p}"));
        let before = diags.iter().filter(|d| d.is_error()).count();
        let err = |diags: &mut Vec<Diagnostic>, p: &str, msg: String, hint: &str| {
            diags.push(Diagnostic::error(&file.file, at(p), msg, hint));
        };

        if !is_valid_name(&decl.name) {
            err(
                diags,
                ".name",
                format!("MCP server name {:?} is invalid", decl.name),
                "use 1-64 letters, digits, `_` or `-`",
            );
        } else if let Some((other, p)) = self.seen.get(&decl.name) {
            err(
                diags,
                ".name",
                format!(
                    "MCP server `{}` is also declared at {other}:{}:{}",
                    decl.name, p.line, p.column
                ),
                "rename one of the two servers",
            );
        } else {
            self.seen
                .insert(decl.name.clone(), (file.file.clone(), at(".name")));
        }

        // Templates over `env` (values of `env` and `headers`).
        let mut templates = TemplateSet::default();
        let mut env_used = BTreeSet::new();
        let mut compile = |diags: &mut Vec<Diagnostic>, key: String, source: &str, p: &str| {
            match templates.add(key.clone(), source.to_owned()) {
                Err(e) => {
                    diags.push(Diagnostic::error(
                        &file.file,
                        at(p),
                        format!("the template does not compile: {e}"),
                        "fix the minijinja syntax",
                    ));
                    None
                }
                Ok(vars) => {
                    for var in vars {
                        match var.strip_prefix("env.") {
                            Some(v) if file.value.env.contains_key(v) => {
                                env_used.insert(v.to_owned());
                            }
                            Some(v) => diags.push(Diagnostic::error(
                                &file.file,
                                at(p),
                                format!("the template reads `env.{v}`, which the file does not declare"),
                                format!("add `{v}: optional` (or `required`) under the file's top-level `env`"),
                            )),
                            None => diags.push(Diagnostic::error(
                                &file.file,
                                at(p),
                                format!("the template reads `{var}`, which does not exist here"),
                                "MCP server settings may only read `env.<variable>`",
                            )),
                        }
                    }
                    Some(key)
                }
            }
        };

        let stdio_only = [
            (decl.command.is_some(), ".command", "command"),
            (!decl.args.is_empty(), ".args", "args"),
            (!decl.env.is_empty(), ".env", "env"),
            (decl.cwd.is_some(), ".cwd", "cwd"),
        ];
        let http_only = [
            (decl.url.is_some(), ".url", "url"),
            (!decl.headers.is_empty(), ".headers", "headers"),
        ];
        let mut env_keys = Vec::new();
        let mut header_keys = Vec::new();
        match decl.transport {
            McpTransport::Stdio => {
                for (present, p, field) in http_only {
                    if present {
                        err(
                            diags,
                            p,
                            format!("`{field}` is only for `transport: http`"),
                            "remove it, or use `transport: http`",
                        );
                    }
                }
                match &decl.command {
                    None => err(
                        diags,
                        ".transport",
                        "a stdio MCP server needs a `command`".into(),
                        "add `command:` (the program to run) and its `args`",
                    ),
                    Some(c) if c.trim().is_empty() => err(
                        diags,
                        ".command",
                        "the command is empty".into(),
                        "name the program to run, e.g. `npx` or `/usr/local/bin/server`",
                    ),
                    Some(_) => {}
                }
                for (k, v) in &decl.env {
                    let valid = !k.is_empty()
                        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        && !k.as_bytes()[0].is_ascii_digit();
                    let p = format!(".env.{k}");
                    if !valid {
                        err(
                            diags,
                            &p,
                            format!("{k:?} is not a valid environment variable name"),
                            "use letters, digits and `_`, not starting with a digit",
                        );
                    } else if let Some(key) = compile(diags, format!("env.{k}"), v, &p) {
                        env_keys.push((k.clone(), key));
                    }
                }
                if let Some(cwd) = &decl.cwd
                    && !dir.join(cwd).is_dir()
                {
                    err(
                        diags,
                        ".cwd",
                        format!("the working directory {cwd:?} does not exist"),
                        "give a folder relative to the configuration folder, or an absolute path",
                    );
                }
            }
            McpTransport::Http => {
                for (present, p, field) in stdio_only {
                    if present {
                        err(
                            diags,
                            p,
                            format!("`{field}` is only for `transport: stdio`"),
                            "remove it, or use `transport: stdio`",
                        );
                    }
                }
                match &decl.url {
                    None => err(
                        diags,
                        ".transport",
                        "an http MCP server needs a `url`".into(),
                        "add `url:` with the server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp",
                    ),
                    Some(u) => match url::Url::parse(u) {
                        Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                        _ => err(
                            diags,
                            ".url",
                            format!("{u:?} is not an http(s) URL"),
                            "write it like http://127.0.0.1:8000/mcp",
                        ),
                    },
                }
                for (k, v) in &decl.headers {
                    let p = format!(".headers.{k}");
                    match HeaderName::from_bytes(k.as_bytes()) {
                        Err(_) => err(
                            diags,
                            &p,
                            format!("{k:?} is not a valid header name"),
                            "use letters, digits and `-`",
                        ),
                        Ok(h) if RESERVED_HEADERS.contains(&h.as_str()) => err(
                            diags,
                            &p,
                            format!("the header `{k}` is set by the MCP transport itself"),
                            "remove it",
                        ),
                        Ok(h) => {
                            if let Some(key) = compile(diags, format!("headers.{k}"), v, &p) {
                                header_keys.push((h, key, p));
                            }
                        }
                    }
                }
            }
        }

        // Tool selection and names.
        let t = &decl.tools;
        let prefix_ok = t
            .prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !prefix_ok || t.prefix.len() > 63 {
            err(
                diags,
                ".tools.prefix",
                format!("the prefix {:?} is invalid", t.prefix),
                "use at most 63 letters, digits, `_` or `-` (tool names are 1-64 of these)",
            );
        }
        let filter = match ToolFilter::new(&t.prefix, &t.include, &t.exclude) {
            Ok(f) => Some(f),
            Err((k, why)) => {
                let p = if k < t.include.len() {
                    format!(".tools.include[{k}]")
                } else {
                    format!(".tools.exclude[{}]", k - t.include.len())
                };
                err(
                    diags,
                    &p,
                    format!("the pattern is invalid: {why}"),
                    "use `*` for any characters and `?` for one",
                );
                None
            }
        };
        if let Some(f) = &filter {
            for (k, remote) in t.include.iter().enumerate() {
                if is_glob(remote) || !f.admits(remote) {
                    continue;
                }
                let p = format!(".tools.include[{k}]");
                match f.local_name(remote) {
                    Err(why) => err(
                        diags,
                        &p,
                        format!("the name of tool `{remote}` would be too long: {why}"),
                        "use a shorter `tools.prefix`, or remove the tool from `include`",
                    ),
                    Ok(name) => {
                        if let Some(other) = tools.get(&name) {
                            err(
                                diags,
                                &p,
                                format!(
                                    "tool `{name}` of MCP server `{}` collides with the tool `{name}` declared at {other}",
                                    decl.name
                                ),
                                "set a `tools.prefix` on the server, or rename one of the two",
                            );
                        }
                    }
                }
            }
        }

        for (p, value) in [
            (".timeout", decl.timeout),
            (".startup_timeout", decl.startup_timeout),
            (".cache.ttl", decl.cache.as_ref().map(|c| c.ttl)),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                err(
                    diags,
                    p,
                    "the duration is zero".into(),
                    "give a duration such as `30s`, or remove it",
                );
            }
        }

        if diags.iter().filter(|d| d.is_error()).count() != before {
            return;
        }
        let Some(filter) = filter else { return };

        // Variables it needs but that are unset disable the server.
        let missing: Vec<&str> = env_used
            .iter()
            .filter(|v| !env_values.contains_key(v.as_str()))
            .map(String::as_str)
            .collect();
        let disabled = (!missing.is_empty()).then(|| {
            let names = missing.join(", ");
            diags.push(Diagnostic::warning(
                &file.file,
                at(".name"),
                format!(
                    "MCP server `{}` is disabled: environment variable {names} is not set",
                    decl.name
                ),
                format!("set {names} and reload to enable it"),
            ));
            format!("environment variable {names} is not set")
        });
        let env = templates.finish();
        let ctx = minijinja::context! { env => env_values };
        let render = |diags: &mut Vec<Diagnostic>, key: &str, p: &str| -> Option<String> {
            if disabled.is_some() {
                return Some(String::new());
            }
            match template::render(&env, key, ctx.clone()) {
                Ok(v) => Some(v),
                Err(e) => {
                    diags.push(Diagnostic::error(
                        &file.file,
                        at(p),
                        format!("the template does not render: {e}"),
                        "fix the template",
                    ));
                    None
                }
            }
        };

        let transport = match decl.transport {
            McpTransport::Stdio => {
                let mut env_vars = Vec::new();
                for (k, key) in env_keys {
                    let Some(value) = render(diags, &key, &format!(".env.{k}")) else {
                        return;
                    };
                    env_vars.push((k.clone(), value));
                }
                let command = decl.command.clone().unwrap_or_default();
                // A path is relative to the configuration folder; a bare name
                // is looked up on PATH.
                let command = if command.contains('/') && Path::new(&command).is_relative() {
                    dir.join(&command).to_string_lossy().into_owned()
                } else {
                    command
                };
                Transport::Stdio(StdioSpec {
                    command,
                    args: decl.args.clone(),
                    env: env_vars,
                    cwd: decl.cwd.as_ref().map(|c| dir.join(c)),
                })
            }
            McpTransport::Http => {
                let mut headers = Vec::new();
                for (name, key, p) in header_keys {
                    let Some(value) = render(diags, &key, &p) else {
                        return;
                    };
                    match HeaderValue::from_str(&value) {
                        Ok(mut v) => {
                            v.set_sensitive(true);
                            headers.push((name, v));
                        }
                        Err(_) => {
                            diags.push(Diagnostic::error(
                                &file.file,
                                at(&p),
                                format!("the value of header `{name}` is not a valid header value (the value is not shown)"),
                                "check the variables it reads: no line breaks or control characters",
                            ));
                            return;
                        }
                    }
                }
                Transport::Http(HttpSpec {
                    url: decl.url.clone().unwrap_or_default(),
                    headers,
                })
            }
        };
        self.specs.push(ServerSpec {
            name: decl.name.clone(),
            transport,
            tools: filter,
            timeout: decl.timeout,
            startup_timeout: decl.startup_timeout.unwrap_or(DEFAULT_STARTUP_TIMEOUT),
            cache_ttl: decl.cache.as_ref().map(|c| c.ttl),
            file: file.file.clone(),
            pos: at(""),
            disabled,
        });
    }

    /// Checks what only the whole list shows: two servers whose tools
    /// would share names.
    pub fn finish(&self, files: &[Loaded<RawToolFile>], diags: &mut Vec<Diagnostic>) {
        let prefix_pos = |spec: &ServerSpec| {
            files
                .iter()
                .find(|f| f.file == spec.file)
                .and_then(|f| {
                    f.value
                        .mcp_servers
                        .iter()
                        .position(|d| d.as_ref().is_some_and(|d| d.name == spec.name))
                        .map(|i| f.pos(&format!("mcp_servers[{i}].tools.prefix")))
                })
                .unwrap_or(spec.pos)
        };
        for (j, b) in self.specs.iter().enumerate() {
            for a in &self.specs[..j] {
                if a.tools.prefix != b.tools.prefix {
                    continue;
                }
                // Both list their tools by name, and the names differ: fine.
                if let (Some(x), Some(y)) = (a.tools.known_names(), b.tools.known_names())
                    && !x.iter().any(|n| y.contains(n))
                {
                    continue;
                }
                let prefix = if b.tools.prefix.is_empty() {
                    "no prefix".to_owned()
                } else {
                    format!("the prefix `{}`", b.tools.prefix)
                };
                diags.push(Diagnostic::error(
                    &b.file,
                    prefix_pos(b),
                    format!(
                        "MCP servers `{}` ({}:{}) and `{}` both have {prefix}, so their tools could get the same names",
                        a.name, a.file, a.pos.line, b.name
                    ),
                    "give each server its own `tools.prefix` (e.g. `time_`), or list each server's tools by name in `tools.include`",
                ));
            }
        }
    }
}

/// Validates the `mcp_servers` of every tools file. `reserved` maps the
/// names of the catalog's other tools to where they are declared.
pub(super) fn check_servers(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    reserved: &HashMap<String, String>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<ServerSpec> {
    let mut checker = McpChecker::default();
    for file in &raw.tool_files {
        // The file's declared variables that are set (`check_env` reports
        // the rest).
        let env_values: BTreeMap<String, String> = file
            .value
            .env
            .keys()
            .filter_map(|k| env(k).map(|v| (k.clone(), v)))
            .collect();
        for (i, decl) in file.value.mcp_servers.iter().enumerate() {
            if let Some(decl) = decl {
                checker.check(&raw.dir, file, i, decl, &env_values, reserved, diags);
            }
        }
    }
    checker.finish(&raw.tool_files, diags);
    checker.specs
}

/// The registry of a valid catalog: its servers, the names of its other
/// tools (which win over MCP tools), and the exact names its sets expect
/// from MCP servers.
pub(super) fn registry(
    specs: Vec<ServerSpec>,
    tools: &IndexMap<String, Arc<Tool>>,
    sets: &IndexMap<String, ToolSet>,
) -> McpRegistry {
    let reserved = tools
        .values()
        .map(|t| (t.name.clone(), t.origin.clone()))
        .collect();
    let mut expected: Vec<Expected> = Vec::new();
    for set in sets.values() {
        for p in set.mcp.iter().filter(|p| p.is_exact()) {
            if !expected
                .iter()
                .any(|e| e.name == p.entry && e.file == p.file)
            {
                expected.push(Expected {
                    name: p.entry.clone(),
                    set: set.name.clone(),
                    file: p.file.clone(),
                    pos: p.pos,
                    servers: p.servers.clone(),
                });
            }
        }
    }
    McpRegistry::new(specs, reserved, expected)
}
