//! A validated MCP server declaration: how to reach the server, which of its
//! tools to offer, and the names they get in the gateway.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use globset::{Glob, GlobMatcher, GlobSet, GlobSetBuilder};
use reqwest::header::{HeaderName, HeaderValue};

use toolgate_config::Pos;

/// One MCP server, validated.
#[derive(Debug)]
pub struct ServerSpec {
    pub name: String,
    pub transport: Transport,
    pub tools: ToolFilter,
    /// Timeout of one call; `None` uses `defaults.tool_timeout`.
    pub timeout: Option<Duration>,
    /// How long starting (spawn or connect, `initialize`, `tools/list`) may take.
    pub startup_timeout: Duration,
    /// Cache results of the tools the server marks `readOnlyHint`.
    pub cache_ttl: Option<Duration>,
    /// The gateway is not ready while this server is down.
    pub required: bool,
    /// What a changed tool definition does.
    pub on_change: toolgate_config::format::OnChange,
    /// The pin file's fingerprints, by the server's tool name (empty
    /// without one).
    pub pins: std::collections::BTreeMap<String, String>,
    /// The file declaring it, and where.
    pub file: String,
    pub pos: Pos,
    /// Why the server is never started (e.g. a variable its headers need is
    /// unset); `None` when it can run.
    pub disabled: Option<String>,
    /// The gateway's model answering the server's sampling requests that
    /// no client of the call can answer (`sampling`); `None`: not answered.
    pub sampling: Option<toolgate_config::format::McpSamplingDecl>,
}

impl ServerSpec {
    /// How the gateway is authorized at the server, when it uses OAuth.
    pub fn oauth(&self) -> Option<&OAuthSpec> {
        match &self.transport {
            Transport::Http(http) => http.oauth.as_ref(),
            Transport::Stdio(_) => None,
        }
    }

    /// `true` when the server is called as each caller (`credentials`),
    /// over sessions of their own.
    pub fn per_caller(&self) -> bool {
        self.credentials().is_some()
    }

    /// Whose token the server is called with (`credentials`, HTTP servers
    /// only), when it is called as each caller.
    pub fn credentials(&self) -> Option<&toolgate_config::format::CredentialsDecl> {
        match &self.transport {
            Transport::Http(http) => http.credentials.as_ref(),
            Transport::Stdio(_) => None,
        }
    }

    /// `true` when the gateway is authorized at the server with OAuth.
    pub fn uses_oauth(&self) -> bool {
        self.oauth().is_some()
    }

    /// `tools.d/x.yaml:3`, as tools report their origin.
    pub fn origin(&self) -> String {
        format!("{}:{}", self.file, self.pos.line)
    }

    /// `true` when `other` declares the same server: everything that shapes
    /// the session or its tools is equal (rendered `env` and header values
    /// included). Where it is declared is not: moving a declaration keeps
    /// its session on reload.
    pub fn same_declaration(&self, other: &ServerSpec) -> bool {
        let transport = match (&self.transport, &other.transport) {
            (Transport::Stdio(a), Transport::Stdio(b)) => {
                a.command == b.command && a.args == b.args && a.env == b.env && a.cwd == b.cwd
            }
            (Transport::Http(a), Transport::Http(b)) => {
                a.url == b.url
                    && a.headers == b.headers
                    && a.oauth == b.oauth
                    && a.credentials == b.credentials
                    && match (&a.per_request, &b.per_request) {
                        (None, None) => true,
                        (Some(x), Some(y)) => x.same_as(y),
                        _ => false,
                    }
            }
            _ => false,
        };
        transport
            && self.name == other.name
            && self.tools.same_as(&other.tools)
            && self.timeout == other.timeout
            && self.startup_timeout == other.startup_timeout
            && self.cache_ttl == other.cache_ttl
            && self.on_change == other.on_change
            && self.pins == other.pins
            && self.disabled == other.disabled
    }
}

/// How the gateway reaches a server.
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio(StdioSpec),
    /// Streamable HTTP.
    Http(HttpSpec),
}

impl Transport {
    pub fn label(&self) -> &'static str {
        match self {
            Transport::Stdio(_) => "stdio",
            Transport::Http(_) => "http",
        }
    }
}

/// Values of `env` and `headers` may hold secrets: they are never printed.
impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio(s) => f
                .debug_struct("Stdio")
                .field("command", &s.command)
                .field("args", &s.args)
                .field(
                    "env",
                    &s.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                )
                .field("cwd", &s.cwd)
                .finish(),
            Transport::Http(h) => f
                .debug_struct("Http")
                .field("url", &h.url)
                .field(
                    "headers",
                    &h.headers
                        .iter()
                        .map(|(k, _)| k.as_str())
                        .chain(
                            h.per_request
                                .iter()
                                .flat_map(|p| p.headers.iter().map(|(k, _, _)| k.as_str())),
                        )
                        .collect::<Vec<_>>(),
                )
                .finish(),
        }
    }
}

pub struct StdioSpec {
    /// The program: a name looked up on `PATH`, or an absolute path.
    pub command: String,
    pub args: Vec<String>,
    /// Variables set for the process, on top of [`PASSED_ENV`].
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
}

pub struct HttpSpec {
    pub url: String,
    /// Headers sent with every request, rendered at load.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Headers that read the caller (`request.key`, `request.project`,
    /// `request.subject`, `request.claims.*`), rendered for each call.
    pub per_request: Option<PerRequestHeaders>,
    /// How the gateway is authorized at the server, when it is (OAuth).
    pub oauth: Option<OAuthSpec>,
    /// Whose token the server is called with (`credentials`): with one,
    /// every caller gets a session of their own, opened and used with the
    /// bearer token the gateway obtains for them ([`crate::McpTool::call`]),
    /// in which the server lists what that caller is offered
    /// ([`crate::McpRegistry::list_as`]); the shared session (the gateway's
    /// own `headers` or `oauth`, optional) lists what callers who have not
    /// connected see.
    pub credentials: Option<toolgate_config::format::CredentialsDecl>,
}

/// `oauth` of an HTTP server, validated. Secrets are never printed.
#[derive(Clone, PartialEq, Eq)]
pub enum OAuthSpec {
    /// The client credentials grant.
    ClientCredentials {
        client_id: String,
        client_secret: String,
        scopes: Vec<String>,
    },
    /// The authorization code grant: a token obtained by
    /// `toolgate mcp login`, kept in `token_file`, refreshed as needed.
    AuthorizationCode {
        client_id: Option<String>,
        client_secret: Option<String>,
        client_metadata_url: Option<String>,
        scopes: Vec<String>,
        redirect_port: u16,
        token_file: PathBuf,
    },
}

impl fmt::Debug for OAuthSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OAuthSpec::ClientCredentials {
                client_id, scopes, ..
            } => f
                .debug_struct("ClientCredentials")
                .field("client_id", client_id)
                .field("scopes", scopes)
                .finish_non_exhaustive(),
            OAuthSpec::AuthorizationCode {
                client_id,
                scopes,
                token_file,
                ..
            } => f
                .debug_struct("AuthorizationCode")
                .field("client_id", client_id)
                .field("scopes", scopes)
                .field("token_file", token_file)
                .finish_non_exhaustive(),
        }
    }
}

/// Header templates rendered for each call, with the caller's API key name
/// and project: a server behind the gateway can authorise per user.
pub struct PerRequestHeaders {
    pub templates: std::sync::Arc<minijinja::Environment<'static>>,
    /// The values of the file's variables the templates may read. Secret.
    pub env: std::collections::BTreeMap<String, String>,
    /// The header, its template's name in `templates`, and its source.
    pub headers: Vec<(HeaderName, String, String)>,
}

impl PerRequestHeaders {
    /// The headers for `call`: `request.key` (the API key's name),
    /// `request.project`, `request.subject` (who calls) and
    /// `request.claims` (the caller's token's claims), each empty when there
    /// is none; a header that renders empty is left out.
    pub fn render(
        &self,
        call: &toolgate::CallContext,
    ) -> Result<Vec<(HeaderName, String)>, String> {
        let ctx = minijinja::context! {
            env => self.env,
            request => minijinja::context! {
                key => call.key.as_deref().unwrap_or_default(),
                project => call.project().unwrap_or_default(),
                subject => call.subject.as_deref().unwrap_or_default(),
                claims => match call.claims.as_deref() {
                    Some(claims) => minijinja::Value::from_serialize(claims),
                    None => minijinja::Value::from_serialize(serde_json::json!({})),
                },
            },
        };
        let mut out = Vec::with_capacity(self.headers.len());
        for (name, template, _) in &self.headers {
            let value = self
                .templates
                .get_template(template)
                .and_then(|t| t.render(ctx.clone()))
                .map_err(|e| match e.detail() {
                    Some(detail) => {
                        format!("header `{name}` does not render: {}: {detail}", e.kind())
                    }
                    None => format!("header `{name}` does not render: {}", e.kind()),
                })?;
            if value.is_empty() {
                continue;
            }
            if HeaderValue::from_str(&value).is_err() {
                return Err(format!(
                    "header `{name}` would not be a valid header value for this caller"
                ));
            }
            out.push((name.clone(), value));
        }
        Ok(out)
    }

    fn same_as(&self, other: &PerRequestHeaders) -> bool {
        self.env == other.env
            && self.headers.len() == other.headers.len()
            && self
                .headers
                .iter()
                .zip(&other.headers)
                .all(|(a, b)| a.0 == b.0 && a.2 == b.2)
    }
}

/// The gateway's own variables a stdio server inherits; everything else it
/// gets must be declared in its `env`, so the gateway's secrets (API keys)
/// do not leak into every server.
pub const PASSED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ",
];

/// Headers the streamable HTTP transport sets itself.
pub const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

/// Which of a server's tools are offered, and their names in the gateway.
#[derive(Debug, Clone)]
pub struct ToolFilter {
    /// Prepended to every tool name.
    pub prefix: String,
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
    /// The include list, when every entry is a plain name.
    literal: Option<Vec<String>>,
    /// The patterns as declared.
    patterns: (Vec<String>, Vec<String>),
}

impl ToolFilter {
    /// Builds a filter; `Err` carries the index into `include` (or into
    /// `exclude`, offset by `include.len()`) of a pattern that does not
    /// compile, and why.
    pub fn new(
        prefix: &str,
        include: &[String],
        exclude: &[String],
    ) -> Result<ToolFilter, (usize, String)> {
        fn set(patterns: &[String], offset: usize) -> Result<Option<GlobSet>, (usize, String)> {
            if patterns.is_empty() {
                return Ok(None);
            }
            let mut b = GlobSetBuilder::new();
            for (i, p) in patterns.iter().enumerate() {
                b.add(Glob::new(p).map_err(|e| (offset + i, e.kind().to_string()))?);
            }
            b.build().map(Some).map_err(|e| (offset, e.to_string()))
        }
        let literal =
            (!include.is_empty() && !include.iter().any(|p| is_glob(p))).then(|| include.to_vec());
        Ok(ToolFilter {
            prefix: prefix.to_owned(),
            include: set(include, 0)?,
            exclude: set(exclude, include.len())?,
            literal,
            patterns: (include.to_vec(), exclude.to_vec()),
        })
    }

    /// `true` when both filters were declared the same way.
    pub fn same_as(&self, other: &ToolFilter) -> bool {
        self.prefix == other.prefix && self.patterns == other.patterns
    }

    /// `true` when the server's tool `remote` is offered.
    pub fn admits(&self, remote: &str) -> bool {
        self.include.as_ref().is_none_or(|s| s.is_match(remote))
            && !self.exclude.as_ref().is_some_and(|s| s.is_match(remote))
    }

    /// The gateway name of the server's tool `remote`: the prefix, then the
    /// name with every character outside `A-Z a-z 0-9 _ -` replaced by `_`.
    /// A name longer than 64 characters is refused, never shortened.
    pub fn local_name(&self, remote: &str) -> Result<String, String> {
        let cleaned: String = remote
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let name = format!("{}{cleaned}", self.prefix);
        if remote.is_empty() {
            Err("the server lists a tool without a name".to_owned())
        } else if name.len() > 64 {
            Err(format!(
                "`{name}` is {} characters long, over the limit of 64",
                name.len()
            ))
        } else {
            Ok(name)
        }
    }

    /// The gateway names of the tools, when the include list names them
    /// all (before the server has listed anything).
    pub fn known_names(&self) -> Option<Vec<String>> {
        let literal = self.literal.as_ref()?;
        Some(
            literal
                .iter()
                .filter(|r| self.admits(r))
                .filter_map(|r| self.local_name(r).ok())
                .collect(),
        )
    }

    /// `true` when the server could offer a tool named `local`.
    pub fn could_provide(&self, local: &str) -> bool {
        if let Some(known) = self.known_names() {
            return known.iter().any(|k| k == local);
        }
        match local.strip_prefix(self.prefix.as_str()) {
            Some(rest) if !rest.is_empty() => self.admits(rest),
            _ => false,
        }
    }

    /// `true` when the glob `pattern` could match one of the server's tools:
    /// exactly when the include list names them all, else when the
    /// pattern's literal beginning agrees with the prefix.
    pub fn could_match(&self, pattern: &str, matcher: &GlobMatcher) -> bool {
        if let Some(known) = self.known_names() {
            return known.iter().any(|k| matcher.is_match(k));
        }
        let literal = literal_start(pattern);
        literal.starts_with(self.prefix.as_str()) || self.prefix.starts_with(literal)
    }
}

/// `true` when a tool-set or filter entry is a glob rather than a name.
pub fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '[', '{'])
}

/// The part of a glob before its first special character.
fn literal_start(pattern: &str) -> &str {
    let end = pattern
        .find(['*', '?', '[', '{', '\\'])
        .unwrap_or(pattern.len());
    &pattern[..end]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn filter(prefix: &str, include: &[&str], exclude: &[&str]) -> ToolFilter {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        ToolFilter::new(prefix, &s(include), &s(exclude)).unwrap()
    }

    #[test]
    fn include_and_exclude_select_tools() {
        let f = filter("e_", &["get-*", "echo"], &["get-env"]);
        assert!(f.admits("echo"));
        assert!(f.admits("get-sum"));
        assert!(!f.admits("get-env"));
        assert!(!f.admits("toggle"));
        let all = filter("", &[], &["secret*"]);
        assert!(all.admits("anything"));
        assert!(!all.admits("secret_key"));
    }

    #[test]
    fn names_are_prefixed_cleaned_and_never_silently_cut() {
        let f = filter("time_", &[], &[]);
        assert_eq!(
            f.local_name("get_current_time").unwrap(),
            "time_get_current_time"
        );
        assert_eq!(
            f.local_name("files/read.all").unwrap(),
            "time_files_read_all"
        );
        let long = "x".repeat(60);
        let err = f.local_name(&long).unwrap_err();
        assert!(err.contains("65 characters"), "{err}");
        assert!(f.local_name(&"x".repeat(59)).is_ok());
    }

    #[test]
    fn literal_includes_are_known_before_connecting() {
        let f = filter("everything_", &["echo", "get-sum"], &[]);
        assert_eq!(
            f.known_names().unwrap(),
            ["everything_echo", "everything_get-sum"]
        );
        assert!(f.could_provide("everything_echo"));
        assert!(!f.could_provide("everything_toggle"));
        let m = Glob::new("everything_*").unwrap().compile_matcher();
        assert!(f.could_match("everything_*", &m));
        let m = Glob::new("*sum").unwrap().compile_matcher();
        assert!(f.could_match("*sum", &m));
        let m = Glob::new("*image").unwrap().compile_matcher();
        assert!(!f.could_match("*image", &m));
    }

    #[test]
    fn globs_are_checked_against_the_prefix_before_connecting() {
        let f = filter("everything_", &[], &[]);
        assert!(f.known_names().is_none());
        assert!(f.could_provide("everything_echo"));
        assert!(!f.could_provide("other_echo"));
        assert!(!f.could_provide("everything_"));
        let m = |p: &str| Glob::new(p).unwrap().compile_matcher();
        assert!(f.could_match("everything_*", &m("everything_*")));
        assert!(f.could_match("every*", &m("every*")));
        assert!(f.could_match("*", &m("*")));
        assert!(!f.could_match("time_*", &m("time_*")));
        let bare = filter("", &[], &[]);
        assert!(bare.could_match("time_*", &m("time_*")));
        assert!(bare.could_provide("anything"));
    }
}
