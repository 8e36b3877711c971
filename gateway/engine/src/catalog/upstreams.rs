//! Validating `upstreams` and `models` in toolgate.yaml into the
//! [`Upstreams`] of a catalog, collecting every error.

use std::sync::Arc;
use std::time::Duration;

use crate::conversation::Protocol;
use crate::model::routing::{Target, Upstreams};
use crate::model::upstream::{Flavor, Timeouts, Upstream};
use crate::tools::tool::is_valid_name;
use toolgate_config::format::ModelProtocol;
use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, Pos};

/// Builds the upstreams and model routes; with none declared,
/// `OPENAI_BASE_URL`/`OPENAI_API_KEY` define one that serves every model.
pub(super) fn build_upstreams(
    dir: &std::path::Path,
    file: &Loaded<toolgate_config::GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Upstreams {
    let s = &file.value;
    let mut list: Vec<Arc<Upstream>> = Vec::new();
    if s.upstreams.is_empty() {
        list.extend(from_environment(file, env, diags));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, u) in s.upstreams.iter().enumerate() {
        let fresh = seen.insert(u.name.as_str());
        list.extend(declared(file, i, u, fresh, env, diags));
    }
    let mut upstreams = Upstreams::new(list.clone());
    for (i, r) in s.models.iter().enumerate() {
        add_route(dir, file, i, r, &list, &mut upstreams, diags);
    }
    if s.models.is_empty()
        && let Some(first) = list.first()
    {
        // No routes: every model goes to the first upstream.
        let _ = upstreams.add_route(
            "*",
            vec![Target::only(Arc::clone(first), None)],
            Default::default(),
            Default::default(),
            None,
            None,
        );
    }
    upstreams
}

/// Without declared upstreams: `OPENAI_BASE_URL` / `OPENAI_API_KEY` make
/// one named `default`, when either is set.
fn from_environment(
    file: &Loaded<toolgate_config::GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Arc<Upstream>> {
    let base = env("OPENAI_BASE_URL").filter(|v| !v.is_empty());
    let key = env("OPENAI_API_KEY").filter(|v| !v.is_empty());
    if base.is_none() && key.is_none() {
        return None;
    }
    let base = base.unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
    if url::Url::parse(&base).is_err() {
        diags.push(Diagnostic::error(
            &file.file,
            Pos { line: 1, column: 1 },
            format!("OPENAI_BASE_URL {base:?} is not a URL"),
            "set it to the server's base URL, e.g. http://127.0.0.1:8000/v1",
        ));
    }
    let retry = toolgate_config::format::RetryDecl::default();
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        read: Duration::from_secs(120),
        total: toolgate_config::format::default_total_timeout(),
    };
    match Upstream::new("default".into(), &base, key, timeouts, retry) {
        Ok(u) => Some(Arc::new(u)),
        Err(e) => {
            diags.push(Diagnostic::error(
                &file.file,
                Pos { line: 1, column: 1 },
                e,
                "check OPENAI_BASE_URL and the machine's TLS setup",
            ));
            None
        }
    }
}

/// Upstream `i` of the file (`fresh` when no earlier one has its name), or
/// `None` with its errors reported.
fn declared(
    file: &Loaded<toolgate_config::GatewayFile>,
    i: usize,
    u: &toolgate_config::format::UpstreamDecl,
    fresh: bool,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Arc<Upstream>> {
    let at = |p: &str| file.pos(&format!("upstreams[{i}]{p}"));
    let mut ok = true;
    let mut error = |path: &str, message: String, hint: &str| {
        diags.push(Diagnostic::error(&file.file, at(path), message, hint));
        ok = false;
    };
    if !is_valid_name(&u.name) {
        error(
            ".name",
            format!("upstream name {:?} is invalid", u.name),
            "use 1-64 letters, digits, `_` or `-`",
        );
    } else if !fresh {
        error(
            ".name",
            format!("upstream `{}` is declared twice", u.name),
            "rename one of them",
        );
    }
    if !url::Url::parse(&u.base_url).is_ok_and(|url| matches!(url.scheme(), "http" | "https")) {
        error(
            ".base_url",
            format!("base_url {:?} is not an http(s) URL", u.base_url),
            "write it like https://api.openai.com/v1",
        );
    }
    let key = match &u.api_key_env {
        None => None,
        Some(var) => {
            let key = env(var).filter(|v| !v.is_empty());
            if key.is_none() {
                error(
                    ".api_key_env",
                    format!(
                        "environment variable {var} (the API key of upstream `{}`) is not set",
                        u.name
                    ),
                    "set it, or remove `api_key_env` for an upstream without a key",
                );
            }
            key
        }
    };
    if u.azure.is_some()
        && !matches!(
            u.protocol,
            ModelProtocol::OpenaiChat | ModelProtocol::OpenaiResponses
        )
    {
        error(
            ".azure",
            format!(
                "`azure` is for OpenAI's protocols; upstream `{}` speaks {}",
                u.name,
                protocol_of(u.protocol)
            ),
            "remove `azure`, or set `protocol: openai_chat` or `openai_responses`",
        );
    }
    if u.retries.max_attempts == 0 {
        error(
            ".retries.max_attempts",
            "max_attempts must be at least 1".into(),
            "1 means no retry",
        );
    }
    if u.timeout.is_zero() {
        error(
            ".timeout",
            "the total timeout is zero".into(),
            "give the longest a model call may take, e.g. `600s`",
        );
    }
    if !ok {
        return None;
    }
    let timeouts = Timeouts {
        connect: u.connect_timeout,
        read: u.read_timeout,
        total: u.timeout,
    };
    let flavor = Flavor {
        protocol: protocol_of(u.protocol),
        azure_api_version: u.azure.as_ref().map(|a| a.api_version.clone()),
    };
    match Upstream::of(
        u.name.clone(),
        &u.base_url,
        key,
        timeouts,
        u.retries.clone(),
        flavor,
    ) {
        Ok(up) => Some(Arc::new(up)),
        Err(e) => {
            diags.push(Diagnostic::error(
                &file.file,
                at(""),
                e,
                "check the machine's TLS setup",
            ));
            None
        }
    }
}

/// The most targets one route may have.
const MAX_TARGETS: usize = 32;

/// Route `i` of `models:` (a model pattern to one upstream or several
/// targets, with its formatter and template), added to `upstreams`, or its
/// errors reported.
fn add_route(
    dir: &std::path::Path,
    file: &Loaded<toolgate_config::GatewayFile>,
    i: usize,
    r: &toolgate_config::format::ModelRoute,
    list: &[Arc<Upstream>],
    upstreams: &mut Upstreams,
    diags: &mut Vec<Diagnostic>,
) {
    let at = |p: &str| file.pos(&format!("models[{i}]{p}"));
    let find = |name: &str, path: &str, diags: &mut Vec<Diagnostic>| {
        let found = list.iter().find(|u| u.name == name).cloned();
        if found.is_none() {
            let names: Vec<&str> = list.iter().map(|u| u.name.as_str()).collect();
            diags.push(Diagnostic::error(
                &file.file,
                at(path),
                format!("upstream `{name}` does not exist"),
                format!(
                    "name one of: {}",
                    if names.is_empty() {
                        "(none declared)".to_owned()
                    } else {
                        names.join(", ")
                    }
                ),
            ));
        }
        found
    };
    let targets: Vec<Target> = match (&r.upstream, r.targets.is_empty()) {
        (Some(name), true) => match find(name, ".upstream", diags) {
            Some(up) => vec![Target::only(up, r.upstream_model.clone())],
            None => return,
        },
        (None, false) => {
            let mut ok = true;
            if r.upstream_model.is_some() {
                ok = false;
                diags.push(Diagnostic::error(
                    &file.file,
                    at(".upstream_model"),
                    "`upstream_model` goes with `upstream`, not `targets`",
                    "give each target its own `model`",
                ));
            }
            if r.targets.len() > MAX_TARGETS {
                ok = false;
                diags.push(Diagnostic::error(
                    &file.file,
                    at(".targets"),
                    format!(
                        "{} targets; a route has at most {MAX_TARGETS}",
                        r.targets.len()
                    ),
                    "split the model into several routes",
                ));
            }
            let mut targets = Vec::new();
            for (j, t) in r.targets.iter().enumerate() {
                if t.weight == 0 {
                    ok = false;
                    diags.push(Diagnostic::error(
                        &file.file,
                        at(&format!(".targets[{j}].weight")),
                        "a weight of 0",
                        "give it 1 or more; a target only for failover takes a higher `priority`",
                    ));
                }
                match find(&t.upstream, &format!(".targets[{j}].upstream"), diags) {
                    Some(up) => targets.push(Target {
                        upstream: up,
                        model: t.model.clone(),
                        weight: t.weight,
                        priority: t.priority,
                    }),
                    None => ok = false,
                }
            }
            if !ok {
                return;
            }
            targets
        }
        (Some(_), false) => {
            diags.push(Diagnostic::error(
                &file.file,
                at(".targets"),
                "a route has `upstream` and `targets`",
                "keep one: `upstream` for one deployment, `targets` for several",
            ));
            return;
        }
        (None, true) => {
            diags.push(Diagnostic::error(
                &file.file,
                at(""),
                format!("the route of `{}` names no upstream", r.model),
                "add `upstream: NAME`, or `targets: [{upstream: NAME, weight: 1}, ...]`",
            ));
            return;
        }
    };
    let template = match &r.template {
        None => None,
        Some(path) => match std::fs::read_to_string(dir.join(path))
            .map_err(|e| format!("cannot read {path}: {e}"))
            .and_then(crate::model::prompt::PromptTemplate::new)
        {
            Ok(t) => Some(Arc::new(t)),
            Err(e) => {
                diags.push(Diagnostic::error(
                    &file.file,
                    at(".template"),
                    format!("the structured-prompt template is unusable: {e}"),
                    "fix the file (the shipped gateway/templates/structured_prompt.jinja is a starting point)",
                ));
                return;
            }
        },
    };
    if let Err(e) = upstreams.add_route(
        &r.model,
        targets,
        r.cooldown.clone(),
        r.formatter,
        template,
        r.price,
    ) {
        diags.push(Diagnostic::error(
            &file.file,
            at(".model"),
            format!("the pattern `{}` is invalid: {e}", r.model),
            "use `*` for any characters and `?` for one",
        ));
    }
}

/// The engine's name of a configured protocol.
pub(super) fn protocol_of(p: ModelProtocol) -> Protocol {
    match p {
        ModelProtocol::OpenaiChat => Protocol::OpenaiChat,
        ModelProtocol::OpenaiResponses => Protocol::OpenaiResponses,
        ModelProtocol::Anthropic => Protocol::Anthropic,
        ModelProtocol::Gemini => Protocol::Gemini,
    }
}
