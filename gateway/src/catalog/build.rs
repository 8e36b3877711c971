//! Validating a [`RawConfig`] into a [`Catalog`], collecting every error.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use indexmap::IndexMap;
use reqwest::header::HeaderName;
use serde_json::Value;

use super::{Catalog, Unavailable, toolset};
use crate::config::diag;
use crate::config::format::{BodyDecl, EnvNeed, Method, ToolDecl};
use crate::config::load::{Loaded, RawToolFile};
use crate::config::{ConfigErrors, Diagnostic, Pos, RawConfig};
use crate::template::{self, TemplateSet};
use crate::tool::http::{Body, HttpTool, JsonBody, json_leaf_name};
use crate::tool::{Tool, ToolKind, ToolSpec, is_valid_name};
use crate::upstream::{Upstream, Upstreams};
use std::time::Duration;

pub(super) fn build(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    natives: &[crate::tool::native::NativeTool],
    mut diags: Vec<Diagnostic>,
) -> Result<Catalog, ConfigErrors> {
    let settings = &raw.gateway.value;
    check_settings(&raw.gateway, &mut diags);
    let upstreams = build_upstreams(&raw.dir, &raw.gateway, env, &mut diags);

    let mut templates = TemplateSet::default();
    let mut pending: Vec<(ToolSpec, PendingHttp)> = Vec::new();
    let mut unavailable = IndexMap::new();
    let mut declared: Vec<String> = Vec::new();
    let mut first_seen: HashMap<String, (String, Pos)> = HashMap::new();

    for file in &raw.tool_files {
        let env_values = check_env(file, env, &mut diags);
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
            let checked = check_tool(file, i, decl, &mut templates, &mut diags);
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
                    origin,
                },
                PendingHttp {
                    env: env_for_tool,
                    ..http
                },
            ));
        }
    }

    // Native tools: the enabled builtins, then the embedding binary's.
    let builtins = crate::builtin::select(&raw.gateway, &mut diags);
    let native_tools = super::natives::register(
        &raw.gateway,
        builtins,
        natives,
        &first_seen,
        &mut declared,
        &mut diags,
    );
    let builtin_settings = Arc::new(crate::builtin::BuiltinSettings::new(
        &settings.builtins,
        &raw.dir,
    ));

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
    let mcp_specs = super::mcp::check_servers(&raw, env, &reserved, &mut diags);

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
        &|entry| crate::tool::mcp::McpRegistry::servers_for(&mcp_specs, entry),
        &mut diags,
    );

    let default_set = match &settings.defaults.tool_set {
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
    };

    crate::limits::check(&raw.gateway, &mut diags);
    crate::audit::check(&raw.gateway, &mut diags);
    let keys = crate::auth::check(&raw.gateway, &sets, default_set.as_deref(), env, &mut diags);

    diag::sort(&mut diags);
    if diags.iter().any(Diagnostic::is_error) {
        return Err(ConfigErrors { diagnostics: diags });
    }

    let env = templates.finish();
    let max_response_bytes = settings.limits.max_response_bytes;
    let mut tools = IndexMap::with_capacity(pending.len());
    for (spec, http) in pending {
        let name = spec.name.clone();
        let kind = ToolKind::Http(HttpTool {
            method: http.method,
            templates: Arc::clone(&env),
            url: http.url,
            query: http.query,
            headers: http.headers,
            body: http.body,
            select: http.select,
            output: http.output,
            env: http.env,
            max_response_bytes,
        });
        // The schema compiled during validation, so this cannot fail; if it
        // somehow did, the tool is reported unavailable rather than lost.
        match Tool::new(spec, kind) {
            Ok(tool) => {
                tools.insert(name, Arc::new(tool));
            }
            Err(e) => {
                unavailable.insert(
                    name.clone(),
                    Unavailable {
                        name,
                        reason: e,
                        origin: String::new(),
                    },
                );
            }
        }
    }

    for tool in native_tools {
        tools.insert(tool.name.clone(), tool);
    }

    Ok(Catalog {
        mcp: super::mcp::registry(mcp_specs, &tools, &sets),
        builtins: builtin_settings,
        settings: raw.gateway.value,
        tools,
        unavailable,
        sets,
        default_set,
        upstreams,
        warnings: diags,
        keys,
    })
}

/// Builds the upstreams and model routes; with none declared,
/// `OPENAI_BASE_URL`/`OPENAI_API_KEY` define one that serves every model.
fn build_upstreams(
    dir: &std::path::Path,
    file: &Loaded<crate::config::GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Upstreams {
    let s = &file.value;
    let mut list: Vec<Arc<Upstream>> = Vec::new();
    if s.upstreams.is_empty() {
        let base = env("OPENAI_BASE_URL").filter(|v| !v.is_empty());
        let key = env("OPENAI_API_KEY").filter(|v| !v.is_empty());
        if base.is_some() || key.is_some() {
            let base = base.unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
            if url::Url::parse(&base).is_err() {
                diags.push(Diagnostic::error(
                    &file.file,
                    Pos { line: 1, column: 1 },
                    format!("OPENAI_BASE_URL {base:?} is not a URL"),
                    "set it to the server's base URL, e.g. http://127.0.0.1:8000/v1",
                ));
            }
            let retry = crate::config::format::RetryDecl::default();
            list.push(Arc::new(Upstream::new(
                "default".into(),
                &base,
                key,
                Duration::from_secs(5),
                Duration::from_secs(120),
                retry,
            )));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (i, u) in s.upstreams.iter().enumerate() {
        let at = |p: &str| file.pos(&format!("upstreams[{i}]{p}"));
        let mut ok = true;
        if !is_valid_name(&u.name) {
            diags.push(Diagnostic::error(
                &file.file,
                at(".name"),
                format!("upstream name {:?} is invalid", u.name),
                "use 1-64 letters, digits, `_` or `-`",
            ));
            ok = false;
        } else if !seen.insert(u.name.as_str()) {
            diags.push(Diagnostic::error(
                &file.file,
                at(".name"),
                format!("upstream `{}` is declared twice", u.name),
                "rename one of them",
            ));
            ok = false;
        }
        match url::Url::parse(&u.base_url) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {}
            _ => {
                diags.push(Diagnostic::error(
                    &file.file,
                    at(".base_url"),
                    format!("base_url {:?} is not an http(s) URL", u.base_url),
                    "write it like https://api.openai.com/v1",
                ));
                ok = false;
            }
        }
        let key = match &u.api_key_env {
            None => None,
            Some(var) => {
                match env(var).filter(|v| !v.is_empty()) {
                    Some(k) => Some(k),
                    None => {
                        diags.push(Diagnostic::error(&file.file, at(".api_key_env"), format!("environment variable {var} (the API key of upstream `{}`) is not set", u.name), "set it, or remove `api_key_env` for an upstream without a key"));
                        ok = false;
                        None
                    }
                }
            }
        };
        if u.retries.max_attempts == 0 {
            diags.push(Diagnostic::error(
                &file.file,
                at(".retries.max_attempts"),
                "max_attempts must be at least 1",
                "1 means no retry",
            ));
            ok = false;
        }
        if ok {
            list.push(Arc::new(Upstream::new(
                u.name.clone(),
                &u.base_url,
                key,
                u.connect_timeout,
                u.read_timeout,
                u.retries.clone(),
            )));
        }
    }
    let mut upstreams = Upstreams::new(list.clone());
    for (i, r) in s.models.iter().enumerate() {
        let at = |p: &str| file.pos(&format!("models[{i}]{p}"));
        let Some(up) = list.iter().find(|u| u.name == r.upstream) else {
            let names: Vec<&str> = list.iter().map(|u| u.name.as_str()).collect();
            diags.push(Diagnostic::error(
                &file.file,
                at(".upstream"),
                format!("upstream `{}` does not exist", r.upstream),
                format!(
                    "name one of: {}",
                    if names.is_empty() {
                        "(none declared)".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
            continue;
        };
        let template = match &r.template {
            None => None,
            Some(path) => match std::fs::read_to_string(dir.join(path))
                .map_err(|e| format!("cannot read {path}: {e}"))
                .and_then(crate::formatter::PromptTemplate::new)
            {
                Ok(t) => Some(Arc::new(t)),
                Err(e) => {
                    diags.push(Diagnostic::error(
                        &file.file,
                        at(".template"),
                        format!("the structured-prompt template is unusable: {e}"),
                        "fix the file (the shipped gateway/templates/structured_prompt.jinja is a starting point)",
                    ));
                    continue;
                }
            },
        };
        if let Err(e) = upstreams.add_route(
            &r.model,
            Arc::clone(up),
            r.upstream_model.clone(),
            r.formatter,
            template,
        ) {
            diags.push(Diagnostic::error(
                &file.file,
                at(".model"),
                format!("the pattern `{}` is invalid: {e}", r.model),
                "use `*` for any characters and `?` for one",
            ));
        }
    }
    if s.models.is_empty()
        && let Some(first) = list.first()
    {
        // No routes: every model goes to the first upstream.
        let _ = upstreams.add_route("*", Arc::clone(first), None, Default::default(), None);
    }
    upstreams
}

fn check_settings(file: &Loaded<crate::config::GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let s = &file.value;
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

/// Checks the file's `env` declarations and reads the set variables.
fn check_env(
    file: &Loaded<RawToolFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for (name, need) in &file.value.env {
        let valid = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !valid {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(&format!("env.{name}")),
                format!("{name:?} is not a valid environment variable name"),
                "use letters, digits and `_`, not starting with a digit",
            ));
            continue;
        }
        match env(name) {
            Some(v) => {
                values.insert(name.clone(), v);
            }
            None if *need == EnvNeed::Required => diags.push(Diagnostic::error(
                &file.file,
                file.pos(&format!("env.{name}")),
                format!("required environment variable {name} is not set"),
                "set it, or mark it `optional` to disable the tools that use it instead",
            )),
            None => {}
        }
    }
    values
}

/// An HTTP tool that passed validation, before the template environment is
/// finished.
struct PendingHttp {
    method: reqwest::Method,
    url: String,
    query: Vec<(String, String)>,
    headers: Vec<(HeaderName, String)>,
    body: Option<Body>,
    select: Option<String>,
    output: Option<String>,
    env_used: BTreeSet<String>,
    env: BTreeMap<String, String>,
}

/// What names a template may read.
struct Scope<'a> {
    args: &'a BTreeSet<String>,
    env: &'a IndexMap<String, EnvNeed>,
    response: bool,
}

/// Checks one tool declaration, compiling its schema and templates.
fn check_tool(
    file: &Loaded<RawToolFile>,
    i: usize,
    decl: &ToolDecl,
    templates: &mut TemplateSet,
    diags: &mut Vec<Diagnostic>,
) -> Option<PendingHttp> {
    let path = |p: &str| format!("tools[{i}]{p}");
    let err = |diags: &mut Vec<Diagnostic>, p: &str, msg: String, hint: &str| {
        diags.push(Diagnostic::error(&file.file, file.pos(&path(p)), msg, hint));
    };

    if decl.description.trim().is_empty() {
        err(
            diags,
            ".description",
            "the description is empty".into(),
            "say what the tool does: the model reads it to decide when to call it",
        );
    }

    // Parameters: a JSON Schema of type object whose `required` names
    // declared properties.
    let params = check_parameters(&decl.parameters, &mut |p, msg, hint| {
        err(diags, &format!(".parameters{p}"), msg, hint)
    });

    let http = &decl.http;
    let name = &decl.name;
    let mut env_used = BTreeSet::new();
    let plain = Scope {
        args: &params,
        env: &file.value.env,
        response: false,
    };
    let mut add = |diags: &mut Vec<Diagnostic>,
                   key: String,
                   source: &str,
                   at: &str,
                   scope: &Scope<'_>|
     -> Option<String> {
        match templates.add(key.clone(), source.to_owned()) {
            Ok(vars) => {
                for var in vars {
                    if let Err((msg, hint)) = check_variable(&var, scope) {
                        err(diags, at, msg, &hint);
                    } else if let Some(v) = var.strip_prefix("env.") {
                        env_used.insert(v.split('.').next().unwrap_or(v).to_owned());
                    }
                }
                Some(key)
            }
            Err(e) => {
                err(
                    diags,
                    at,
                    format!("the template does not compile: {e}"),
                    "fix the minijinja syntax",
                );
                None
            }
        }
    };

    let url = add(
        diags,
        format!("{name}/http.url"),
        &http.url,
        ".http.url",
        &plain,
    );
    let starts_ok = ["http://", "https://", "{{ env.", "{{env."]
        .iter()
        .any(|p| http.url.trim_start().starts_with(p));
    if !starts_ok {
        err(
            diags,
            ".http.url",
            format!(
                "the URL {:?} does not start with http:// or https://",
                http.url
            ),
            "write an absolute http(s) URL; arguments may only fill in its path and query",
        );
    } else if !template::is_template(&http.url)
        && let Err(e) = url::Url::parse(&http.url)
    {
        err(
            diags,
            ".http.url",
            format!("the URL is invalid: {e}"),
            "write an absolute http(s) URL",
        );
    }

    let mut query = Vec::new();
    for (k, v) in &http.query {
        if let Some(t) = add(
            diags,
            format!("{name}/http.query.{k}"),
            v,
            &format!(".http.query.{k}"),
            &plain,
        ) {
            query.push((k.clone(), t));
        }
    }
    let mut headers = Vec::new();
    for (k, v) in &http.headers {
        let at = format!(".http.headers.{k}");
        let Ok(header) = HeaderName::from_bytes(k.as_bytes()) else {
            err(
                diags,
                &at,
                format!("{k:?} is not a valid header name"),
                "use letters, digits and `-`",
            );
            continue;
        };
        if let Some(t) = add(diags, format!("{name}/http.headers.{k}"), v, &at, &plain) {
            headers.push((header, t));
        }
    }
    let body = match &http.body {
        None => None,
        Some(BodyDecl {
            json: Some(_),
            text: Some(_),
            ..
        })
        | Some(BodyDecl {
            json: None,
            text: None,
            ..
        }) => {
            err(
                diags,
                ".http.body",
                "a body needs exactly one of `json` and `text`".into(),
                "keep one of the two",
            );
            None
        }
        Some(BodyDecl {
            json: Some(_),
            content_type: Some(_),
            ..
        }) => {
            err(
                diags,
                ".http.body.content_type",
                "a `json` body is always sent as application/json".into(),
                "remove `content_type`",
            );
            None
        }
        Some(BodyDecl {
            text: Some(template),
            content_type,
            ..
        }) => add(
            diags,
            format!("{name}/http.body"),
            template,
            ".http.body.text",
            &plain,
        )
        .map(|t| Body::Text {
            template: t,
            content_type: content_type
                .clone()
                .unwrap_or_else(|| "text/plain; charset=utf-8".to_owned()),
        }),
        Some(BodyDecl {
            json: Some(value), ..
        }) => {
            let mut compile = |diags: &mut Vec<Diagnostic>, pointer: &str, source: &str| {
                let single = template::is_single_expression(source);
                let key = json_leaf_name(name, pointer, single);
                let at = format!(".http.body.json{}", pointer.replace('/', "."));
                add(diags, key, source, &at, &plain).map(|k| {
                    if single {
                        JsonBody::Value(k)
                    } else {
                        JsonBody::Text(k)
                    }
                })
            };
            compile_json_body(value, "", diags, &mut compile).map(Body::Json)
        }
    };
    if matches!(http.method, Method::Get) && body.is_some() {
        err(
            diags,
            ".http.body",
            "a GET request cannot have a body".into(),
            "use POST, PUT or PATCH, or move the values to `query`",
        );
    }

    if let Some(select) = &decl.response.select
        && !select.is_empty()
        && !select.starts_with('/')
    {
        err(
            diags,
            ".response.select",
            format!("{select:?} is not a JSON pointer"),
            "write it as `/field/0/name`, starting with `/`",
        );
    }
    let output = decl.response.template.as_ref().and_then(|t| {
        let scope = Scope {
            response: true,
            ..plain
        };
        add(
            diags,
            format!("{name}/response.template"),
            t,
            ".response.template",
            &scope,
        )
    });
    if let Some(cache) = &decl.cache
        && cache.ttl.is_zero()
    {
        err(
            diags,
            ".cache.ttl",
            "the cache TTL is zero".into(),
            "give a duration such as `5m`, or remove `cache`",
        );
    }
    if let Some(t) = http.timeout
        && t.is_zero()
    {
        err(
            diags,
            ".http.timeout",
            "the timeout is zero".into(),
            "give a duration such as `10s`, or remove it to use the default",
        );
    }

    Some(PendingHttp {
        method: match http.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        },
        url: url?,
        query,
        headers,
        body,
        select: decl.response.select.clone().filter(|s| !s.is_empty()),
        output,
        env_used,
        env: BTreeMap::new(),
    })
}

/// Checks a parameters schema; returns the declared property names.
fn check_parameters(schema: &Value, err: &mut dyn FnMut(&str, String, &str)) -> BTreeSet<String> {
    let Some(obj) = schema.as_object() else {
        err(
            "",
            "parameters must be a JSON Schema object".into(),
            "write `type: object` with `properties`",
        );
        return BTreeSet::new();
    };
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        err(
            ".type",
            "the parameters schema must have `type: object`".into(),
            "tool arguments are always an object: add `type: object`",
        );
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        err(
            "",
            format!("parameters is not a valid JSON Schema: {e}"),
            "fix the schema (see json-schema.org)",
        );
    } else if let Err(e) = jsonschema::validator_for(schema) {
        err(
            "",
            format!("parameters cannot be compiled: {e}"),
            "fix the schema (see json-schema.org)",
        );
    }
    let props: BTreeSet<String> = obj
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for (j, r) in required.iter().enumerate() {
            if let Some(r) = r.as_str()
                && !props.contains(r)
            {
                err(
                    &format!(".required[{j}]"),
                    format!("`{r}` is required but not declared in `properties`"),
                    "declare it under `properties` or remove it from `required`",
                );
            }
        }
    }
    props
}

/// Minijinja's global functions, which templates may call.
const TEMPLATE_FUNCTIONS: &[&str] = &["range", "dict", "namespace", "debug"];

fn check_variable(var: &str, scope: &Scope<'_>) -> Result<(), (String, String)> {
    let mut parts = var.splitn(3, '.');
    let root = parts.next().unwrap_or_default();
    let field = parts.next();
    match (root, field) {
        ("args", None) => Ok(()),
        ("args", Some(f)) if scope.args.contains(f) => Ok(()),
        ("args", Some(f)) => Err((
            format!("the template reads `args.{f}`, which is not a declared parameter"),
            if scope.args.is_empty() {
                "declare it under `parameters.properties`".to_owned()
            } else {
                format!(
                    "declare it under `parameters.properties` or use one of: {}",
                    scope.args.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            },
        )),
        ("env", Some(v)) if scope.env.contains_key(v) => Ok(()),
        ("env", Some(v)) => Err((
            format!("the template reads `env.{v}`, which the file does not declare"),
            format!("add `{v}: optional` (or `required`) under the file's top-level `env`"),
        )),
        ("env", None) => Err((
            "the template reads all of `env`".to_owned(),
            "read single variables as `env.NAME`".to_owned(),
        )),
        ("response", _) if scope.response => Ok(()),
        (f, _) if TEMPLATE_FUNCTIONS.contains(&f) => Ok(()),
        (other, _) => Err((
            format!("the template reads `{other}`, which does not exist"),
            if scope.response {
                "use `response`, `args.<parameter>` or `env.<variable>`".to_owned()
            } else {
                "use `args.<parameter>` or `env.<variable>`".to_owned()
            },
        )),
    }
}

/// Compiles one templated leaf of a JSON body: (diagnostics, JSON pointer,
/// template source).
type LeafCompiler<'a> = dyn FnMut(&mut Vec<Diagnostic>, &str, &str) -> Option<JsonBody> + 'a;

/// Compiles a JSON body: string leaves holding template syntax become
/// templates, everything else stays literal.
fn compile_json_body(
    value: &Value,
    pointer: &str,
    diags: &mut Vec<Diagnostic>,
    compile: &mut LeafCompiler<'_>,
) -> Option<JsonBody> {
    Some(match value {
        Value::String(s) if template::is_template(s) => compile(diags, pointer, s)?,
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                out.push(compile_json_body(
                    v,
                    &format!("{pointer}/{i}"),
                    diags,
                    compile,
                )?);
            }
            JsonBody::Array(out)
        }
        Value::Object(map) => {
            let mut out = Vec::with_capacity(map.len());
            for (k, v) in map {
                out.push((
                    k.clone(),
                    compile_json_body(v, &format!("{pointer}/{k}"), diags, compile)?,
                ));
            }
            JsonBody::Object(out)
        }
        other => JsonBody::Literal(other.clone()),
    })
}
