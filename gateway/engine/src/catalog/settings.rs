//! The gateway-wide settings of `toolgate.yaml` checked: `limits`,
//! `reload`, `shutdown` and `audit` (the runtime modules that use them
//! trust what passed here).

use std::time::Duration;

use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, GatewayFile};

use crate::support::secrets::Secret;

/// Checks the `limits`, `reload` and `shutdown` settings.
pub(crate) fn check_limits(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let l = &file.value.limits;
    let positive = [
        (
            "limits.max_messages",
            l.max_messages,
            "the most messages one chat request may carry, e.g. 1024",
        ),
        (
            "limits.max_tool_argument_bytes",
            l.max_tool_argument_bytes,
            "the largest arguments of one tool call in bytes, e.g. 262144",
        ),
        (
            "limits.max_concurrent_loops",
            l.max_concurrent_loops,
            "how many tool loops may run at once, e.g. 512",
        ),
        (
            "limits.max_concurrent_streams",
            l.max_concurrent_streams,
            "how many streaming responses may be open at once, e.g. 1024",
        ),
        (
            "limits.max_upstream_response_bytes",
            l.max_upstream_response_bytes,
            "the largest model answer in bytes, e.g. 16777216",
        ),
        (
            "limits.max_tool_calls_per_turn",
            l.max_tool_calls_per_turn,
            "the most tool calls one model turn may make, e.g. 128",
        ),
        (
            "limits.max_connections",
            l.max_connections,
            "how many client connections may be open at once, e.g. 4096",
        ),
    ];
    for (path, value) in [
        ("limits.header_timeout", l.header_timeout),
        ("limits.body_timeout", l.body_timeout),
    ] {
        if value.is_zero() {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(path),
                format!("`{path}` is zero, which would cut off every request"),
                "give a duration such as `10s`",
            ));
        }
    }
    for (path, value, hint) in positive {
        if value == 0 {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(path),
                format!("`{path}` is 0, which would refuse every request"),
                format!("set it to {hint}"),
            ));
        }
    }
    if l.max_request_bytes < 1024 {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("limits.max_request_bytes"),
            format!(
                "`limits.max_request_bytes` is {} bytes, too small for any chat request",
                l.max_request_bytes
            ),
            "set it to at least 1024 (the default is 2097152, 2 MiB)",
        ));
    }
    if l.max_tool_iterations == 0 {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("limits.max_tool_iterations"),
            "`limits.max_tool_iterations` is 0, so no tool loop could call the model",
            "set it to at least 1 (the default is 32)",
        ));
    }
    if file.value.reload.debounce > Duration::from_secs(60) {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("reload.debounce"),
            "`reload.debounce` is longer than a minute, so changes would wait that long",
            "use a short quiet time such as `300ms`",
        ));
    }
}

/// Checks `limits.max_key_share_percent`.
pub(crate) fn check_key_share(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let share = file.value.limits.max_key_share_percent;
    if !(1..=100).contains(&share) {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("limits.max_key_share_percent"),
            format!("`limits.max_key_share_percent` is {share}, not a share from 1 to 100"),
            "give the percent of the gateway's loops and streams one API key may hold, e.g. 50 (the default); 100 lets one key take them all",
        ));
    }
}

/// The most recent calls `console.recent_calls` may keep.
pub const MAX_RECENT_CALLS: usize = 10_000;

/// Checks the `console` section.
pub(crate) fn check_console(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let console = &file.value.console;
    if console.recent_calls > MAX_RECENT_CALLS {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("console.recent_calls"),
            format!(
                "`console.recent_calls` is {}, more than the {MAX_RECENT_CALLS} the console keeps",
                console.recent_calls
            ),
            format!("set it to at most {MAX_RECENT_CALLS} (the default is 100); the audit log keeps every call"),
        ));
    }
}

/// The model of `search.model`, read from its folder (relative to the
/// configuration folder); a model that cannot be read is an error at its
/// line.
pub(crate) fn search_model(
    raw: &toolgate_config::RawConfig,
    diags: &mut Vec<Diagnostic>,
) -> Option<std::sync::Arc<crate::support::embeddings::Embeddings>> {
    let file = &raw.gateway;
    let dir = raw.dir.join(file.value.search.model.as_ref()?);
    match crate::support::embeddings::Embeddings::load(&dir) {
        Ok(model) => Some(model),
        Err(e) => {
            // Files named as from the configuration folder.
            let prefix = format!("{}/", raw.dir.display());
            diags.push(Diagnostic::error(
                &file.file,
                file.pos("search.model"),
                format!("`search.model`: {}", e.to_string().replace(&prefix, "")),
                "name a folder with a model2vec model's model.safetensors, tokenizer.json and config.json (`make search-model` fetches potion-base-2M into target/models), or leave `search.model` out to search by words alone",
            ));
            None
        }
    }
}

/// The most calls `approvals.max_pending` may hold.
pub const MAX_PENDING_APPROVALS: usize = 10_000;

/// Checks the `approvals` section.
pub(crate) fn check_approvals(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let approvals = &file.value.approvals;
    if approvals.wait.is_zero() || approvals.wait > std::time::Duration::from_secs(3600) {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("approvals.wait"),
            "`approvals.wait` must be more than 0 and at most 1h".to_owned(),
            "give how long a held call waits for a person, e.g. `2m` (the default); the client's own request timeout must be longer",
        ));
    }
    if approvals.valid_for < approvals.wait {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("approvals.valid_for"),
            "`approvals.valid_for` is shorter than `approvals.wait`".to_owned(),
            "a request for approval must stay open at least as long as its call waits: give e.g. `15m` (the default)",
        ));
    }
    // Calls that need an approval, and no one who may give one.
    let asks = file
        .value
        .policies
        .iter()
        .position(|p| p.action == toolgate_config::format::PolicyAction::Approve)
        .map(|i| format!("policies[{i}].action"))
        .or_else(|| {
            approvals
                .destructive
                .then(|| "approvals.destructive".to_owned())
        });
    if let Some(path) = asks
        && !file.value.auth.keys.iter().any(|k| k.approver)
    {
        diags.push(Diagnostic::warning(
            &file.file,
            file.pos(&path),
            "calls that need an approval will never run: no API key has `approver: true`",
            "give the person who decides a key with `approver: true` under `auth.keys` (without keys no one may decide)",
        ));
    }
    if !(1..=MAX_PENDING_APPROVALS).contains(&approvals.max_pending) {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("approvals.max_pending"),
            format!(
                "`approvals.max_pending` is {}, not from 1 to {MAX_PENDING_APPROVALS}",
                approvals.max_pending
            ),
            "give how many calls may wait for approval at once, e.g. 100 (the default)",
        ));
    }
}

/// Checks `guards.classifier`.
pub(crate) fn check_classifier(
    file: &Loaded<GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) {
    use toolgate_config::format::GuardAction;
    let Some(c) = &file.value.guards.classifier else {
        return;
    };
    let mut err = |path: &str, message: String, hint: &str| {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos(&format!("guards.classifier.{path}")),
            message,
            hint,
        ));
    };
    if !url::Url::parse(&c.url).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
        err(
            "url",
            format!("{:?} is not an http(s) URL", c.url),
            "give the classifier's endpoint, e.g. http://127.0.0.1:8088/predict",
        );
    }
    if !(0.0..=1.0).contains(&c.threshold) {
        err(
            "threshold",
            format!("the threshold {} is not a score from 0 to 1", c.threshold),
            "give the score from which a result is flagged, e.g. 0.5 (the default)",
        );
    }
    if c.timeout.is_zero() || c.timeout > std::time::Duration::from_secs(60) {
        err(
            "timeout",
            "the timeout must be more than 0 and at most 60s".to_owned(),
            "give how long one classification may take, e.g. `2s` (the default)",
        );
    }
    if matches!(c.action, GuardAction::Redact | GuardAction::Off) {
        err(
            "action",
            "a classifier's finding cannot be redacted (it says nothing of where it is), and `off` is no classifier".to_owned(),
            "use `mark`, `block` or `log`, or remove `classifier`",
        );
    }
    if let Some(name) = &c.api_key_env
        && env(name).is_none()
    {
        err(
            "api_key_env",
            format!("the environment variable `{name}` is not set"),
            "set it to the classifier's token, or remove `api_key_env`",
        );
    }
}

/// Checks the `audit` section.
pub(crate) fn check_audit(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let Some(audit) = &file.value.audit else {
        return;
    };
    if audit.path.trim().is_empty() {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("audit.path"),
            "the audit log path is empty",
            "give a file (relative to the configuration folder), or `-` for standard output",
        ));
    } else if audit.path != "-" && audit.path.ends_with('/') {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("audit.path"),
            format!("the audit log path {:?} is a folder", audit.path),
            "name a file in it, e.g. `logs/audit.jsonl`",
        ));
    }
}

/// The secret of `mcp.session_secret_env`, when one is named: it must be
/// set and at least 32 characters long.
pub(crate) fn mcp_session_secret(
    file: &Loaded<GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Secret> {
    let var = file.value.mcp.session_secret_env.as_ref()?;
    let at = file.pos("mcp.session_secret_env");
    match env(var).map(|v| v.trim().to_owned()) {
        Some(v) if v.len() >= 32 => Some(Secret::new(v.into_bytes())),
        Some(_) => {
            diags.push(Diagnostic::error(
                &file.file,
                at,
                format!("the secret in {var} is shorter than 32 characters"),
                "use a long random secret, e.g. from `openssl rand -hex 32`, the same on every replica",
            ));
            None
        }
        None => {
            diags.push(Diagnostic::error(
                &file.file,
                at,
                format!("environment variable {var} (mcp.session_secret_env) is not set"),
                "set it to a long random secret shared by every replica, or remove `session_secret_env` to sign sessions with a per-process secret",
            ));
            None
        }
    }
}

/// The URL of `mcp.replica_url_env`, when one is named: it must be set
/// and be an `http` or `https` URL with a host and nothing after the
/// authority (the MCP face's path is the request's own). Kept without a
/// trailing `/`.
pub(crate) fn mcp_replica_url(
    file: &Loaded<GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<String> {
    let var = file.value.mcp.replica_url_env.as_ref()?;
    let at = file.pos("mcp.replica_url_env");
    let Some(value) = env(var).map(|v| v.trim().trim_end_matches('/').to_owned()) else {
        diags.push(Diagnostic::error(
            &file.file,
            at,
            format!("environment variable {var} (mcp.replica_url_env) is not set"),
            "set it to the URL other replicas reach this one at, e.g. `http://10.0.0.5:8080`, or remove `replica_url_env`",
        ));
        return None;
    };
    match url::Url::parse(&value) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host().is_some()
                && u.path() == "/"
                && u.query().is_none()
                && u.fragment().is_none()
                && u.username().is_empty()
                && u.password().is_none() =>
        {
            Some(value)
        }
        _ => {
            diags.push(Diagnostic::error(
                &file.file,
                at,
                format!("{var} (mcp.replica_url_env) is not an http(s) URL of a host: {value:?}"),
                "give the scheme, host and port only, e.g. `http://10.0.0.5:8080`",
            ));
            None
        }
    }
}

/// The URL of `state.redis.url_env`, when Redis is configured: the
/// variable must be set and hold a Redis URL. Kept as a [`Secret`] (it may
/// carry a password).
pub(crate) fn redis_url(
    file: &Loaded<GatewayFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Secret> {
    let redis = file.value.state.redis.as_ref()?;
    if redis.timeout.is_zero() {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("state.redis.timeout"),
            "`state.redis.timeout` is zero, so every Redis operation would time out",
            "give a duration such as `250ms`",
        ));
    }
    if redis.prefix.is_empty() {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("state.redis.prefix"),
            "`state.redis.prefix` is empty, so the gateway's keys could clash with anything else in this Redis",
            "use a prefix such as `toolgate:`",
        ));
    }
    let at = file.pos("state.redis.url_env");
    let var = &redis.url_env;
    let Some(url) = env(var).map(|v| v.trim().to_owned()) else {
        diags.push(Diagnostic::error(
            &file.file,
            at,
            format!("environment variable {var} (state.redis.url_env) is not set"),
            "set it to the shared Redis, e.g. `redis://redis:6379/0`, or remove `state.redis` to keep state per replica",
        ));
        return None;
    };
    match redis::Client::open(url.as_str()) {
        Ok(_) => Some(Secret::new(url.into_bytes())),
        Err(e) => {
            diags.push(Diagnostic::error(
                &file.file,
                at,
                format!("{var} (state.redis.url_env) is not a usable Redis URL: {e}"),
                "use `redis://host:port/db` (or `rediss://` for TLS, `redis+unix:///path` for a socket)",
            ));
            None
        }
    }
}

/// Checks the `telemetry` section.
pub(crate) fn check_telemetry(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) {
    let Some(otlp) = &file.value.telemetry.otlp else {
        return;
    };
    if let Some(endpoint) = &otlp.endpoint
        && !matches!(url::Url::parse(endpoint), Ok(u) if matches!(u.scheme(), "http" | "https"))
    {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("telemetry.otlp.endpoint"),
            format!("`telemetry.otlp.endpoint` {endpoint:?} is not an http(s) URL"),
            "give the collector's OTLP/HTTP address, e.g. `http://otel-collector:4318`",
        ));
    }
    if !(0.0..=1.0).contains(&otlp.sample_ratio) {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos("telemetry.otlp.sample_ratio"),
            format!(
                "`telemetry.otlp.sample_ratio` is {}, outside 0.0-1.0",
                otlp.sample_ratio
            ),
            "give the share of traces to record, e.g. `1.0` for all or `0.1` for one in ten",
        ));
    }
}
