//! Validating a [`RawConfig`] into a [`Catalog`], collecting every error.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use indexmap::IndexMap;

use super::http_tools::{PendingHttp, check_env, check_tool};
use super::upstreams::build_upstreams;
use super::{Catalog, Unavailable, toolset};
use crate::support::template::TemplateSet;
use crate::tools::tool::http::HttpTool;
use crate::tools::tool::{Tool, ToolKind, ToolSpec, is_valid_name};
use toolgate_config::diag;
use toolgate_config::load::Loaded;
use toolgate_config::{ConfigErrors, Diagnostic, Pos, RawConfig};

pub(super) fn build(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    natives: &[crate::tools::tool::native::NativeTool],
    mut diags: Vec<Diagnostic>,
) -> Result<Catalog, ConfigErrors> {
    let settings = &raw.gateway.value;
    check_settings(&raw.gateway, &mut diags);
    let upstreams = build_upstreams(&raw.dir, &raw.gateway, env, &mut diags);

    let mut templates = TemplateSet::default();
    let DeclaredTools {
        pending,
        unavailable,
        mut declared,
        first_seen,
    } = declared_tools(&raw, env, &mut templates, &mut diags);

    // Native tools: the enabled builtins, then the embedding binary's.
    let builtins = super::builtins::select(&raw.gateway, &mut diags);
    let native_tools = super::natives::register(
        &raw.gateway,
        builtins,
        natives,
        &first_seen,
        &mut declared,
        &mut diags,
    );
    let mut extensions = toolgate::Extensions::default();
    extensions.insert(Arc::new(toolgate_builtins::BuiltinSettings::new(
        &settings.builtins,
        &raw.dir,
    )));

    // MCP servers: validated now; their tools are known once they run.
    let reserved: HashMap<String, String> = first_seen
        .iter()
        .map(|(n, (f, p))| (n.clone(), format!("{f}:{}", p.line)))
        .chain(
            native_tools
                .iter()
                .map(|t| (t.name.clone(), t.origin.clone())),
        )
        .collect();
    let mcp_specs = super::mcp::check_servers(&raw, env, &reserved, &upstreams, &mut diags);

    let tool_names: BTreeSet<&str> = pending
        .iter()
        .map(|(s, _)| s.name.as_str())
        .chain(native_tools.iter().map(|t| t.name.as_str()))
        .collect();
    let sets = toolset::resolve(
        &raw.set_files,
        &declared,
        !raw.tools_incomplete,
        &|name| tool_names.contains(name),
        &|entry| crate::tools::tool::mcp::McpRegistry::servers_for(&mcp_specs, entry),
        &mut diags,
    );

    let default_set = default_set(&raw, &sets, &mut diags);

    super::settings::check_limits(&raw.gateway, &mut diags);
    super::settings::check_key_share(&raw.gateway, &mut diags);
    super::settings::check_audit(&raw.gateway, &mut diags);
    super::settings::check_console(&raw.gateway, &mut diags);
    let browsers = super::browsers::check(&raw.gateway, &mut diags);
    let policies = compile_policies(&raw.gateway, &mut diags);
    super::settings::check_approvals(&raw.gateway, &mut diags);
    super::settings::check_classifier(&raw.gateway, env, &mut diags);
    super::settings::check_telemetry(&raw.gateway, &mut diags);
    let keys = super::keys::check(
        &raw.gateway,
        &sets,
        default_set.as_deref(),
        env,
        &raw.dir,
        &mut diags,
    );
    let mcp_session_secret = super::settings::mcp_session_secret(&raw.gateway, env, &mut diags);
    let mcp_replica_url = super::settings::mcp_replica_url(&raw.gateway, env, &mut diags);
    let redis_url = super::settings::redis_url(&raw.gateway, env, &mut diags);
    let connections = super::connections::check(&raw, env, &mut diags);
    let search_model = super::settings::search_model(&raw, &mut diags);

    diag::sort(&mut diags);
    if diags.iter().any(Diagnostic::is_error) {
        return Err(ConfigErrors { diagnostics: diags });
    }

    let mut tools = http_tools(pending, templates, settings.limits.max_response_bytes);
    for tool in native_tools {
        tools.insert(tool.name.clone(), tool);
    }

    let policy_version = crate::governance::policy::version(
        &raw.gateway.value.policies,
        raw.gateway.value.approvals.destructive,
    );
    let catalog = Catalog {
        spend: crate::governance::spend::Rules::new(&raw.gateway.value.spend).stored_in(
            raw.dir.join(
                raw.gateway
                    .value
                    .spend
                    .store
                    .as_deref()
                    .unwrap_or(".toolgate/spend"),
            ),
        ),
        mcp: super::mcp::registry(mcp_specs, &tools, &sets),
        extensions,
        settings: raw.gateway.value,
        tools,
        unavailable,
        sets,
        default_set,
        upstreams,
        warnings: diags,
        keys,
        mcp_session_secret,
        mcp_replica_url,
        redis_url,
        browsers,
        policies,
        policy_version,
        connections,
        search_model,
    };
    // Sets that search get their index built now, on a thread of its own
    // so the load does not wait for it (a search that comes first waits
    // for it instead); the MCP servers' tools join it on the first search
    // after they list them.
    for set in catalog.sets() {
        if matches!(
            set.discovery,
            crate::tools::discovery::Discovery::Search { .. }
        ) {
            crate::tools::discovery::warm(
                &set.index,
                catalog.tools_in(set, None).collect(),
                catalog.search_model.clone(),
            );
        }
    }
    Ok(catalog)
}

/// `policies`, compiled: a rule that cannot be is an error at its field
/// (with the place in the expression, when the parser gives one).
fn compile_policies(
    file: &toolgate_config::load::Loaded<toolgate_config::GatewayFile>,
    diags: &mut Vec<Diagnostic>,
) -> Vec<crate::governance::policy::Policy> {
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, decl) in file.value.policies.iter().enumerate() {
        if !names.insert(decl.name.as_str()) {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(&format!("policies[{i}].name")),
                format!("policy `{}` is declared twice", decl.name),
                "rename one of them",
            ));
            continue;
        }
        match crate::governance::policy::Policy::compile(decl) {
            Ok(p) => out.push(p),
            Err(e) => {
                let at = match e.at {
                    Some((line, column)) => {
                        format!(" (at line {line}, column {column} of the expression)")
                    }
                    None => String::new(),
                };
                let hint = if e.field == "when" {
                    "write a CEL expression over `tool`, `args` and `caller` that is true or false, e.g. `has(args.path) && args.path.startsWith(\"/etc\")`"
                } else {
                    "use `*` for any characters and `?` for one"
                };
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos(&format!("policies[{i}].{}", e.field)),
                    format!("policy `{}`: {}{at}", decl.name, e.message),
                    hint,
                ));
            }
        }
    }
    out
}

/// The YAML-declared HTTP tools, checked: those ready to build, those
/// disabled by an unset variable, and every declared name with where it
/// was first declared.
struct DeclaredTools {
    pending: Vec<(ToolSpec, PendingHttp)>,
    unavailable: IndexMap<String, Unavailable>,
    declared: Vec<String>,
    first_seen: HashMap<String, (String, Pos)>,
}

fn declared_tools(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    templates: &mut TemplateSet,
    diags: &mut Vec<Diagnostic>,
) -> DeclaredTools {
    let mut pending: Vec<(ToolSpec, PendingHttp)> = Vec::new();
    let mut unavailable = IndexMap::new();
    let mut declared: Vec<String> = Vec::new();
    let mut first_seen: HashMap<String, (String, Pos)> = HashMap::new();

    for file in &raw.tool_files {
        let env_values = check_env(file, env, diags);
        for (i, decl) in file.value.tools.iter().enumerate() {
            let Some(decl) = decl else { continue };
            let at = |p: &str| file.pos(&format!("tools[{i}]{p}"));
            if !is_valid_name(&decl.name) {
                diags.push(Diagnostic::error(
                    &file.file,
                    at(".name"),
                    format!("tool name {:?} is invalid", decl.name),
                    "use 1-64 letters, digits, `_` or `-` (OpenAI's rule for function names)",
                ));
                continue;
            }
            if let Some((other_file, p)) = first_seen.get(&decl.name) {
                diags.push(Diagnostic::error(
                    &file.file,
                    at(".name"),
                    format!(
                        "tool `{}` is also declared at {other_file}:{}:{}",
                        decl.name, p.line, p.column
                    ),
                    "rename one of the two tools",
                ));
                continue;
            }
            first_seen.insert(decl.name.clone(), (file.file.clone(), at(".name")));
            declared.push(decl.name.clone());

            let before = diags.iter().filter(|d| d.is_error()).count();
            let checked = check_tool(file, i, decl, templates, diags);
            let clean = diags.iter().filter(|d| d.is_error()).count() == before;
            let Some(http) = checked.filter(|_| clean) else {
                continue;
            };
            // Variables it needs but that are unset disable the tool.
            let missing: Vec<&String> = http
                .env_used
                .iter()
                .filter(|v| !env_values.contains_key(v.as_str()))
                .collect();
            let origin = format!("{}:{}", file.file, at("").line);
            if !missing.is_empty() {
                let names = missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                let reason = format!("environment variable {names} is not set");
                diags.push(Diagnostic::warning(
                    &file.file,
                    at(".name"),
                    format!("tool `{}` is disabled: {reason}", decl.name),
                    format!("set {names} and reload to enable it"),
                ));
                unavailable.insert(
                    decl.name.clone(),
                    Unavailable {
                        name: decl.name.clone(),
                        reason,
                        origin,
                    },
                );
                continue;
            }
            let env_for_tool = http
                .env_used
                .iter()
                .filter_map(|v| env_values.get(v).map(|val| (v.clone(), val.clone())))
                .collect();
            pending.push((
                ToolSpec {
                    name: decl.name.clone(),
                    description: decl.description.clone(),
                    category: decl.category.clone(),
                    parameters: decl.parameters.clone(),
                    timeout: decl.http.timeout,
                    cache_ttl: decl.cache.as_ref().map(|c| c.ttl),
                    annotations: http_annotations(&decl.annotations, decl.http.method),
                    output_schema: None,
                    origin,
                },
                PendingHttp {
                    env: env_for_tool,
                    credentials: file.value.credentials.clone(),
                    ..http
                },
            ));
        }
    }

    DeclaredTools {
        pending,
        unavailable,
        declared,
        first_seen,
    }
}

/// The gateway's default tool set: `defaults.tool_set` (which must
/// exist), else a set called `default` if there is one.
fn default_set(
    raw: &RawConfig,
    sets: &IndexMap<String, super::ToolSet>,
    diags: &mut Vec<Diagnostic>,
) -> Option<String> {
    match &raw.gateway.value.defaults.tool_set {
        Some(name) if !sets.contains_key(name) => {
            diags.push(Diagnostic::error(
                &raw.gateway.file,
                raw.gateway.pos("defaults.tool_set"),
                format!("the default tool set `{name}` does not exist"),
                "name a set declared in tool-sets/",
            ));
            None
        }
        Some(name) => Some(name.clone()),
        None => sets.contains_key("default").then(|| "default".to_owned()),
    }
}

/// The checked HTTP tools built, sharing one template environment.
fn http_tools(
    pending: Vec<(ToolSpec, PendingHttp)>,
    templates: TemplateSet,
    max_response_bytes: usize,
) -> IndexMap<String, Arc<Tool>> {
    let env = templates.finish();
    let mut tools = IndexMap::with_capacity(pending.len());
    for (spec, http) in pending {
        let name = spec.name.clone();
        let kind = ToolKind::Http(Box::new(HttpTool {
            method: http.method,
            templates: Arc::clone(&env),
            url: http.url,
            query: http.query,
            headers: http.headers,
            body: http.body,
            select: http.select,
            output: http.output,
            env: http.env,
            secret_templates: http.secret_templates,
            reads_caller: http.reads_caller,
            credentials: http.credentials,
            max_response_bytes,
            redirects: http.redirects,
        }));
        tools.insert(name, Arc::new(Tool::checked(spec, kind)));
    }

    tools
}

fn check_settings(file: &Loaded<toolgate_config::GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let s = &file.value;
    check_budgets(file, diags);
    if s.defaults.parallelism == 0 {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("defaults.parallelism"),
            "parallelism must be at least 1",
            "set it to the number of calls of one batch that may run at once, e.g. 8",
        ));
    }
    if s.defaults.tool_timeout.is_zero() {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("defaults.tool_timeout"),
            "tool_timeout must be longer than zero",
            "give a duration such as `30s`",
        ));
    }
    if s.defaults.max_output_chars < 100 {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("defaults.max_output_chars"),
            "max_output_chars must be at least 100",
            "raise it; tool output longer than this is cut",
        ));
    }
    if let Some(listen) = &s.listen
        && listen.parse::<std::net::SocketAddr>().is_err()
    {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("listen"),
            format!("listen address {listen:?} is not an IP address and port"),
            "write it as `127.0.0.1:8080` or `[::1]:8080`",
        ));
    }
}

/// An HTTP tool's annotations: what its declaration says, else what its
/// method implies.
fn http_annotations(
    decl: &toolgate_config::format::ToolAnnotationsDecl,
    method: toolgate_config::format::Method,
) -> crate::tools::tool::Annotations {
    use toolgate_config::format::Method;
    crate::tools::tool::Annotations {
        title: decl.title.clone(),
        read_only_hint: Some(decl.read_only.unwrap_or(method == Method::Get)),
        destructive_hint: Some(decl.destructive.unwrap_or(method == Method::Delete)),
        idempotent_hint: Some(
            decl.idempotent
                .unwrap_or(matches!(method, Method::Get | Method::Put | Method::Delete)),
        ),
        open_world_hint: Some(decl.open_world.unwrap_or(true)),
    }
}

/// Budgets: each named once, with a limit above zero, for keys that are
/// declared.
fn check_budgets(file: &Loaded<toolgate_config::GatewayFile>, diags: &mut Vec<Diagnostic>) {
    use toolgate_config::format::{BudgetLimit, BudgetScope};
    let s = &file.value;
    let keys: Vec<&str> = s.auth.keys.iter().map(|k| k.name.as_str()).collect();
    let mut seen = std::collections::HashSet::new();
    for (i, b) in s.spend.budgets.iter().enumerate() {
        let at = |field: &str| file.pos(&format!("spend.budgets[{i}].{field}"));
        if !seen.insert(b.name.as_str()) {
            diags.push(Diagnostic::error(
                &file.file,
                at("name"),
                format!("the budget `{}` is declared twice", b.name),
                "give each budget a name of its own",
            ));
        }
        let positive = match b.limit {
            BudgetLimit::Usd(u) => u.is_finite() && u > 0.0,
            BudgetLimit::Tokens(t) => t > 0,
        };
        if !positive {
            diags.push(Diagnostic::error(
                &file.file,
                at("limit"),
                "a budget's limit must be above zero",
                "write e.g. `limit: {usd: 50}` or `limit: {tokens: 1000000}`",
            ));
        }
        let named: Vec<&str> = match &b.scope {
            BudgetScope::Key(k) if k != "*" => vec![k.as_str()],
            BudgetScope::Keys(ks) => ks.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        for k in named.into_iter().filter(|k| !keys.contains(k)) {
            diags.push(Diagnostic::error(
                &file.file,
                at("for"),
                format!(
                    "the budget `{}` names the key `{k}`, which auth.keys does not declare",
                    b.name
                ),
                "name a key of auth.keys, or `*` for each key",
            ));
        }
    }
}
