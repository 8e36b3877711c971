//! Reading a configuration folder: `toolgate.yaml`, `tools.d/*.yaml` and
//! `tool-sets/*.yaml`, each parsed into its typed form.
//!
//! A file that does not parse is reported (with serde_yaml's position) and
//! left out; the other files are still read so every error shows at once.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::de::DeserializeOwned;

use super::diag::Diagnostic;
use super::format::{
    EnvNeed, GatewayFile, McpServerDecl, OpenApiDecl, ToolDecl, ToolFile, ToolSetFile,
};
use super::span::{Pos, SpanIndex};

/// A parsed file and where its values stand.
#[derive(Debug)]
pub struct Loaded<T> {
    /// Path relative to the configuration folder, for messages.
    pub file: String,
    pub spans: SpanIndex,
    pub value: T,
}

impl<T> Loaded<T> {
    /// The position of the value at `path` (see [`SpanIndex::find`]).
    pub fn pos(&self, path: &str) -> Pos {
        self.spans.find(path)
    }
}

/// Everything read from a configuration folder, before validation.
#[derive(Debug)]
pub struct RawConfig {
    pub dir: PathBuf,
    pub gateway: Loaded<GatewayFile>,
    /// Tool files; a tool or MCP server that failed to parse is `None`.
    pub tool_files: Vec<Loaded<RawToolFile>>,
    pub set_files: Vec<Loaded<ToolSetFile>>,
    /// A `tools.d` file failed to parse, so the tool list is incomplete.
    pub tools_incomplete: bool,
}

/// A tools file as read: each entry parsed on its own, `None` when it failed.
pub type RawToolFile = ToolFile<Option<ToolDecl>, Option<McpServerDecl>, Option<OpenApiDecl>>;

pub const GATEWAY_FILE: &str = "toolgate.yaml";
pub const TOOLS_DIR: &str = "tools.d";
pub const SETS_DIR: &str = "tool-sets";

/// How a URL the configuration names (an `openapi:` spec) is read: its
/// text, or why not. The loader does no I/O beyond the folder itself; the
/// caller brings the network (with its own size cap and timeout).
pub type Fetch<'a> = &'a dyn Fn(&str) -> Result<String, String>;

/// Reads and parses every file of the folder. Parse errors are appended to
/// `diags`; the files that failed are left out of the result. URLs are
/// refused (see [`load_dir_with`]).
pub fn load_dir(dir: &Path, diags: &mut Vec<Diagnostic>) -> RawConfig {
    load_dir_with(dir, &no_fetch, diags)
}

/// The fetch of a loader that reads no URLs.
fn no_fetch(_: &str) -> Result<String, String> {
    Err("this loader fetches no URLs".to_owned())
}

/// [`load_dir`], reading URLs with `fetch`.
pub fn load_dir_with(dir: &Path, fetch: Fetch<'_>, diags: &mut Vec<Diagnostic>) -> RawConfig {
    let gateway_path = dir.join(GATEWAY_FILE);
    let gateway = if gateway_path.exists() {
        parse_file(dir, fetch, &gateway_path, diags)
    } else {
        None
    }
    .unwrap_or_else(|| Loaded {
        file: GATEWAY_FILE.to_owned(),
        spans: SpanIndex::default(),
        value: GatewayFile::default(),
    });
    let tool_paths = yaml_files(dir, TOOLS_DIR, diags);
    let tool_count = tool_paths.len();
    let tool_files: Vec<Loaded<RawToolFile>> = tool_paths
        .into_iter()
        .filter_map(|p| parse_file(dir, fetch, &p, diags))
        .collect();
    let set_files = yaml_files(dir, SETS_DIR, diags)
        .into_iter()
        .filter_map(|p| parse_file(dir, fetch, &p, diags))
        .collect();
    RawConfig {
        dir: dir.to_owned(),
        gateway,
        tools_incomplete: tool_files.len() < tool_count
            || tool_files.iter().any(|f| {
                f.value.tools.iter().any(Option::is_none)
                    || f.value.mcp_servers.iter().any(Option::is_none)
            }),
        tool_files,
        set_files,
    }
}

/// The `.yaml`/`.yml` files of `dir/sub`, sorted by name. A missing folder
/// is empty, not an error.
fn yaml_files(dir: &Path, sub: &str, diags: &mut Vec<Diagnostic>) -> Vec<PathBuf> {
    let folder = dir.join(sub);
    let entries = match std::fs::read_dir(&folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            diags.push(Diagnostic::error(
                sub,
                Pos { line: 1, column: 1 },
                format!("cannot read the folder: {e}"),
                "check that it exists and is readable",
            ));
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    files
}

fn display_path(dir: &Path, path: &Path) -> String {
    path.strip_prefix(dir)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

fn parse_file<T: FromYaml>(
    dir: &Path,
    fetch: Fetch<'_>,
    path: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Option<Loaded<T>> {
    let file = display_path(dir, path);
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            diags.push(Diagnostic::error(
                &file,
                Pos { line: 1, column: 1 },
                format!("cannot read the file: {e}"),
                "check that it is readable UTF-8 text",
            ));
            return None;
        }
    };
    parse_text_with(dir, fetch, &file, &text, diags)
}

/// Parses one file's text: YAML syntax first, then the typed form, so that
/// type errors carry the exact path and position of the offending value.
pub fn parse_text<T: FromYaml>(
    dir: &Path,
    file: &str,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Loaded<T>> {
    parse_text_with(dir, &no_fetch, file, text, diags)
}

fn parse_text_with<T: FromYaml>(
    dir: &Path,
    fetch: Fetch<'_>,
    file: &str,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Loaded<T>> {
    let is_empty = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if is_empty {
        return Some(Loaded {
            file: file.to_owned(),
            spans: SpanIndex::default(),
            value: T::default(),
        });
    }
    let value: serde_yaml::Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let pos = e
                .location()
                .map(|l| Pos {
                    line: l.line(),
                    column: l.column(),
                })
                .unwrap_or(Pos { line: 1, column: 1 });
            let (message, hint) = describe_yaml_error(&e.to_string());
            diags.push(Diagnostic::error(file, pos, message, hint));
            return None;
        }
    };
    let mut ctx = Ctx {
        dir,
        fetch,
        file,
        spans: SpanIndex::new(text),
        diags,
    };
    let value = T::from_yaml(value, &mut ctx)?;
    Some(Loaded {
        file: file.to_owned(),
        spans: ctx.spans,
        value,
    })
}

/// What a typed conversion needs to report errors.
pub struct Ctx<'a> {
    /// The configuration folder (paths in files are relative to it).
    dir: &'a Path,
    /// How URLs are read.
    fetch: Fetch<'a>,
    file: &'a str,
    spans: SpanIndex,
    diags: &'a mut Vec<Diagnostic>,
}

impl Ctx<'_> {
    /// Deserializes `value` (found at `base`) into `T`, reporting a failure
    /// at the path of the offending value.
    fn typed<T: DeserializeOwned>(&mut self, value: serde_yaml::Value, base: &str) -> Option<T> {
        match serde_path_to_error::deserialize::<_, T>(value) {
            Ok(v) => Some(v),
            Err(e) => {
                let inner = e.path().to_string();
                let path = match (base.is_empty(), inner.as_str()) {
                    (_, ".") => base.to_owned(),
                    (true, p) => p.to_owned(),
                    (false, p) if p.starts_with('[') => format!("{base}{p}"),
                    (false, p) => format!("{base}.{p}"),
                };
                let (message, hint) = describe_yaml_error(&e.into_inner().to_string());
                let message = if path.is_empty() {
                    message
                } else {
                    format!("{path}: {message}")
                };
                self.diags.push(Diagnostic::error(
                    self.file,
                    self.spans.find(&path),
                    message,
                    hint,
                ));
                None
            }
        }
    }
}

/// The typed forms a file can be read into.
pub trait FromYaml: Sized + Default {
    fn from_yaml(value: serde_yaml::Value, ctx: &mut Ctx<'_>) -> Option<Self>;
}

impl FromYaml for GatewayFile {
    fn from_yaml(value: serde_yaml::Value, ctx: &mut Ctx<'_>) -> Option<Self> {
        ctx.typed(value, "")
    }
}

impl FromYaml for ToolSetFile {
    fn from_yaml(value: serde_yaml::Value, ctx: &mut Ctx<'_>) -> Option<Self> {
        ctx.typed(value, "")
    }
}

/// Tool files are read entry by entry: a malformed tool or server is
/// reported and left out (as `None`, so the others keep their index) without
/// hiding the rest.
impl FromYaml for RawToolFile {
    fn from_yaml(value: serde_yaml::Value, ctx: &mut Ctx<'_>) -> Option<Self> {
        let outer: ToolFile<serde_yaml::Value, serde_yaml::Value, serde_yaml::Value> =
            ctx.typed(value, "")?;
        let mut tools: Vec<Option<ToolDecl>> = outer
            .tools
            .into_iter()
            .enumerate()
            .map(|(i, v)| ctx.typed(v, &format!("tools[{i}]")))
            .collect();
        let mcp_servers = outer
            .mcp_servers
            .into_iter()
            .enumerate()
            .map(|(i, v)| ctx.typed(v, &format!("mcp_servers[{i}]")))
            .collect();
        let mut env = outer.env;
        let openapi = outer
            .openapi
            .into_iter()
            .enumerate()
            .map(|(j, v)| {
                let decl: OpenApiDecl = ctx.typed(v, &format!("openapi[{j}]"))?;
                import_openapi(ctx, j, &decl, &mut tools, &mut env);
                Some(decl)
            })
            .collect();
        Some(ToolFile {
            env,
            tools,
            mcp_servers,
            openapi,
        })
    }
}

/// Appends the tools of the OpenAPI description `decl` (entry `j` of the
/// file's `openapi`) to `tools`, each positioned at the entry, and declares
/// the variables they read as `optional` unless `env` declares them.
fn import_openapi(
    ctx: &mut Ctx<'_>,
    j: usize,
    decl: &OpenApiDecl,
    tools: &mut Vec<Option<ToolDecl>>,
    env: &mut IndexMap<String, EnvNeed>,
) {
    let at = format!("openapi[{j}]");
    let options = toolgate_openapi::Options {
        include: decl.include.clone(),
        exclude: decl.exclude.clone(),
        prefix: decl.prefix.clone(),
        server: decl.server.clone(),
        auth_env: decl.auth_env.clone(),
    };
    let is_url = decl.spec.starts_with("https://") || decl.spec.starts_with("http://");
    let imported = if is_url {
        (ctx.fetch)(&decl.spec).and_then(|text| {
            toolgate_openapi::import_text(&text, &options).map_err(|e| e.to_string())
        })
    } else if decl.spec.contains("://") {
        Err("only http(s) URLs and files are read".to_owned())
    } else {
        toolgate_openapi::import_file(&ctx.dir.join(&decl.spec), &options).map_err(|e| {
            // Paths in the message relative to the folder, as in every
            // other diagnostic.
            e.to_string()
                .replace(&format!("{}/", ctx.dir.display()), "")
        })
    };
    let imported = match imported {
        Ok(imported) => imported,
        Err(e) => {
            ctx.diags.push(Diagnostic::error(
                ctx.file,
                ctx.spans.find(&format!("{at}.spec")),
                format!("cannot import `{}`: {e}", decl.spec),
                "give the path of an OpenAPI 3.x or Swagger 2.0 file, relative to the configuration folder, or its http(s) URL",
            ));
            return;
        }
    };
    for (name, _) in imported.env {
        env.entry(name).or_insert(EnvNeed::Optional);
    }
    if !imported.skipped.is_empty() {
        let shown: Vec<&str> = imported
            .skipped
            .iter()
            .take(3)
            .map(String::as_str)
            .collect();
        ctx.diags.push(Diagnostic::warning(
            ctx.file,
            ctx.spans.find(&at),
            format!(
                "{} operations of `{}` are not tools: {}{}",
                imported.skipped.len(),
                decl.spec,
                shown.join("; "),
                if imported.skipped.len() > shown.len() {
                    "; …"
                } else {
                    ""
                }
            ),
            format!("`toolgate import openapi {}` lists them all", decl.spec),
        ));
    }
    for tool in imported.tools {
        let path = format!("tools[{}]", tools.len());
        ctx.spans.alias(&path, &at);
        let decl = ctx.typed(serde_yaml::Value::Mapping(tool.decl), &path);
        tools.push(decl);
    }
}

/// Turns serde_yaml's message into (what is wrong, how to fix it).
fn describe_yaml_error(raw: &str) -> (String, String) {
    // serde_yaml appends " at line L column C"; the position is shown apart.
    let message = match raw.rfind(" at line ") {
        Some(cut) => raw[..cut].to_owned(),
        None => raw.to_owned(),
    };
    let hint = if message.contains("unknown field") {
        "remove the field or fix its spelling (`toolgate schema` lists every field)"
    } else if message.contains("missing field") {
        "add the field (`toolgate schema` lists every field)"
    } else if message.contains("unknown variant") {
        "use one of the values listed"
    } else if message.contains("invalid type") {
        "give the value the type the message names"
    } else {
        "fix the YAML syntax at this position"
    };
    (message, hint.to_owned())
}

/// Parses YAML text into an untyped JSON value (`Null` when it does not
/// parse). The benchmarks use it as the baseline cost of reading YAML.
pub fn parse_untyped(text: &str) -> serde_json::Value {
    serde_yaml::from_str(text).unwrap_or_default()
}
