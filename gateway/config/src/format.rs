//! The YAML formats, as typed structs.
//!
//! Every struct denies unknown fields, so a typo is an error with a position
//! rather than a silently ignored key. `toolgate schema` renders these types
//! as a JSON Schema for editors.

use std::collections::BTreeMap;
use std::time::Duration;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `toolgate.yaml`: the gateway itself.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayFile {
    /// Address the server listens on, e.g. `127.0.0.1:8080`. The CLI's
    /// `--listen` overrides it.
    #[serde(default)]
    pub listen: Option<String>,
    /// Defaults applied to every request and tool call.
    #[serde(default)]
    pub defaults: Defaults,
    /// Limits that protect the gateway.
    #[serde(default)]
    pub limits: Limits,
    /// OpenAI-compatible model servers. When none is declared,
    /// `OPENAI_BASE_URL` / `OPENAI_API_KEY` define one named `default` that
    /// every model routes to.
    #[serde(default)]
    pub upstreams: Vec<UpstreamDecl>,
    /// Which upstream (and formatter) serves which model, first match wins.
    #[serde(default)]
    pub models: Vec<ModelRoute>,
    /// The builtin tools (Rust functions shipped with the gateway): which
    /// are offered, and their settings.
    #[serde(default)]
    pub builtins: BuiltinsDecl,
    /// API keys. With none, the API is open (bind it to a private
    /// address); with at least one, every endpoint but `/healthz` (and the protected-resource metadata) needs
    /// `Authorization: Bearer <key>`.
    #[serde(default)]
    pub auth: AuthDecl,
    /// The audit log: one JSON line per tool call. Off unless set.
    #[serde(default)]
    pub audit: Option<AuditDecl>,
    /// Reloading the configuration while the gateway runs.
    #[serde(default)]
    pub reload: ReloadDecl,
    /// Stopping the gateway (SIGTERM, SIGINT).
    #[serde(default)]
    pub shutdown: ShutdownDecl,
    /// Checks on what tools return (and on what goes out to them), for
    /// every call from every face.
    #[serde(default)]
    pub guards: GuardsDecl,
    /// Rules over the caller, the tool and its arguments, checked for
    /// every call from every face (the first that matches decides).
    #[serde(default)]
    pub policies: Vec<PolicyDecl>,
    /// Calls held until a person approves them (policies with `action:
    /// approve`, and destructive tools when `destructive` is set): how long
    /// they wait, how many may, and who may decide.
    #[serde(default)]
    pub approvals: ApprovalsDecl,
    /// The MCP endpoint: every tool set served as an MCP server at
    /// `/mcp/{tool_set}` (and the caller's default set at `/mcp`).
    #[serde(default)]
    pub mcp: McpEndpointDecl,
    /// What every HTTP endpoint accepts from web browsers: the pages
    /// (`Origin`) that may call it, and the `Host` names an open gateway
    /// answers to (against DNS rebinding).
    #[serde(default)]
    pub http: HttpAccessDecl,
    /// State shared by replicas (rate limits, result caches, learned
    /// formatters). Without it each process keeps its own. Read at start:
    /// a reload that changes it takes effect at the next restart.
    #[serde(default)]
    pub state: StateDecl,
    /// Traces exported with OpenTelemetry (OTLP over HTTP). Off unless set
    /// here or by the standard `OTEL_EXPORTER_OTLP_ENDPOINT` variables.
    /// Read at start.
    #[serde(default)]
    pub telemetry: TelemetryDecl,
    /// The console: pages at `/console` to see the catalog, try tools,
    /// run the tool loop and read recent calls. Off unless enabled.
    #[serde(default)]
    pub console: ConsoleDecl,
    /// Tool search (`find_tools` and `preload`): how a request is matched
    /// to tools. Without a model, by words alone.
    #[serde(default)]
    pub search: SearchDecl,
    /// Upstream accounts of the people who call: tools and MCP servers
    /// declared with `credentials` act as the calling user, with a token
    /// the user connected (OAuth authorization code, kept encrypted) or one
    /// obtained for them by token exchange.
    #[serde(default)]
    pub connections: Option<ConnectionsDecl>,
    /// What model calls cost and who spent it: prices, where the counts
    /// are kept, and budgets that stop spending past a limit.
    #[serde(default)]
    pub spend: SpendDecl,
}

/// `connections`: how users connect their upstream accounts, and where the
/// gateway keeps their tokens.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionsDecl {
    /// The gateway's URL as a user's browser reaches it, e.g.
    /// `https://gateway.example.com`: connect links start there, and the
    /// authorization servers redirect to `<public_url>/connect/callback`
    /// (the redirect URI to register).
    pub public_url: String,
    /// Environment variable holding the key that encrypts stored tokens
    /// (32 random bytes, base64 or hex: `openssl rand -base64 32`).
    pub key_env: String,
    /// Environment variable holding the key used before the current one:
    /// tokens it encrypted are still read, and written again under the
    /// current key (rotation).
    #[serde(default)]
    pub previous_key_env: Option<String>,
    /// Folder of the embedded token store, relative to the configuration
    /// folder; default `.toolgate/connections`. With `state.redis`, tokens
    /// are kept in Redis instead, for every replica.
    #[serde(default)]
    pub store: Option<String>,
    /// How long a connect link is valid; default 10 minutes.
    #[serde(default = "default_link_ttl", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub link_ttl: Duration,
    /// Upstream accounts users connect once (OAuth 2.1 authorization code
    /// with PKCE), by the name `credentials: {per_user: NAME}` uses.
    #[serde(default)]
    pub oauth: IndexMap<String, ConnectionDecl>,
    /// Token exchanges (RFC 8693): the caller's bearer token traded at an
    /// authorization server for one the upstream accepts, by the name
    /// `credentials: {token_exchange: NAME}` uses.
    #[serde(default)]
    pub exchange: IndexMap<String, ExchangeDecl>,
}

fn default_link_ttl() -> Duration {
    Duration::from_secs(600)
}

/// One upstream account users connect (`connections.oauth.NAME`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConnectionDecl {
    /// The authorization server's issuer URL; its endpoints are read from
    /// its metadata (`/.well-known/oauth-authorization-server`, else
    /// `/.well-known/openid-configuration`) unless both are given below.
    pub issuer: String,
    /// The authorization endpoint, instead of the metadata's.
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// The token endpoint, instead of the metadata's.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// The gateway's client id at that server.
    pub client_id: String,
    /// Environment variable holding the client's secret (a confidential
    /// client); without it the gateway is a public client (PKCE only).
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// Scopes to ask for.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The resource indicator (RFC 8707) of the upstream the token is for.
    #[serde(default)]
    pub resource: Option<String>,
}

/// One token exchange (`connections.exchange.NAME`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExchangeDecl {
    /// The authorization server's issuer URL (its token endpoint is read
    /// from its metadata) ...
    #[serde(default)]
    pub issuer: Option<String>,
    /// ... or its token endpoint.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// The gateway's client id at that server.
    pub client_id: String,
    /// Environment variable holding the client's secret.
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// The `audience` to ask for (the upstream's name at that server).
    #[serde(default)]
    pub audience: Option<String>,
    /// The `resource` to ask for (the upstream's URL).
    #[serde(default)]
    pub resource: Option<String>,
    /// Scopes to ask for.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// Whose credentials a file's HTTP tools, or an MCP server, use upstream.
/// Without `credentials`, the gateway's own (what the headers, `oauth` or
/// `auth_env` say), for every caller.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CredentialsDecl {
    /// The calling user's own token for the upstream account named in
    /// `connections.oauth`: each user connects once; a user who has not
    /// gets an error with a link to connect.
    PerUser(String),
    /// A token obtained for the caller by the token exchange named in
    /// `connections.exchange`, from the bearer token the caller came with.
    TokenExchange(String),
    /// The caller's own bearer token (a JWT `auth.jwt` accepted), sent as
    /// is: only for an upstream that trusts the same issuer.
    Forward,
}

/// `http`: one rule for every endpoint about browsers. A web page can send
/// a request to any address, the gateway on 127.0.0.1 included; these
/// settings say which pages and names are the gateway's own.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct HttpAccessDecl {
    /// Browser origins (`https://app.example.com`, `https://app.example.com:8443`,
    /// `http://tools.internal:*` for any port) whose pages may call the
    /// gateway, besides pages of this machine (`localhost`, `127.0.0.1`,
    /// `[::1]`, any port) and pages the gateway serves itself (same
    /// origin). A request carrying any other `Origin` is refused (403);
    /// requests without `Origin` (every non-browser client) are not
    /// affected.
    pub allowed_origins: Vec<String>,
    /// `Host` values (`gateway.internal`, or `gateway.internal:8080` for
    /// one port) accepted when no API keys are configured, besides
    /// loopback names. With API keys, the key is the protection and any
    /// `Host` is accepted. `/healthz`, `/readyz` and `/metrics` answer to
    /// any `Host`.
    pub allowed_hosts: Vec<String>,
}

/// `console`: the gateway's pages for people.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleDecl {
    /// Serve `/console`. With API keys, only keys whose `console` is `own`
    /// or `all` may use it.
    pub enabled: bool,
    /// How many recent tool calls the console keeps to show (in memory,
    /// arguments redacted as the audit log writes them and cut at 2,048 characters).
    /// Read at start, 0 to 10000; 0 keeps none.
    pub recent_calls: usize,
    /// An older spelling of `http.allowed_hosts`, which it adds to (for
    /// every endpoint, not only the console).
    pub allowed_hosts: Vec<String>,
}

impl Default for ConsoleDecl {
    fn default() -> Self {
        ConsoleDecl {
            enabled: false,
            recent_calls: 100,
            allowed_hosts: Vec::new(),
        }
    }
}

/// `search`: what tool search ranks with besides words.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SearchDecl {
    /// A folder holding a static embedding model in the model2vec layout
    /// (`model.safetensors`, `tokenizer.json`, `config.json`), relative to
    /// the configuration folder, e.g. the `potion-base-2M` that `make
    /// search-model` fetches. Tool search then ranks by meaning as well as
    /// by words, so that a request finds a tool it shares no word with.
    /// Read at start and at each reload.
    pub model: Option<String>,
}

/// What an API key may do with the console.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConsoleAccess {
    /// No use of the console.
    #[default]
    None,
    /// The console, showing the key's tool sets and its own recent calls.
    Own,
    /// The console, showing the key's tool sets and every key's recent calls.
    All,
}

/// `state`: where replicas share what they count and learn.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateDecl {
    /// A Redis (or Valkey) server shared by every replica.
    #[serde(default)]
    pub redis: Option<RedisDecl>,
    /// Folder of the embedded store of the MCP tool definitions the
    /// gateway trusts (pins, and changes accepted), relative to the
    /// configuration folder; default `.toolgate/pins`. A restart trusts
    /// what was trusted before it. With `redis`, pins are kept in Redis
    /// instead, for every replica.
    #[serde(default)]
    pub pins: Option<String>,
}

/// `state.redis`: the shared Redis.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisDecl {
    /// Environment variable holding the URL, e.g. `redis://redis:6379/0`
    /// (`rediss://` for TLS; a password goes in the URL, hence a variable).
    pub url_env: String,
    /// Prefix of every key the gateway writes, so several gateways (or
    /// other programs) can share one Redis.
    #[serde(default = "default_redis_prefix")]
    pub prefix: String,
    /// Longest wait for one Redis operation; a slower answer counts as
    /// Redis being unavailable.
    #[serde(default = "default_redis_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// What rate limits do while Redis is unavailable: `local` (each
    /// replica counts on its own), `open` (no rate limits) or `closed`
    /// (refuse what a rate limit applies to, 503). Caches and learned
    /// formatters always fall back to the replica's own.
    #[serde(default)]
    pub on_unavailable: Unavailable,
    /// Largest cached tool result stored in Redis, in bytes of JSON; larger
    /// results are cached by the replica alone.
    #[serde(default = "default_redis_max_value_bytes")]
    pub max_value_bytes: usize,
}

/// `state.redis.on_unavailable`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unavailable {
    /// Each replica enforces the limits on its own (a key may get up to
    /// its limit from every replica).
    #[default]
    Local,
    /// No rate limits until Redis is back.
    Open,
    /// Requests and tool calls under a rate limit are refused (503).
    Closed,
}

fn default_redis_prefix() -> String {
    "toolgate:".into()
}

fn default_redis_timeout() -> Duration {
    Duration::from_millis(250)
}

fn default_redis_max_value_bytes() -> usize {
    1 << 20
}

/// `telemetry`: trace export.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryDecl {
    /// OTLP over HTTP.
    #[serde(default)]
    pub otlp: Option<OtlpDecl>,
}

/// `telemetry.otlp`: where traces go.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpDecl {
    /// The collector's OTLP/HTTP base address, e.g.
    /// `http://otel-collector:4318` (traces are posted to `/v1/traces`).
    /// Default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `http/protobuf` (default) or `http/json`.
    #[serde(default)]
    pub protocol: OtlpProtocol,
    /// The `service.name` of the traces; default `OTEL_SERVICE_NAME`, else
    /// `toolgate`.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Share of traces recorded when the client sent no `traceparent`
    /// (0.0-1.0); a client's sampling decision is followed.
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
}

/// `telemetry.otlp.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum OtlpProtocol {
    #[default]
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "http/json")]
    HttpJson,
}

fn default_sample_ratio() -> f64 {
    1.0
}

/// `mcp`: how the gateway serves tool sets to MCP clients.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpEndpointDecl {
    /// Serve `/mcp` and `/mcp/{tool_set}`.
    pub enabled: bool,
    /// Environment variable holding the secret (32 characters or more)
    /// that signs MCP session ids. Replicas given the same secret accept
    /// each other's sessions, so a load balancer needs no affinity.
    /// Without it, each process signs with a random secret of its own.
    pub session_secret_env: Option<String>,
    /// Environment variable holding the URL other replicas reach this one
    /// at (e.g. `http://10.0.0.5:8080`, from the pod's IP). A 2026-07-28
    /// client's answer to a call parked on this replica (an upstream
    /// server asked in the middle of it) that reaches another replica is
    /// forwarded here. Without it, such an answer is refused there and
    /// the client calls again.
    pub replica_url_env: Option<String>,
    /// An older spelling of `http.allowed_hosts`, which it adds to (for
    /// every endpoint, not only MCP's).
    pub allowed_hosts: Vec<String>,
    /// An older spelling of `http.allowed_origins`, which it adds to (for
    /// every endpoint, not only MCP's).
    pub allowed_origins: Vec<String>,
    /// How long a 2026-07-28 client may keep a tools list before asking
    /// again (`ttlMs`); clients listening for changes hear of reloads at
    /// once.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub list_ttl: Duration,
    /// MCP sessions (protocol 2025-11-25 and older) this process holds at
    /// once; a client asking for one more gets 503 with `Retry-After`. A
    /// session idle for five minutes is closed.
    pub max_sessions: usize,
}

impl Default for McpEndpointDecl {
    fn default() -> Self {
        McpEndpointDecl {
            enabled: true,
            session_secret_env: None,
            replica_url_env: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            list_ttl: Duration::from_secs(10),
            max_sessions: 4096,
        }
    }
}

/// `auth`: the API keys clients present.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthDecl {
    /// The keys; each needs `sha256` (the hex SHA-256 of the key, e.g.
    /// `printf %s "$KEY" | sha256sum`) or `key_env` (a variable holding the
    /// key itself).
    #[serde(default)]
    pub keys: Vec<ApiKeyDecl>,
    /// Bearer tokens from an OAuth authorization server (signed JWTs),
    /// accepted besides the keys: a valid token acts as the key its claim
    /// names.
    #[serde(default)]
    pub jwt: Option<JwtDecl>,
}

/// `auth.jwt`: which tokens are valid, and which key each acts as.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JwtDecl {
    /// The `iss` a token must carry (the authorization server's URL); also
    /// named in the protected-resource metadata.
    pub issuer: String,
    /// The `aud` a token must carry (this gateway).
    pub audience: String,
    /// Where the issuer's public keys are: a JWKS URL (fetched at start and
    /// again when a token names an unknown key, at most every 30 seconds)...
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// ...or a JWKS file, relative to the configuration folder.
    #[serde(default)]
    pub jwks_file: Option<String>,
    /// The claim whose value names the API key (in `auth.keys`) a token
    /// acts as: its tool sets, limits and projects apply.
    #[serde(default = "default_key_claim")]
    pub key_claim: String,
}

fn default_key_claim() -> String {
    "toolgate_key".to_owned()
}

/// One API key.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyDecl {
    /// Who holds the key, in logs and the audit log: 1-64 of
    /// `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// Hex SHA-256 of the key (64 hex digits); the key itself is never
    /// written in the configuration.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Environment variable holding the key itself.
    #[serde(default)]
    pub key_env: Option<String>,
    /// Tool sets the key may use; `"*"` for all. Listings show only these.
    #[serde(default = "all_sets")]
    pub tool_sets: Vec<String>,
    /// The set used when a request names none; default: the gateway's
    /// default set when the key may use it, else no gateway tools.
    #[serde(default)]
    pub default_tool_set: Option<String>,
    /// Rate limits of this key.
    #[serde(default)]
    pub limits: KeyLimitsDecl,
    /// The projects (workspace sub-folders) the key may use, shared with
    /// every key that lists them. A request naming none in
    /// `X-Toolgate-Project` gets the first; naming another is refused
    /// (403). Without it, the key works in a folder of its own,
    /// `key-<name>`, and may name no project. `"*"`: any project no key
    /// lists, and the whole workspace when it names none.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Whether the key may use the console (`none`, `own`, `all`).
    #[serde(default)]
    pub console: ConsoleAccess,
    /// The key may approve or refuse calls that wait for approval (through
    /// `/v1/approvals` and the console).
    #[serde(default)]
    pub approver: bool,
}

fn all_sets() -> Vec<String> {
    vec!["*".to_owned()]
}

/// Rate limits of one key (a token bucket: the full amount may be used at
/// once, then it refills evenly over the minute).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KeyLimitsDecl {
    /// Requests per minute, to any endpoint; beyond it, 429 with `Retry-After`.
    #[serde(default)]
    pub requests_per_minute: Option<u32>,
    /// Tool calls per minute (chat loops, `/v1/tools/{name}/invoke`, the
    /// MCP face's calls, prompts and resources); beyond it a call fails with
    /// `rate_limited` (429 from the tool API).
    #[serde(default)]
    pub tool_calls_per_minute: Option<u32>,
    /// Tool loops (chat requests with gateway tools, sub-agents included)
    /// this key may run at once; beyond it, 503 with `Retry-After`.
    #[serde(default)]
    pub max_concurrent_loops: Option<u32>,
    /// Streaming responses this key may have open at once.
    #[serde(default)]
    pub max_concurrent_streams: Option<u32>,
}

/// `audit`: where audit lines go and what they show of the arguments.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditDecl {
    /// A file (relative to the configuration folder), appended to; `-` for
    /// standard output.
    pub path: String,
    /// What a line shows of a call's arguments. Properties a tool's schema
    /// marks `writeOnly: true` (or `x-secret: true`) are never written.
    #[serde(default)]
    pub arguments: AuditArguments,
}

/// How arguments appear in the audit log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditArguments {
    /// The arguments, secret properties replaced by `"[redacted]"`.
    #[default]
    Redacted,
    /// Only a SHA-256 of the redacted arguments (canonical JSON).
    Digest,
    /// Nothing.
    None,
}

/// `reload`: the configuration folder is watched and reloaded on change
/// (and on SIGHUP); an invalid change is logged and the running
/// configuration stays.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReloadDecl {
    /// Watch `toolgate.yaml`, `tools.d/` and `tool-sets/` for changes.
    pub watch: bool,
    /// Quiet time after the last change before reloading, so a burst of
    /// writes is one reload.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub debounce: Duration,
}

impl Default for ReloadDecl {
    fn default() -> Self {
        ReloadDecl {
            watch: true,
            debounce: Duration::from_millis(300),
        }
    }
}

/// One rule of `policies`: when its expression holds for a call, the call
/// is allowed or denied (the first rule that matches decides; a call no
/// rule matches is allowed).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PolicyDecl {
    /// Names the rule in refusals, logs and metrics.
    pub name: String,
    /// The tools it applies to: names or globs (`file_*`); all when empty.
    #[serde(default)]
    pub tools: Vec<String>,
    /// A CEL expression over `tool` (its name), `args` (the arguments, a
    /// map) and `caller` (`key`: the API key's name or null, `project`,
    /// `tool_set`), e.g. `has(args.path) && args.path.startsWith("/etc")`.
    /// An expression that cannot be evaluated for a call (a missing key)
    /// refuses the call.
    #[serde(rename = "when")]
    pub condition: String,
    pub action: PolicyAction,
    /// What the model (or client) is told when the rule denies a call.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What a matching policy does.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PolicyAction {
    /// The call goes on (later rules are not checked).
    Allow,
    /// The call is refused, with the rule's reason.
    Deny,
    /// The call is held until a person with an `approver` key approves
    /// this exact call (same caller, tool and arguments); refused, or left
    /// unanswered past `approvals.wait`, it does not run. Later rules are
    /// not checked.
    Approve,
    /// The call's arguments are written to the audit log (and the
    /// console's recent calls) as a SHA-256 digest only. Decides nothing:
    /// the rules after it are checked as if it were not there.
    Redact,
}

/// `approvals`: calls held for a person's decision.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsDecl {
    /// How long a held call waits for a decision before the model is told
    /// it was not run (the request stays open meanwhile).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub wait: Duration,
    /// How long a request for approval stays open: an approval given after
    /// the call stopped waiting lets the same call (same caller, tool,
    /// arguments and policies) run once, if it comes again within this time.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub valid_for: Duration,
    /// The most calls waiting for approval at once, over every caller;
    /// beyond, a call that needs one is refused.
    pub max_pending: usize,
    /// Tools whose MCP annotations say `destructiveHint: true` need an
    /// approval for every call (checked after the policies: an `allow` rule
    /// does not lift it).
    pub destructive: bool,
    /// Folder of the embedded store of the requests for approval (open and
    /// decided, until they expire), relative to the configuration folder;
    /// default `.toolgate/approvals`. A restart keeps them: a request
    /// pending before it can be decided after it, an approval given
    /// before it lets the call run after it. With `state.redis`, they are
    /// kept in Redis instead, for every replica. Read at start.
    pub store: Option<String>,
}

impl Default for ApprovalsDecl {
    fn default() -> Self {
        ApprovalsDecl {
            wait: Duration::from_secs(120),
            valid_for: Duration::from_secs(15 * 60),
            max_pending: 100,
            destructive: false,
            store: None,
        }
    }
}

/// `guards`: checks on every tool result before the model (or an MCP
/// client) sees it, and on every call's arguments before they leave.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GuardsDecl {
    /// Secrets in a result (API keys, tokens, passwords and private keys:
    /// the common token formats and Betterleaks' rules of some 460 kinds
    /// of secret): `redact` by default.
    pub secrets: GuardAction,
    /// Secrets in a call's arguments, going out to an API or server: `log`
    /// by default (an agent sending the user's own token is often the
    /// point).
    pub secrets_in_arguments: GuardAction,
    /// Text in a result that reads like instructions to the model ("ignore
    /// previous instructions", a forged system turn): `mark` by default.
    pub injection: GuardAction,
    /// Whether `injection` also asks the injection model built into the
    /// gateway (a linear classifier of the words and word pairs of each
    /// window of 128 tokens, run in the process, tens of microseconds per
    /// 2,000 characters). On by default: on two public sets of indirect
    /// injections the guard then finds 50% and 37% of them, where the
    /// heuristics alone find 20% and 3%, and flags 0.7% and 1.8% of
    /// ordinary results (`make bench-guards`). `false` keeps the
    /// heuristics alone.
    pub injection_model: bool,
    /// A prompt-injection classifier served over HTTP, asked about every
    /// successful result besides the built-in heuristics. Off unless set.
    pub classifier: Option<ClassifierDecl>,
}

impl Default for GuardsDecl {
    fn default() -> Self {
        GuardsDecl {
            secrets: GuardAction::Redact,
            secrets_in_arguments: GuardAction::Log,
            injection: GuardAction::Mark,
            injection_model: true,
            classifier: None,
        }
    }
}

/// `guards.classifier`: a text-classification endpoint in the shape of
/// Hugging Face's (Text Embeddings Inference `/predict`, the Inference API):
/// `POST {"inputs": ["text", ...]}` answered with, for each text, a list
/// of `{"label", "score"}`. A result is sent cut in pieces of 2,000
/// characters (at most 16 pieces; beyond, the rest is not classified and
/// that is logged).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassifierDecl {
    /// The endpoint, e.g. `http://127.0.0.1:8088/predict`.
    pub url: String,
    /// The label that means an injection (compared without case).
    #[serde(default = "injection_label")]
    pub label: String,
    /// The score of `label`, in any piece, from which a result is flagged.
    #[serde(default = "half")]
    pub threshold: f64,
    /// How long one classification may take.
    #[serde(default = "two_seconds", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// What a flagged result gets: `mark` (default), `block` or `log`.
    #[serde(default = "mark")]
    pub action: GuardAction,
    /// A classifier that fails (unreachable, an error, an answer of
    /// another shape, too slow): `pass` lets the result through with a
    /// warning in the log (default), `block` fails the call.
    #[serde(default)]
    pub on_error: ClassifierFailure,
    /// Environment variable holding a bearer token for the endpoint.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

fn injection_label() -> String {
    "INJECTION".to_owned()
}

fn half() -> f64 {
    0.5
}

fn two_seconds() -> Duration {
    Duration::from_secs(2)
}

fn mark() -> GuardAction {
    GuardAction::Mark
}

/// What a failing classifier does to a result.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ClassifierFailure {
    /// The result goes on; the failure is logged.
    #[default]
    Pass,
    /// The call fails, saying the result could not be checked.
    Block,
}

/// What a guard does with what it finds.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GuardAction {
    /// The call fails with a message saying why (nothing of it is passed on).
    Block,
    /// Each finding is replaced by a placeholder naming its kind.
    Redact,
    /// The result is passed on with a note first, which the model reads.
    Mark,
    /// The result is passed on unchanged; the finding is logged.
    Log,
    /// No check.
    Off,
}

/// `shutdown`: how the gateway stops.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownDecl {
    /// After SIGTERM, how long the gateway goes on serving while `/readyz`
    /// answers 503 (and every answer says `Connection: close`), so load
    /// balancers stop sending before the listener closes; `0s` closes at
    /// once. Set it a little above the readiness probe's period.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub drain_delay: Duration,
    /// How long requests in flight (streams included) may take to finish
    /// after SIGTERM/SIGINT; what is still open then is closed.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub grace: Duration,
}

impl Default for ShutdownDecl {
    fn default() -> Self {
        ShutdownDecl {
            drain_delay: Duration::ZERO,
            grace: Duration::from_secs(30),
        }
    }
}

/// An OpenAI-compatible upstream.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamDecl {
    pub name: String,
    /// The protocol the upstream speaks.
    #[serde(default)]
    pub protocol: ModelProtocol,
    /// Base URL including the API's version: `https://api.openai.com/v1`,
    /// `https://api.anthropic.com/v1`,
    /// `https://generativelanguage.googleapis.com/v1beta`. `{model}` in it
    /// stands for the model name (Azure's
    /// `https://NAME.openai.azure.com/openai/deployments/{model}`).
    pub base_url: String,
    /// Environment variable holding the API key, sent as the protocol
    /// sends it (`Authorization: Bearer`, Anthropic's `x-api-key`,
    /// Google's `x-goog-api-key`, Azure's `api-key`).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Azure OpenAI (with `openai_chat` or `openai_responses`): the
    /// `api-version` of every call; the key goes in an `api-key` header.
    #[serde(default)]
    pub azure: Option<AzureDecl>,
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response.
    #[serde(default = "default_read_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub read_timeout: Duration,
    /// Longest time one model call may take in all, from sending the
    /// request (retries included) to the last byte of the answer; an
    /// upstream that trickles its answer is cut off at this deadline.
    #[serde(default = "default_total_timeout", with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    #[serde(default)]
    pub retries: RetryDecl,
}

/// The protocol of a model upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelProtocol {
    /// OpenAI's chat completions (`POST {base_url}/chat/completions`),
    /// and every server that speaks it.
    #[default]
    OpenaiChat,
    /// OpenAI's Responses (`POST {base_url}/responses`).
    OpenaiResponses,
    /// Anthropic's Messages (`POST {base_url}/messages`).
    Anthropic,
    /// Google's Gemini (`POST {base_url}/models/{model}:generateContent`).
    Gemini,
}

/// Azure OpenAI's way of calling.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AzureDecl {
    /// The `api-version` query parameter, e.g. `2024-10-21`.
    pub api_version: String,
}

/// The total deadline of one model call when the upstream sets none.
pub fn default_total_timeout() -> Duration {
    Duration::from_secs(600)
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(5)
}

fn default_read_timeout() -> Duration {
    Duration::from_secs(120)
}

/// Retries of upstream requests on 429, 5xx and connection errors, with
/// exponential backoff that honours `Retry-After`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryDecl {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub initial_backoff: Duration,
    /// Longest wait between attempts (also caps `Retry-After`).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub max_backoff: Duration,
}

impl Default for RetryDecl {
    fn default() -> Self {
        RetryDecl {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// A model route.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelRoute {
    /// The model name clients ask for: exact (`gpt-4o-mini`), a glob
    /// (`llama-*`), or an alias of your own (`fast`, with `upstream_model`).
    pub model: String,
    /// The upstream that serves it (or `targets`, for several).
    #[serde(default)]
    pub upstream: Option<String>,
    /// The name sent upstream; default: the name the client asked for.
    #[serde(default)]
    pub upstream_model: Option<String>,
    /// Several deployments that serve the model, in place of `upstream`:
    /// each request goes to one of the lowest `priority` by `weight`, and
    /// on a connection error, a timeout, 429 or 5xx to the next (never
    /// once an answer has begun, never on another 4xx). A conversation
    /// whose reasoning state one target made goes back to that target.
    #[serde(default)]
    pub targets: Vec<TargetDecl>,
    /// When a failing target of `targets` is left alone for a while.
    #[serde(default)]
    pub cooldown: CooldownDecl,
    /// How tools are given to the model.
    #[serde(default)]
    pub formatter: FormatterKind,
    /// A structured-prompt template file (minijinja), relative to the
    /// configuration folder; default: the shipped template.
    #[serde(default)]
    pub template: Option<String>,
    /// What the model costs, in US dollars per million tokens; default:
    /// the shipped price table's entry for the model name sent upstream
    /// (none: its cost is unknown, counted in tokens only).
    #[serde(default)]
    pub price: Option<PriceDecl>,
}

/// A model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PriceDecl {
    /// An input token (neither read from nor written to a prompt cache).
    pub input: f64,
    /// An output token.
    pub output: f64,
    /// An input token read from a prompt cache; default `input`.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// An input token written to a prompt cache; default `input`.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// A reasoning (thinking) token; default `output`.
    #[serde(default)]
    pub reasoning: Option<f64>,
}

/// `spend`: prices, the store of what was spent, and budgets.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpendDecl {
    /// Use the shipped price table for models whose route names no
    /// `price` (its source and date are in the table).
    #[serde(default = "yes")]
    pub shipped_prices: bool,
    /// Folder of the embedded spend store (budgets' counts and spend by
    /// day), relative to the configuration folder; default
    /// `.toolgate/spend`. With `state.redis`, the counts are kept in Redis
    /// instead, for every replica.
    #[serde(default)]
    pub store: Option<String>,
    /// How many days of spend by day are kept.
    #[serde(default = "default_spend_days")]
    pub keep_days: u32,
    /// Limits on what keys, users, projects or groups of keys may spend.
    #[serde(default)]
    pub budgets: Vec<BudgetDecl>,
}

impl Default for SpendDecl {
    fn default() -> Self {
        SpendDecl {
            shipped_prices: true,
            store: None,
            keep_days: default_spend_days(),
            budgets: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

fn default_spend_days() -> u32 {
    90
}

/// A budget: a limit on what one key, user, project or group of keys may
/// spend in a period.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetDecl {
    /// Its name, shown in refusals, warnings and the spend API.
    pub name: String,
    /// Whose spending it counts: `{key: NAME}`, `{user: NAME}`,
    /// `{project: NAME}` (`"*"`: each its own) or `{keys: [A, B]}`.
    #[serde(rename = "for", with = "serde_yaml::with::singleton_map")]
    #[schemars(with = "BudgetScope")]
    pub scope: BudgetScope,
    /// The most that may be spent in a period: `{usd: 50}` or
    /// `{tokens: 1000000}`.
    #[serde(with = "serde_yaml::with::singleton_map")]
    #[schemars(with = "BudgetLimit")]
    pub limit: BudgetLimit,
    /// When the count starts again (UTC): `day`, `week` (Monday),
    /// `month`, or `none`.
    #[serde(default)]
    pub period: BudgetPeriod,
    /// The share of the limit, in percent, past which answers carry a
    /// warning (`X-Toolgate-Budget-Warning`) and a line is logged.
    #[serde(default = "default_warn_at")]
    pub warn_at: u8,
}

fn default_warn_at() -> u8 {
    80
}

/// Whose spending a budget counts. `"*"` gives each key, user or project
/// a budget of its own; a name, that one alone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// An API key by its name.
    Key(String),
    /// A user: the `sub` of the caller's bearer token (JWT).
    User(String),
    /// A project (`X-Toolgate-Project`).
    Project(String),
    /// Several API keys sharing one count.
    Keys(Vec<String>),
}

/// A budget's limit: money or tokens.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLimit {
    /// US dollars (models without a known price are not counted).
    Usd(f64),
    /// Tokens, input and output.
    Tokens(u64),
}

/// When a budget's count starts again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    Day,
    Week,
    #[default]
    Month,
    /// Never.
    None,
}

/// One deployment a route may send a request to.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetDecl {
    /// The upstream (of any protocol).
    pub upstream: String,
    /// The name sent upstream; default: the name the client asked for.
    #[serde(default)]
    pub model: Option<String>,
    /// Its share of the requests among the targets of its priority (1 or
    /// more).
    #[serde(default = "one")]
    pub weight: u32,
    /// Lower first: a target of a higher priority serves only when every
    /// target of the lower ones failed or cools down.
    #[serde(default)]
    pub priority: u32,
}

fn one() -> u32 {
    1
}

/// When a target of a route is left alone: after `failures` failures in a
/// row, for `duration` (or at once, for as long as its `Retry-After`
/// asks, up to `max_retry_after`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CooldownDecl {
    pub failures: u32,
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub duration: Duration,
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub max_retry_after: Duration,
}

impl Default for CooldownDecl {
    fn default() -> Self {
        CooldownDecl {
            failures: 3,
            duration: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

/// How tools reach a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FormatterKind {
    /// Native function calling: tools go into the request's `tools`.
    FunctionCalling,
    /// Tools rendered into the system prompt; calls parsed out of the text.
    StructuredPrompt,
    /// Function calling, falling back to the structured prompt (and
    /// remembering it for the model) when the upstream rejects `tools`.
    #[default]
    Auto,
}

impl FormatterKind {
    pub fn label(self) -> &'static str {
        match self {
            FormatterKind::FunctionCalling => "function_calling",
            FormatterKind::StructuredPrompt => "structured_prompt",
            FormatterKind::Auto => "auto",
        }
    }
}

/// Defaults applied when a tool or request does not say otherwise.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// The tool set used when a request names none. When unset, a set named
    /// `default` is used if one exists.
    pub tool_set: Option<String>,
    /// Timeout of one tool call when the tool sets none, e.g. `30s`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub tool_timeout: Duration,
    /// How many calls of one batch run at the same time.
    pub parallelism: usize,
    /// A tool's output longer than this many characters is cut, with a
    /// visible marker.
    pub max_output_chars: usize,
    /// Model round trips of one chat request's tool loop; a request may ask
    /// for fewer or more (`max_tool_iterations`), up to
    /// `limits.max_tool_iterations`.
    pub max_tool_iterations: u32,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            tool_set: None,
            tool_timeout: Duration::from_secs(30),
            parallelism: 8,
            max_output_chars: 20_000,
            max_tool_iterations: 8,
        }
    }
}

/// Limits on what clients and backends may send.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body the HTTP API accepts, in bytes.
    pub max_request_bytes: usize,
    /// Largest response an HTTP tool may read from its backend, in bytes;
    /// reading stops as soon as it is exceeded.
    pub max_response_bytes: usize,
    /// The most tool-loop iterations a request may ask for.
    pub max_tool_iterations: u32,
    /// The most messages a chat request may carry.
    pub max_messages: usize,
    /// Largest arguments of one tool call (as JSON text), in bytes; larger
    /// ones are refused as invalid arguments.
    pub max_tool_argument_bytes: usize,
    /// Tool loops (chat requests with gateway tools) running at once;
    /// beyond it, 503 with `Retry-After`.
    pub max_concurrent_loops: usize,
    /// Streaming responses open at once (proxied or tool loops); beyond
    /// it, 503 with `Retry-After`.
    pub max_concurrent_streams: usize,
    /// The share (percent) of `max_concurrent_loops` and
    /// `max_concurrent_streams` one API key may hold when its own
    /// `max_concurrent_*` is not set, so one key cannot take every place
    /// from the others (1 to 100; 100 lets a key take them all).
    pub max_key_share_percent: u8,
    /// Largest answer of the model the tool loop reads, in bytes (a whole
    /// completion, or the whole of one streamed turn); beyond it the
    /// request fails with 502. The transparent proxy does not buffer and
    /// is not cut.
    pub max_upstream_response_bytes: usize,
    /// The most tool calls one model turn may make; a turn with more (or a
    /// streamed call `index` beyond it) fails the request with 502.
    pub max_tool_calls_per_turn: usize,
    /// Client connections open at once; beyond it, new connections wait
    /// until one closes.
    pub max_connections: usize,
    /// Longest time a client may take to send a request's headers (also
    /// how long an idle kept-alive connection stays open).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub header_timeout: Duration,
    /// Longest time a client may take to send a request's body; beyond it,
    /// 408.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_bytes: 2 * 1024 * 1024,
            max_response_bytes: 4 * 1024 * 1024,
            max_tool_iterations: 32,
            max_messages: 1024,
            max_tool_argument_bytes: 256 * 1024,
            max_concurrent_loops: 512,
            max_concurrent_streams: 1024,
            max_key_share_percent: 50,
            max_upstream_response_bytes: 16 * 1024 * 1024,
            max_tool_calls_per_turn: 128,
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// The builtin tools. None is offered unless named in `enabled`; `exec`
/// in particular is off unless named.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BuiltinsDecl {
    /// Folder the file tools, `exec` and `execute_python` work in, relative
    /// to the configuration folder. A request's project
    /// (`X-Toolgate-Project`) narrows it to `<workspace>/<project>/`.
    pub workspace: std::path::PathBuf,
    /// The builtins to offer, by name (e.g. `calculator`, `file_read`,
    /// `web_fetch`). `toolgate tools` lists them with the YAML tools, and
    /// tool sets name them like any tool.
    pub enabled: Vec<String>,
    /// The `exec` tool (shell commands).
    pub exec: ExecDecl,
    /// The `execute_python` tool.
    pub python: PythonDecl,
    /// The `web_fetch` tool.
    pub web_fetch: WebFetchDecl,
    /// The `spawn` tool (sub-agents).
    pub spawn: SpawnDecl,
    /// How code run by `exec` and `execute_python` is contained.
    pub sandbox: SandboxDecl,
}

/// How code run by `exec` and `execute_python` is contained (see
/// SECURITY.md). Every child runs in a PID namespace of its own when the
/// machine allows it (so nothing it starts outlives the call), with a
/// process limit, and, when the gateway runs as root, as `user`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxDecl {
    /// The user (name or number) code runs as when the gateway runs as
    /// root; the gateway gives it the workspace folder. Ignored when the
    /// gateway does not run as root (code then runs as the gateway's user).
    pub user: String,
    /// The most processes the code's user may have at once
    /// (`RLIMIT_NPROC`): a fork bomb stops there.
    pub max_processes: u32,
    /// Let the code use the network (off: it gets a network namespace of
    /// its own with nothing in it, and no TCP).
    pub network: bool,
    /// Run the code even where it cannot be confined (no PID or network
    /// namespace, no Landlock): off, so `exec` and lenient Python refuse to
    /// run rather than run with the gateway's view of the machine.
    pub allow_unconfined: bool,
    /// The memory each process the code starts may have, in MiB
    /// (`RLIMIT_DATA`: its heap and private mappings); an allocation past
    /// it fails.
    pub memory_mb: u64,
}

impl Default for SandboxDecl {
    fn default() -> Self {
        SandboxDecl {
            user: "nobody".into(),
            max_processes: 64,
            network: false,
            allow_unconfined: false,
            memory_mb: 1024,
        }
    }
}

impl Default for BuiltinsDecl {
    fn default() -> Self {
        BuiltinsDecl {
            workspace: "workspace".into(),
            enabled: Vec::new(),
            exec: ExecDecl::default(),
            python: PythonDecl::default(),
            web_fetch: WebFetchDecl::default(),
            spawn: SpawnDecl::default(),
            sandbox: SandboxDecl::default(),
        }
    }
}

/// Settings of `spawn`: sub-agents, each its own tool loop against the same
/// model with the same tool set minus `spawn` (no recursive spawning).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SpawnDecl {
    /// The most tasks one call may start.
    pub max_tasks: usize,
    /// Sub-agents running at the same time, per call.
    pub concurrency: usize,
    /// Model round trips of each sub-agent's loop.
    pub max_iterations: u32,
}

impl Default for SpawnDecl {
    fn default() -> Self {
        SpawnDecl {
            max_tasks: 8,
            concurrency: 4,
            max_iterations: 4,
        }
    }
}

/// Settings of `exec`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExecDecl {
    /// Longest run of a command (the model may ask for less); on timeout
    /// the command and its whole process group are killed.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// Output beyond this many characters (stdout and stderr each) is cut.
    pub max_output_chars: usize,
    /// The shell that runs the command (`<shell> -c <command>`).
    pub shell: String,
}

impl Default for ExecDecl {
    fn default() -> Self {
        ExecDecl {
            timeout: Duration::from_secs(60),
            max_output_chars: 10_000,
            shell: "sh".into(),
        }
    }
}

/// How much `execute_python` allows.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "snake_case")]
pub enum Strictness {
    /// 30 s, CPython with any module, in the children's sandbox.
    Lenient,
    /// 10 s, the gateway's interpreter: a Python subset with no file,
    /// network or process access.
    #[default]
    Standard,
    /// 5 s, the gateway's interpreter.
    Strict,
}

/// Settings of `execute_python`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PythonDecl {
    /// The interpreter, found on `PATH` unless a path is given.
    pub interpreter: String,
    pub strictness: Strictness,
    /// No longer supported: `standard` and `strict` run on the gateway's
    /// interpreter, which has only its own modules (an error when not empty).
    pub extra_modules: ExtraModules,
    /// Memory limit of the process running the code, in MiB.
    pub memory_mb: u64,
    /// Output beyond this many characters (stdout and stderr each) is cut.
    pub max_output_chars: usize,
}

impl Default for PythonDecl {
    fn default() -> Self {
        PythonDecl {
            interpreter: "python3".into(),
            strictness: Strictness::Standard,
            extra_modules: ExtraModules::default(),
            memory_mb: 512,
            max_output_chars: 10_000,
        }
    }
}

/// Extra modules per strictness level: refused (the interpreter of
/// `standard` and `strict` has only its own; `lenient` allows every module).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ExtraModules {
    pub standard: Vec<String>,
    pub strict: Vec<String>,
}

/// Settings of `web_fetch`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WebFetchDecl {
    /// Allow private, loopback and link-local addresses (refused by
    /// default, after DNS resolution and on every redirect).
    pub allow_private: bool,
    /// Longest text returned, in characters (the model may ask for less).
    pub max_chars: usize,
    /// Largest response read, in bytes; reading stops beyond it.
    pub max_bytes: usize,
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// Redirects followed, each checked like the first URL.
    pub max_redirects: usize,
}

impl Default for WebFetchDecl {
    fn default() -> Self {
        WebFetchDecl {
            allow_private: false,
            max_chars: 50_000,
            max_bytes: 5 * 1024 * 1024,
            timeout: Duration::from_secs(20),
            max_redirects: 5,
        }
    }
}

/// A file in `tools.d/`: HTTP tools, MCP servers, and OpenAPI descriptions
/// whose operations become HTTP tools.
///
/// The loader reads each entry on its own (`T`, `M` and `O` are first raw
/// YAML values), so one malformed entry does not hide the errors of the
/// others.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolFile<T = ToolDecl, M = McpServerDecl, O = OpenApiDecl> {
    /// Whose credentials this file's HTTP tools (declared and imported
    /// from OpenAPI) send upstream, as `Authorization: Bearer`:
    /// `{per_user: NAME}`, `{token_exchange: NAME}` or `forward`; default:
    /// the gateway's own, as their headers say.
    #[serde(default, with = "serde_yaml::with::singleton_map")]
    #[schemars(with = "Option<CredentialsDecl>")]
    pub credentials: Option<CredentialsDecl>,
    /// Environment variables this file's templates may read as `env.NAME`,
    /// each `optional` (a tool using it is disabled, with a warning, while it
    /// is unset) or `required` (unset is a configuration error).
    #[serde(default)]
    pub env: IndexMap<String, EnvNeed>,
    /// The tools this file declares.
    #[serde(default, bound(deserialize = "T: Deserialize<'de>"))]
    pub tools: Vec<T>,
    /// MCP servers whose tools the gateway offers.
    #[serde(default, bound(deserialize = "M: Deserialize<'de>"))]
    pub mcp_servers: Vec<M>,
    /// OpenAPI descriptions imported at load: each operation becomes an
    /// HTTP tool, as `toolgate import openapi` would write it.
    #[serde(default, bound(deserialize = "O: Deserialize<'de>"))]
    pub openapi: Vec<O>,
}

impl<T, M, O> Default for ToolFile<T, M, O> {
    fn default() -> Self {
        ToolFile {
            credentials: None,
            env: IndexMap::new(),
            tools: Vec::new(),
            mcp_servers: Vec::new(),
            openapi: Vec::new(),
        }
    }
}

/// An OpenAPI 3.0/3.1 or Swagger 2.0 description whose operations become
/// HTTP tools when the configuration is loaded (and reloaded). The
/// variables its security schemes read are declared `optional` unless the
/// file's `env` declares them.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenApiDecl {
    /// The spec (YAML or JSON): a file, relative to the configuration
    /// folder, or an http(s) URL fetched once at every load.
    pub spec: String,
    /// Only operations whose tool name, operationId or path matches one of
    /// these globs; all when empty.
    #[serde(default)]
    pub include: Vec<String>,
    /// Not the operations matching one of these globs.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Put before every tool name, e.g. `github_`.
    #[serde(default)]
    pub prefix: String,
    /// The API's base URL, instead of the spec's first server.
    #[serde(default)]
    pub server: Option<String>,
    /// The environment variable holding the API's credential, for every
    /// security scheme (a bearer token when the spec declares none).
    #[serde(default)]
    pub auth_env: Option<String>,
}

/// An MCP server whose tools the gateway proxies, over one session kept for
/// all calls.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerDecl {
    /// The server's name, in logs and listings: 1-64 of `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// `stdio` (the gateway runs `command` and speaks MCP on its
    /// stdin/stdout) or `http` (streamable HTTP at `url`).
    pub transport: McpTransport,
    /// stdio: the program, found on `PATH`, or a path (relative to the
    /// configuration folder).
    #[serde(default)]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// stdio: environment variables for the process; values are templates
    /// over `env` (e.g. `"{{ env.GITHUB_TOKEN }}"`). Besides these the
    /// process only inherits PATH, HOME, USER, LOGNAME, SHELL, TERM, LANG,
    /// LC_ALL, TMPDIR and TZ.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// stdio: working directory, relative to the configuration folder.
    #[serde(default)]
    pub cwd: Option<String>,
    /// http: the endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// http: headers sent with every request; values are templates over
    /// `env` (e.g. `"Bearer {{ env.API_TOKEN }}"`), and may also read the
    /// caller: `request.key` (the API key's name) and `request.project`
    /// (its project), rendered for each call (empty: not sent).
    #[serde(default)]
    pub headers: IndexMap<String, String>,
    /// http: OAuth 2.1 authorization of the gateway at the server (instead
    /// of a token in `headers`): `grant: client_credentials` (unattended),
    /// or `grant: authorization_code` (a person authorizes the gateway once
    /// with `toolgate mcp login SERVER`; the gateway keeps and refreshes
    /// the token).
    #[serde(default)]
    pub oauth: Option<McpOAuthDecl>,
    /// http: whose token calls are made with, as `Authorization: Bearer`:
    /// `{per_user: NAME}`, `{token_exchange: NAME}` or `forward` (see
    /// `connections`). Each caller then gets a session of their own
    /// (bounded in number and idle time); the gateway's own `headers` or
    /// `oauth` still open the session that lists the tools. Default: every
    /// call as the gateway.
    #[serde(default, with = "serde_yaml::with::singleton_map")]
    #[schemars(with = "Option<CredentialsDecl>")]
    pub credentials: Option<CredentialsDecl>,
    /// Which tools to offer, and under which names.
    #[serde(default)]
    pub tools: McpToolsDecl,
    /// Timeout of one call, e.g. `30s`; default `defaults.tool_timeout`. On
    /// timeout the server is told to cancel the call.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// How long starting may take (spawning or connecting, `initialize` and
    /// the first `tools/list`); default `60s`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub startup_timeout: Option<Duration>,
    /// Cache the results of the tools the server marks read-only
    /// (`readOnlyHint`); other tools are never cached.
    #[serde(default)]
    pub cache: Option<CacheDecl>,
    /// The gateway is not ready (`/readyz` answers 503) while this server
    /// is down.
    #[serde(default)]
    pub required: bool,
    /// What happens when the server changes a tool's definition (its
    /// description, schemas or annotations) after the gateway first saw it
    /// (a "rug pull"): `keep_old` (default) keeps serving the definition
    /// first seen, `disable` takes the tool out, `accept` takes the new one.
    /// Either way the change is logged, and held in the console for a
    /// person to accept.
    #[serde(default)]
    pub on_change: OnChange,
    /// A pin file (JSON, relative to the configuration's folder): the
    /// fingerprint of each tool's trusted definition, by the server's name
    /// for it, as `toolgate pin SERVER` writes it. A tool the file names
    /// is trusted only in that definition, from the first listing on; a
    /// tool it does not name is trusted as first seen.
    #[serde(default)]
    pub pins: Option<String>,
    /// The server's sampling requests (it asks a model to answer during a
    /// call) that the call's client cannot answer, answered by the
    /// gateway's own model: `{model: NAME}`, a model the gateway's
    /// `upstreams` serve. Default: not answered (the call fails, saying
    /// so). A client of the MCP face that can answer still answers.
    #[serde(default)]
    pub sampling: Option<McpSamplingDecl>,
}

/// The gateway's model answering an MCP server's sampling requests.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpSamplingDecl {
    /// The model, by a name the gateway's `upstreams` route.
    pub model: String,
    /// The most tokens one answer may take: a request asking for more
    /// gets this many. Default 1024.
    #[serde(default = "default_sampling_tokens")]
    pub max_tokens: u32,
}

fn default_sampling_tokens() -> u32 {
    1024
}

/// What a changed MCP tool definition does (`on_change`).
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnChange {
    /// The definition first seen stays in service.
    #[default]
    KeepOld,
    /// The tool is unavailable, with the reason, until a person accepts
    /// the change in the console (or the gateway restarts, and trusts what
    /// it sees then).
    Disable,
    /// The new definition is taken.
    Accept,
}

/// How the gateway is authorized at an MCP server (OAuth 2.1, as MCP's
/// authorization specifies: the server's protected-resource metadata names
/// its authorization server, whose metadata is discovered).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(tag = "grant", rename_all = "snake_case")]
pub enum McpOAuthDecl {
    /// The client credentials grant: a client registered for the gateway at
    /// the authorization server; tokens are requested when needed.
    ClientCredentials(OAuthClientCredentialsDecl),
    /// The authorization code grant with PKCE: `toolgate mcp login SERVER`
    /// prints a URL for a person to open, receives the redirect on
    /// 127.0.0.1 and keeps the token in `token_file`.
    AuthorizationCode(OAuthAuthorizationCodeDecl),
}

/// `oauth.client_credentials`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuthClientCredentialsDecl {
    /// The client's id at the authorization server.
    pub client_id: String,
    /// Environment variable holding the client's secret.
    pub client_secret_env: String,
    /// Scopes to ask for; default: none named.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `oauth.authorization_code`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OAuthAuthorizationCodeDecl {
    /// A client registered in advance for the gateway. Without it, the
    /// gateway identifies itself by `client_metadata_url` when given, else
    /// registers itself (dynamic client registration).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Environment variable holding the pre-registered client's secret (a
    /// confidential client).
    #[serde(default)]
    pub client_secret_env: Option<String>,
    /// An `https` URL where the gateway's client metadata document is
    /// published (a client ID metadata document): its client id.
    #[serde(default)]
    pub client_metadata_url: Option<String>,
    /// Scopes to ask for; default: those the server asks for, else those
    /// its metadata supports.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The port on 127.0.0.1 where `toolgate mcp login` receives the
    /// authorization server's redirect (`http://127.0.0.1:PORT/callback`,
    /// the redirect URI to register).
    #[serde(default = "default_redirect_port")]
    pub redirect_port: u16,
    /// Where the token is kept, relative to the configuration folder
    /// (readable only by the gateway's user); default
    /// `.toolgate/oauth/SERVER.json`.
    #[serde(default)]
    pub token_file: Option<String>,
}

fn default_redirect_port() -> u16 {
    8976
}

/// How the gateway talks to an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    Stdio,
    Http,
}

/// Which tools of an MCP server are offered, and their names.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpToolsDecl {
    /// Names or globs of the server's tools to offer; default: all.
    #[serde(default)]
    pub include: Vec<String>,
    /// Names or globs of tools not to offer.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Prepended to every tool's name, e.g. `everything_`. Characters other
    /// than `A-Z a-z 0-9 _ -` in a server's tool names become `_`; a name
    /// longer than 64 characters makes that tool unavailable.
    #[serde(default)]
    pub prefix: String,
}

/// Whether an environment variable must be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnvNeed {
    /// Unset disables the tools that use it, with a warning.
    Optional,
    /// Unset is a configuration error.
    Required,
}

/// One HTTP tool.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolDecl {
    /// Name the model calls: 1-64 of `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// Free-form category, shown in listings.
    #[serde(default)]
    pub category: Option<String>,
    /// JSON Schema of the arguments; must be `type: object`. Default: no
    /// arguments at all.
    #[serde(default = "empty_object_schema")]
    #[schemars(with = "serde_json::Value")]
    pub parameters: serde_json::Value,
    /// The request this tool sends.
    pub http: HttpDecl,
    /// What to return from the response.
    #[serde(default)]
    pub response: ResponseDecl,
    /// Cache successful results for identical arguments.
    #[serde(default)]
    pub cache: Option<CacheDecl>,
    /// What the tool does to the world, for MCP clients that show or gate
    /// tools by it. Unset hints follow the method: `GET` is read-only,
    /// `GET`, `PUT` and `DELETE` are idempotent, `DELETE` is destructive;
    /// every HTTP tool reaches an outside API (open world).
    #[serde(default)]
    pub annotations: ToolAnnotationsDecl,
}

/// Hints about a tool's behaviour (MCP's tool annotations). Hints only:
/// the gateway enforces none of them.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolAnnotationsDecl {
    /// A human-readable name for the tool.
    #[serde(default)]
    pub title: Option<String>,
    /// It changes nothing.
    #[serde(default)]
    pub read_only: Option<bool>,
    /// It may destroy or overwrite data.
    #[serde(default)]
    pub destructive: Option<bool>,
    /// Repeating a call with the same arguments has no further effect.
    #[serde(default)]
    pub idempotent: Option<bool>,
    /// It reaches systems outside the gateway's control.
    #[serde(default)]
    pub open_world: Option<bool>,
}

fn empty_object_schema() -> serde_json::Value {
    serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
}

/// HTTP methods an HTTP tool may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

/// The templated request of an HTTP tool. Every string is a minijinja
/// template over `args` (the validated arguments) and `env` (the variables
/// the file declares).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpDecl {
    #[serde(default = "default_method")]
    pub method: Method,
    /// Absolute `http(s)` URL. Values from `args` are percent-encoded, so they
    /// stay inside their path segment or query value.
    pub url: String,
    /// Query parameters; a value that renders empty is left out.
    #[serde(default)]
    pub query: IndexMap<String, String>,
    /// Request headers; a value holding CR or LF is refused.
    #[serde(default)]
    pub headers: IndexMap<String, String>,
    /// Request body.
    #[serde(default)]
    pub body: Option<BodyDecl>,
    /// Timeout of this tool's calls, e.g. `10s`; default: `defaults.tool_timeout`.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Duration>,
    /// Redirects this tool follows. Without it, none: a 3xx answer is an
    /// error saying where it pointed.
    #[serde(default)]
    pub redirects: Option<RedirectsDecl>,
}

/// Which redirects an HTTP tool follows: up to `max`, to the request's own
/// origin, and to the other origins listed. The tool's declared headers
/// (which may carry secrets) are sent only to the request's own origin; no
/// `Referer` is ever sent.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedirectsDecl {
    /// The most redirects of one call, 1 to 10.
    pub max: u8,
    /// Other origins the tool may be redirected to, such as
    /// `https://cdn.example.com` (scheme, host and port if not the default).
    #[serde(default)]
    pub origins: Vec<String>,
}

fn default_method() -> Method {
    Method::Get
}

/// A request body: `json` (a JSON document whose strings are templates; a
/// string that is exactly one `{{ expression }}` keeps the value's JSON type,
/// and an object field whose expression is an absent argument is left out)
/// or `text` (a text template). Exactly one of the two.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BodyDecl {
    /// A JSON document; sent as `application/json`.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Value>")]
    pub json: Option<serde_json::Value>,
    /// A text template, sent as is.
    #[serde(default)]
    pub text: Option<String>,
    /// Content type of a `text` body; default `text/plain; charset=utf-8`.
    #[serde(default)]
    pub content_type: Option<String>,
}

/// What the model gets back from the response.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseDecl {
    /// JSON pointer into a JSON response, e.g. `/current`.
    #[serde(default)]
    pub select: Option<String>,
    /// A template over `response` (the selected value) and `args` whose
    /// output replaces the response.
    #[serde(default)]
    pub template: Option<String>,
}

/// Result caching.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheDecl {
    /// How long a result stays valid, e.g. `5m`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String")]
    pub ttl: Duration,
}

/// A file in `tool-sets/`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSetFile {
    /// The name requests use to pick this set.
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// Tool names and globs (`everything_*`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Other sets whose tools (and prompts and resources) this set
    /// includes.
    #[serde(default)]
    pub include: Vec<String>,
    /// Prompts of MCP servers the set offers to MCP clients, by the
    /// gateway's name or glob (`everything_*`); none unless listed.
    #[serde(default)]
    pub prompts: Vec<String>,
    /// Resources and resource templates of MCP servers the set offers to
    /// MCP clients, by URI or glob (`file:///docs/*`, `ui://*`); none
    /// unless listed.
    #[serde(default)]
    pub resources: Vec<String>,
    /// How a model meets the set's tools: all of them in every request
    /// (`all`, the default), or a `find_tools` search that makes the tools
    /// it finds callable (`search`), for sets too large for a prompt.
    #[serde(default)]
    pub discovery: Discovery,
    /// With `discovery: search`: how many found tools stay in the prompt
    /// at once (the oldest found leave first); default 16.
    #[serde(default)]
    pub max_tools_in_prompt: Option<u32>,
    /// With `discovery: search`: how many of the best matches for the
    /// user's latest message are offered from the first model call on,
    /// before any `find_tools` call (no search round trip); default 0.
    #[serde(default)]
    pub preload: Option<u32>,
    /// How a model uses the tools: one call at a time (`direct`, the
    /// default), or by writing one Python program that calls them as
    /// functions (`code`: the model is offered `run_code`, and `find_tools`
    /// with `discovery: search`).
    #[serde(default)]
    pub mode: SetMode,
}

/// How a model uses a tool set's tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SetMode {
    /// The model calls the tools, one call per tool.
    #[default]
    Direct,
    /// The model writes a program that calls the tools (`run_code`), run
    /// by the gateway's sandboxed interpreter.
    Code,
}

/// How a model meets a tool set's tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Discovery {
    /// Every tool of the set is offered in every request.
    #[default]
    All,
    /// The model is offered `find_tools` (and the tools it found).
    Search,
}

/// The JSON Schemas of all three formats, keyed by file kind.
pub fn json_schemas() -> BTreeMap<&'static str, serde_json::Value> {
    let mut out = BTreeMap::new();
    out.insert(
        "toolgate.yaml",
        serde_json::to_value(schemars::schema_for!(GatewayFile)).unwrap_or_default(),
    );
    out.insert(
        "tools.d/*.yaml",
        serde_json::to_value(schemars::schema_for!(ToolFile<ToolDecl>)).unwrap_or_default(),
    );
    out.insert(
        "tool-sets/*.yaml",
        serde_json::to_value(schemars::schema_for!(ToolSetFile)).unwrap_or_default(),
    );
    out
}
