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
use crate::support::template::{self, TemplateSet};
use crate::tools::tool::mcp::spec::{
    HttpSpec, OAuthSpec, PerRequestHeaders, RESERVED_HEADERS, StdioSpec, ToolFilter, Transport,
    is_glob,
};
use crate::tools::tool::mcp::{Expected, McpRegistry, ServerSpec};
use crate::tools::tool::{Tool, is_valid_name};
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
    /// Checks one server declaration; a valid one becomes a spec.
    fn check(&mut self, mut s: ServerCheck<'_>) {
        let before = s.errors();
        self.check_name(&mut s);
        let (env_keys, header_keys) = match s.decl.transport {
            McpTransport::Stdio => (s.check_stdio(), Vec::new()),
            McpTransport::Http => (Vec::new(), s.check_http()),
        };
        let filter = s.check_tools();
        s.check_durations();
        let pins = s.read_pins();
        if s.errors() != before {
            return;
        }
        let Some(filter) = filter else { return };
        let disabled = s.disabled();
        let transport = match s.decl.transport {
            McpTransport::Stdio => s.stdio_spec(env_keys, disabled.is_some()),
            McpTransport::Http => s.http_spec(header_keys, disabled.is_some()),
        };
        let Some(transport) = transport else { return };
        let decl = s.decl;
        self.specs.push(ServerSpec {
            name: decl.name.clone(),
            transport,
            tools: filter,
            timeout: decl.timeout,
            startup_timeout: decl.startup_timeout.unwrap_or(DEFAULT_STARTUP_TIMEOUT),
            cache_ttl: decl.cache.as_ref().map(|c| c.ttl),
            required: decl.required,
            on_change: decl.on_change,
            pins,
            file: s.file.file.clone(),
            pos: s.at(""),
            disabled,
            sampling: decl.sampling.clone(),
        });
    }

    /// A valid name, declared once.
    fn check_name(&mut self, s: &mut ServerCheck<'_>) {
        let name = &s.decl.name;
        if !is_valid_name(name) {
            s.err(
                ".name",
                format!("MCP server name {name:?} is invalid"),
                "use 1-64 letters, digits, `_` or `-`",
            );
        } else if let Some((other, p)) = self.seen.get(name) {
            s.err(
                ".name",
                format!(
                    "MCP server `{name}` is also declared at {other}:{}:{}",
                    p.line, p.column
                ),
                "rename one of the two servers",
            );
        } else {
            self.seen
                .insert(name.clone(), (s.file.file.clone(), s.at(".name")));
        }
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

/// One server declaration being checked: where it is, what the rest of the
/// configuration says, the templates it compiled and the diagnostics.
struct ServerCheck<'a> {
    dir: &'a Path,
    file: &'a Loaded<RawToolFile>,
    /// Its index in the file's `mcp_servers`.
    index: usize,
    decl: &'a McpServerDecl,
    /// The file's declared variables that are set.
    env_values: &'a BTreeMap<String, String>,
    /// The catalog's other tools and where they are declared.
    tools: &'a HashMap<String, String>,
    diags: &'a mut Vec<Diagnostic>,
    /// Templates over `env` (values of `env` and `headers`).
    templates: TemplateSet,
    /// The variables those templates read.
    env_used: BTreeSet<String>,
}

impl ServerCheck<'_> {
    fn at(&self, p: &str) -> toolgate_config::Pos {
        self.file.pos(&format!("mcp_servers[{}]{p}", self.index))
    }

    fn err(&mut self, p: &str, message: String, hint: &str) {
        let at = self.at(p);
        self.diags
            .push(Diagnostic::error(&self.file.file, at, message, hint));
    }

    /// The pin file's fingerprints (`pins`), checked: a map of tool names
    /// to SHA-256 hex digests.
    fn read_pins(&mut self) -> BTreeMap<String, String> {
        let Some(path) = self.decl.pins.clone() else {
            return BTreeMap::new();
        };
        const HINT: &str = "write it with `toolgate pin SERVER > FILE`: a JSON object of tool names to fingerprints (64 hex digits)";
        let full = self.dir.join(&path);
        let text = match std::fs::read_to_string(&full) {
            Ok(text) => text,
            Err(e) => {
                self.err(
                    ".pins",
                    format!("the pin file {path:?} cannot be read: {e}"),
                    HINT,
                );
                return BTreeMap::new();
            }
        };
        let pins: BTreeMap<String, String> = match serde_json::from_str(&text) {
            Ok(pins) => pins,
            Err(e) => {
                self.diags.push(Diagnostic::error(
                    &full.to_string_lossy(),
                    toolgate_config::Pos {
                        line: e.line(),
                        column: e.column(),
                    },
                    format!(
                        "the pin file of MCP server `{}` is not valid: {e}",
                        self.decl.name
                    ),
                    HINT,
                ));
                return BTreeMap::new();
            }
        };
        for (tool, digest) in &pins {
            if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                self.err(
                    ".pins",
                    format!("the pin file {path:?} gives `{tool}` the fingerprint {digest:?}, not 64 hex digits"),
                    HINT,
                );
            }
        }
        pins
    }

    fn errors(&self) -> usize {
        self.diags.iter().filter(|d| d.is_error()).count()
    }

    /// Compiles the template `source` under `key`; `None` (reported) when
    /// it does not compile or reads anything but a declared `env.*`.
    fn compile(&mut self, key: String, source: &str, p: &str) -> Option<String> {
        self.compile_with(key, source, p, false).map(|(key, _)| key)
    }

    /// [`compile`](Self::compile), where `request.key` and
    /// `request.project` may be read too when `per_request` (headers of an
    /// HTTP server); the flag returned says whether the template reads them.
    fn compile_with(
        &mut self,
        key: String,
        source: &str,
        p: &str,
        per_request: bool,
    ) -> Option<(String, bool)> {
        let mut reads_request = false;
        let vars = match self.templates.add(key.clone(), source.to_owned()) {
            Ok(vars) => vars,
            Err(e) => {
                self.err(
                    p,
                    format!("the template does not compile: {e}"),
                    "fix the minijinja syntax",
                );
                return None;
            }
        };
        for var in vars {
            if per_request && crate::support::template::reads_caller(&var) {
                reads_request = true;
                continue;
            }
            match var.strip_prefix("env.") {
                Some(v) if self.file.value.env.contains_key(v) => {
                    self.env_used.insert(v.to_owned());
                }
                Some(v) => self.err(
                    p,
                    format!("the template reads `env.{v}`, which the file does not declare"),
                    &format!(
                        "add `{v}: optional` (or `required`) under the file's top-level `env`"
                    ),
                ),
                None if per_request => self.err(
                    p,
                    format!("the template reads `{var}`, which does not exist here"),
                    "headers of an MCP server may read `env.<variable>`, `request.key`, `request.project`, `request.subject` and `request.claims.<claim>`",
                ),
                None => self.err(
                    p,
                    format!("the template reads `{var}`, which does not exist here"),
                    "MCP server settings may only read `env.<variable>`",
                ),
            }
        }
        Some((key, reads_request))
    }

    /// Fields of the other transport are errors.
    fn refuse_fields(&mut self, present: &[(bool, &str, &str)], transport: &str) {
        for (is_set, p, field) in present {
            if *is_set {
                self.err(
                    p,
                    format!("`{field}` is only for `transport: {transport}`"),
                    &format!("remove it, or use `transport: {transport}`"),
                );
            }
        }
    }

    /// The stdio fields; returns each `env` variable and its template key.
    fn check_stdio(&mut self) -> Vec<(String, String)> {
        let decl = self.decl;
        self.refuse_fields(
            &[
                (decl.url.is_some(), ".url", "url"),
                (!decl.headers.is_empty(), ".headers", "headers"),
                (decl.oauth.is_some(), ".oauth", "oauth"),
            ],
            "http",
        );
        match &decl.command {
            None => self.err(
                ".transport",
                "a stdio MCP server needs a `command`".into(),
                "add `command:` (the program to run) and its `args`",
            ),
            Some(c) if c.trim().is_empty() => self.err(
                ".command",
                "the command is empty".into(),
                "name the program to run, e.g. `npx` or `/usr/local/bin/server`",
            ),
            Some(_) => {}
        }
        let mut env_keys = Vec::new();
        for (k, v) in &decl.env {
            let valid = !k.is_empty()
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !k.as_bytes()[0].is_ascii_digit();
            let p = format!(".env.{k}");
            if !valid {
                self.err(
                    &p,
                    format!("{k:?} is not a valid environment variable name"),
                    "use letters, digits and `_`, not starting with a digit",
                );
            } else if let Some(key) = self.compile(format!("env.{k}"), v, &p) {
                env_keys.push((k.clone(), key));
            }
        }
        if let Some(cwd) = &decl.cwd
            && !self.dir.join(cwd).is_dir()
        {
            self.err(
                ".cwd",
                format!("the working directory {cwd:?} does not exist"),
                "give a folder relative to the configuration folder, or an absolute path",
            );
        }
        env_keys
    }

    /// The http fields; returns each header, its template key and path.
    fn check_http(&mut self) -> Vec<(HeaderName, String, String, bool)> {
        let decl = self.decl;
        self.refuse_fields(
            &[
                (decl.command.is_some(), ".command", "command"),
                (!decl.args.is_empty(), ".args", "args"),
                (!decl.env.is_empty(), ".env", "env"),
                (decl.cwd.is_some(), ".cwd", "cwd"),
            ],
            "stdio",
        );
        match &decl.url {
            None => self.err(
                ".transport",
                "an http MCP server needs a `url`".into(),
                "add `url:` with the server's MCP endpoint, e.g. http://127.0.0.1:8000/mcp",
            ),
            Some(u) => match url::Url::parse(u) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {}
                _ => self.err(
                    ".url",
                    format!("{u:?} is not an http(s) URL"),
                    "write it like http://127.0.0.1:8000/mcp",
                ),
            },
        }
        let mut header_keys = Vec::new();
        for (k, v) in &decl.headers {
            let p = format!(".headers.{k}");
            match HeaderName::from_bytes(k.as_bytes()) {
                Err(_) => self.err(
                    &p,
                    format!("{k:?} is not a valid header name"),
                    "use letters, digits and `-`",
                ),
                Ok(h) if RESERVED_HEADERS.contains(&h.as_str()) => self.err(
                    &p,
                    format!("the header `{k}` is set by the MCP transport itself"),
                    "remove it",
                ),
                Ok(h) => {
                    if let Some((key, per_request)) =
                        self.compile_with(format!("headers.{k}"), v, &p, true)
                    {
                        header_keys.push((h, key, p, per_request));
                    }
                }
            }
        }
        self.check_oauth();
        header_keys
    }

    /// `oauth`: the variables it reads are declared (and counted as used, so
    /// an unset one disables the server), its URLs and its settings.
    fn check_oauth(&mut self) {
        use toolgate_config::format::McpOAuthDecl;
        let decl = self.decl;
        let Some(oauth) = &decl.oauth else { return };
        if decl
            .headers
            .keys()
            .any(|k| k.eq_ignore_ascii_case("authorization"))
        {
            self.err(
                ".headers.Authorization",
                "an `Authorization` header and `oauth` both authorize the gateway".into(),
                "keep one: remove the header, or remove `oauth`",
            );
        }
        let (p, secret_env) = match oauth {
            McpOAuthDecl::ClientCredentials(cc) => {
                if cc.client_id.trim().is_empty() {
                    self.err(
                        ".oauth.client_id",
                        "the client id is empty".into(),
                        "give the id the authorization server registered for the gateway",
                    );
                }
                (".oauth.client_secret_env", Some(&cc.client_secret_env))
            }
            McpOAuthDecl::AuthorizationCode(ac) => {
                if ac.client_secret_env.is_some() && ac.client_id.is_none() {
                    self.err(
                        ".oauth.client_secret_env",
                        "a client secret without a `client_id`".into(),
                        "give the pre-registered client's `client_id` too, or remove the secret",
                    );
                }
                if let Some(u) = &ac.client_metadata_url
                    && !url::Url::parse(u).is_ok_and(|u| u.scheme() == "https" && u.path() != "/")
                {
                    self.err(
                        ".oauth.client_metadata_url",
                        format!("{u:?} is not an https URL with a path"),
                        "give the https URL where the gateway's client metadata document is published",
                    );
                }
                if ac.redirect_port == 0 {
                    self.err(
                        ".oauth.redirect_port",
                        "the redirect port is 0".into(),
                        "give the port of the redirect URI registered for the gateway (default 8976)",
                    );
                }
                if let Some(f) = &ac.token_file
                    && (f.trim().is_empty() || f.ends_with('/'))
                {
                    self.err(
                        ".oauth.token_file",
                        format!("{f:?} is not a file name"),
                        "give a file relative to the configuration folder, e.g. `.toolgate/oauth/github.json`",
                    );
                }
                (".oauth.client_secret_env", ac.client_secret_env.as_ref())
            }
        };
        if let Some(var) = secret_env {
            if self.file.value.env.contains_key(var) {
                self.env_used.insert(var.clone());
            } else {
                self.err(
                    p,
                    format!("`{var}` is not a variable the file declares"),
                    &format!("add `{var}: required` under the file's top-level `env`"),
                );
            }
        }
    }

    /// The validated `oauth`, its secret read (empty for a disabled server).
    fn oauth_spec(&self) -> Option<OAuthSpec> {
        use toolgate_config::format::McpOAuthDecl;
        let secret = |var: &String| self.env_values.get(var).cloned().unwrap_or_default();
        Some(match self.decl.oauth.as_ref()? {
            McpOAuthDecl::ClientCredentials(cc) => OAuthSpec::ClientCredentials {
                client_id: cc.client_id.clone(),
                client_secret: secret(&cc.client_secret_env),
                scopes: cc.scopes.clone(),
            },
            McpOAuthDecl::AuthorizationCode(ac) => OAuthSpec::AuthorizationCode {
                client_id: ac.client_id.clone(),
                client_secret: ac.client_secret_env.as_ref().map(secret),
                client_metadata_url: ac.client_metadata_url.clone(),
                scopes: ac.scopes.clone(),
                redirect_port: ac.redirect_port,
                token_file: self.dir.join(
                    ac.token_file
                        .clone()
                        .unwrap_or_else(|| format!(".toolgate/oauth/{}.json", self.decl.name)),
                ),
            },
        })
    }

    /// Tool selection and names: the prefix, the patterns, and the names
    /// `include` spells out (too long, or taken by another tool).
    fn check_tools(&mut self) -> Option<ToolFilter> {
        let t = &self.decl.tools;
        let prefix_ok = t
            .prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !prefix_ok || t.prefix.len() > 63 {
            self.err(
                ".tools.prefix",
                format!("the prefix {:?} is invalid", t.prefix),
                "use at most 63 letters, digits, `_` or `-` (tool names are 1-64 of these)",
            );
        }
        let filter = match ToolFilter::new(&t.prefix, &t.include, &t.exclude) {
            Ok(f) => f,
            Err((k, why)) => {
                let p = if k < t.include.len() {
                    format!(".tools.include[{k}]")
                } else {
                    format!(".tools.exclude[{}]", k - t.include.len())
                };
                self.err(
                    &p,
                    format!("the pattern is invalid: {why}"),
                    "use `*` for any characters and `?` for one",
                );
                return None;
            }
        };
        for (k, remote) in t.include.iter().enumerate() {
            if is_glob(remote) || !filter.admits(remote) {
                continue;
            }
            let p = format!(".tools.include[{k}]");
            match filter.local_name(remote) {
                Err(why) => self.err(
                    &p,
                    format!("the name of tool `{remote}` would be too long: {why}"),
                    "use a shorter `tools.prefix`, or remove the tool from `include`",
                ),
                Ok(name) => {
                    if let Some(other) = self.tools.get(&name) {
                        let message = format!(
                            "tool `{name}` of MCP server `{}` collides with the tool `{name}` declared at {other}",
                            self.decl.name
                        );
                        self.err(
                            &p,
                            message,
                            "set a `tools.prefix` on the server, or rename one of the two",
                        );
                    }
                }
            }
        }
        Some(filter)
    }

    fn check_durations(&mut self) {
        let decl = self.decl;
        for (p, value) in [
            (".timeout", decl.timeout),
            (".startup_timeout", decl.startup_timeout),
            (".cache.ttl", decl.cache.as_ref().map(|c| c.ttl)),
        ] {
            if value.is_some_and(|d| d.is_zero()) {
                self.err(
                    p,
                    "the duration is zero".into(),
                    "give a duration such as `30s`, or remove it",
                );
            }
        }
    }

    /// Why the server is disabled (a variable it needs is unset, with a
    /// warning), if it is.
    fn disabled(&mut self) -> Option<String> {
        let missing: Vec<&str> = self
            .env_used
            .iter()
            .filter(|v| !self.env_values.contains_key(v.as_str()))
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return None;
        }
        let names = missing.join(", ");
        self.diags.push(Diagnostic::warning(
            &self.file.file,
            self.at(".name"),
            format!(
                "MCP server `{}` is disabled: environment variable {names} is not set",
                self.decl.name
            ),
            format!("set {names} and reload to enable it"),
        ));
        Some(format!("environment variable {names} is not set"))
    }

    /// Renders the compiled templates with the variables' values (empty
    /// for a disabled server); `None` when one does not render (reported).
    fn render_all<K>(
        &mut self,
        keys: Vec<(K, String, String)>,
        disabled: bool,
    ) -> Option<Vec<(K, String, String)>> {
        let env = std::mem::take(&mut self.templates).finish();
        self.render_with(&env, keys, disabled)
    }

    fn render_with<K>(
        &mut self,
        env: &minijinja::Environment<'static>,
        keys: Vec<(K, String, String)>,
        disabled: bool,
    ) -> Option<Vec<(K, String, String)>> {
        let ctx = minijinja::context! { env => self.env_values };
        let mut out = Vec::with_capacity(keys.len());
        for (k, key, p) in keys {
            let value = if disabled {
                String::new()
            } else {
                match template::render(env, &key, ctx.clone()) {
                    Ok(v) => v,
                    Err(e) => {
                        self.err(
                            &p,
                            format!("the template does not render: {e}"),
                            "fix the template",
                        );
                        return None;
                    }
                }
            };
            out.push((k, value, p));
        }
        Some(out)
    }

    fn stdio_spec(&mut self, env_keys: Vec<(String, String)>, disabled: bool) -> Option<Transport> {
        let keys = env_keys
            .into_iter()
            .map(|(k, key)| {
                let p = format!(".env.{k}");
                (k, key, p)
            })
            .collect();
        let env = self
            .render_all(keys, disabled)?
            .into_iter()
            .map(|(k, v, _)| (k, v))
            .collect();
        let command = self.decl.command.clone().unwrap_or_default();
        // A path is relative to the configuration folder; a bare name is
        // looked up on PATH.
        let command = if command.contains('/') && Path::new(&command).is_relative() {
            self.dir.join(&command).to_string_lossy().into_owned()
        } else {
            command
        };
        Some(Transport::Stdio(StdioSpec {
            command,
            args: self.decl.args.clone(),
            env,
            cwd: self.decl.cwd.as_ref().map(|c| self.dir.join(c)),
        }))
    }

    fn http_spec(
        &mut self,
        header_keys: Vec<(HeaderName, String, String, bool)>,
        disabled: bool,
    ) -> Option<Transport> {
        // Headers reading `request.*` are rendered per call (the caller's
        // key and project); the others once, here.
        let (per_call, fixed): (Vec<_>, Vec<_>) =
            header_keys.into_iter().partition(|(_, _, _, per)| *per);
        let per_request: Vec<(HeaderName, String, String)> = per_call
            .into_iter()
            .map(|(name, key, _, _)| {
                let source = self
                    .decl
                    .headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name.as_str()))
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                (name, key, source)
            })
            .collect();
        let fixed: Vec<(HeaderName, String, String)> =
            fixed.into_iter().map(|(n, k, p, _)| (n, k, p)).collect();
        let templates = std::mem::take(&mut self.templates).finish();
        let mut headers = Vec::new();
        for (name, value, p) in self.render_with(&templates, fixed, disabled)? {
            match HeaderValue::from_str(&value) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    headers.push((name, v));
                }
                Err(_) => {
                    self.err(
                        &p,
                        format!(
                            "the value of header `{name}` is not a valid header value (the value is not shown)"
                        ),
                        "check the variables it reads: no line breaks or control characters",
                    );
                    return None;
                }
            }
        }
        let per_request = (!per_request.is_empty()).then(|| PerRequestHeaders {
            templates,
            env: self.env_values.clone(),
            headers: per_request,
        });
        Some(Transport::Http(HttpSpec {
            url: self.decl.url.clone().unwrap_or_default(),
            headers,
            per_request,
            oauth: self.oauth_spec(),
            credentials: self.decl.credentials.clone(),
        }))
    }
}

/// Validates the `mcp_servers` of every tools file. `reserved` maps the
/// names of the catalog's other tools to where they are declared.
pub(super) fn check_servers(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    reserved: &HashMap<String, String>,
    upstreams: &crate::model::routing::Upstreams,
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
                check_sampling(file, i, decl, upstreams, diags);
                checker.check(ServerCheck {
                    dir: &raw.dir,
                    file,
                    index: i,
                    decl,
                    env_values: &env_values,
                    tools: reserved,
                    diags,
                    templates: TemplateSet::default(),
                    env_used: BTreeSet::new(),
                });
            }
        }
    }
    checker.finish(&raw.tool_files, diags);
    checker.specs
}

/// `sampling`: a model the gateway's routes serve, and a token budget.
fn check_sampling(
    file: &Loaded<RawToolFile>,
    index: usize,
    decl: &McpServerDecl,
    upstreams: &crate::model::routing::Upstreams,
    diags: &mut Vec<Diagnostic>,
) {
    let Some(sampling) = &decl.sampling else {
        return;
    };
    if upstreams.resolve(&sampling.model).is_none() {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos(&format!("mcp_servers[{index}].sampling.model")),
            format!(
                "MCP server `{}` has its sampling requests answered by model `{}`, which no upstream route serves",
                decl.name, sampling.model
            ),
            "name a model that `upstreams` routes (GET /v1/models lists them), or remove `sampling`",
        ));
    }
    if sampling.max_tokens == 0 {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos(&format!("mcp_servers[{index}].sampling.max_tokens")),
            "`sampling.max_tokens` is 0: no answer could be given".to_owned(),
            "give the most tokens one answer may take, e.g. 1024",
        ));
    }
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
