//! Reading a configuration folder: `toolgate.yaml`, `tools.d/*.yaml` and
//! `tool-sets/*.yaml`, each parsed into its typed form.
//!
//! A file that does not parse is reported (with serde_yaml's position) and
//! left out; the other files are still read so every error shows at once.

use std::path::{Path, PathBuf};

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

/// Reads and parses every file of the folder. Parse errors are appended to
/// `diags`; the files that failed are left out of the result. The
/// `openapi:` entries of tool files are read as declarations: importing
/// them is the catalog builder's (see [`RawConfig::add_imported`]).
pub fn load_dir(dir: &Path, diags: &mut Vec<Diagnostic>) -> RawConfig {
    let gateway_path = dir.join(GATEWAY_FILE);
    let gateway = if gateway_path.exists() {
        parse_file(dir, &gateway_path, diags)
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
        .filter_map(|p| parse_file(dir, &p, diags))
        .collect();
    let set_files = yaml_files(dir, SETS_DIR, diags)
        .into_iter()
        .filter_map(|p| parse_file(dir, &p, diags))
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
    parse_text(&file, &text, diags)
}

/// Parses one file's text: YAML syntax first, then the typed form, so that
/// type errors carry the exact path and position of the offending value.
pub fn parse_text<T: FromYaml>(
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
        let tools: Vec<Option<ToolDecl>> = outer
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
        let openapi = outer
            .openapi
            .into_iter()
            .enumerate()
            .map(|(j, v)| ctx.typed(v, &format!("openapi[{j}]")))
            .collect();
        Some(ToolFile {
            credentials: outer.credentials,
            env: outer.env,
            tools,
            mcp_servers,
            openapi,
        })
    }
}

impl RawConfig {
    /// Adds the tool declarations imported from entry `entry` of the
    /// `openapi:` list of tool file `file` (an index of `tool_files`):
    /// each is read like a declared tool, positioned at the entry (so its
    /// errors point there), and the variables they read are declared
    /// `optional` unless the file declares them.
    pub fn add_imported(
        &mut self,
        file: usize,
        entry: usize,
        tools: Vec<serde_yaml::Mapping>,
        env: impl IntoIterator<Item = String>,
        diags: &mut Vec<Diagnostic>,
    ) {
        let Some(loaded) = self.tool_files.get_mut(file) else {
            return;
        };
        for name in env {
            loaded.value.env.entry(name).or_insert(EnvNeed::Optional);
        }
        let at = format!("openapi[{entry}]");
        let mut ctx = Ctx {
            file: &loaded.file,
            spans: std::mem::take(&mut loaded.spans),
            diags,
        };
        for tool in tools {
            let path = format!("tools[{}]", loaded.value.tools.len());
            ctx.spans.alias(&path, &at);
            let decl: Option<ToolDecl> = ctx.typed(serde_yaml::Value::Mapping(tool), &path);
            self.tools_incomplete |= decl.is_none();
            loaded.value.tools.push(decl);
        }
        loaded.spans = ctx.spans;
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
