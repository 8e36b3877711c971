//! The console: pages for people at `/console`, served by the gateway.
//!
//! `/console` is a page without data (the shell) and `/console/static/`
//! its assets (embedded in the binary: htmx, vendored, and the console's
//! own script and style sheet). Everything that shows the gateway's state
//! is a fragment under `/console/ui/`, rendered here with minijinja and
//! asked for by the shell with the key the person entered (kept in the
//! page's session storage, sent as `Authorization` like any client's).
//! The fragments go through the same layers as the API: the key's tool
//! sets decide what is shown, and tools run through the tool API's own
//! path ([`crate::faces::tools::run_tool`]).
//!
//! Who may use it (`console_access`): the console must be enabled; with API keys,
//! the key must have `console: own` or `all` (without keys, the layers'
//! browser rule keeps the gateway to loopback names and
//! `http.allowed_hosts`, against DNS rebinding). Every fragment
//! request carries `HX-Request`, which a page of another origin cannot
//! send without a CORS preflight the gateway never grants.

mod apps;
mod dashboard;
mod form;
mod pages;
mod play;
mod review;

use std::sync::LazyLock;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use toolgate_config::format::ConsoleAccess;

use crate::http::{ApiError, AppState, Caller};

/// The console's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(shell))
        .route("/console/static/{file}", get(asset))
        .route("/console/app-frame", get(apps::frame))
        .route("/console/ui/apps/call", post(apps::call))
        .route("/console/ui/catalog", get(pages::catalog))
        .route(
            "/console/ui/tools/{name}",
            get(pages::tool).post(pages::try_tool),
        )
        .route("/console/ui/activity", get(pages::activity))
        .route(
            "/console/ui/connections/{name}/disconnect",
            post(pages::disconnect),
        )
        .route("/console/ui/review", get(review::page))
        .route("/console/ui/approvals/{id}", post(review::decide))
        .route("/console/ui/changes/{server}/{tool}", post(review::accept))
        .route("/console/ui/playground", get(play::page))
        .route("/console/ui/dashboard", get(dashboard::page))
        .route("/console/ui/play", post(play::play))
}

/// `true` for the paths that need no key: the shell, its assets and the
/// frame MCP Apps run in, which hold no data.
pub fn is_open(path: &str) -> bool {
    path == "/console" || path == "/console/app-frame" || path.starts_with("/console/static/")
}

/// The templates, parsed once.
static TEMPLATES: LazyLock<minijinja::Environment<'static>> = LazyLock::new(|| {
    let mut env = minijinja::Environment::new();
    for (name, source) in [
        (
            "shell.html",
            include_str!("../../../console/templates/shell.html"),
        ),
        (
            "catalog.html",
            include_str!("../../../console/templates/catalog.html"),
        ),
        (
            "tool.html",
            include_str!("../../../console/templates/tool.html"),
        ),
        (
            "result.html",
            include_str!("../../../console/templates/result.html"),
        ),
        (
            "activity.html",
            include_str!("../../../console/templates/activity.html"),
        ),
        (
            "playground.html",
            include_str!("../../../console/templates/playground.html"),
        ),
        (
            "review.html",
            include_str!("../../../console/templates/review.html"),
        ),
        (
            "card.html",
            include_str!("../../../console/templates/card.html"),
        ),
        (
            "summary.html",
            include_str!("../../../console/templates/summary.html"),
        ),
        (
            "fields.html",
            include_str!("../../../console/templates/fields.html"),
        ),
        (
            "dashboard.html",
            include_str!("../../../console/templates/dashboard.html"),
        ),
    ] {
        if let Err(e) = env.add_template(name, source) {
            // A template is part of the binary: a broken one is caught by
            // the tests, and is logged rather than taking the gateway down.
            tracing::error!("console template {name}: {e}");
        }
    }
    env
});

/// `name` rendered with `context`.
fn render(name: &str, context: impl serde::Serialize) -> Result<String, ApiError> {
    TEMPLATES
        .get_template(name)
        .and_then(|t| t.render(context))
        .map_err(|e| {
            tracing::error!("console template {name}: {e:#}");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the console could not render this page (see the gateway's logs)",
            )
        })
}

/// The headers every console answer carries: nothing but the gateway's
/// own scripts, styles, connections and frames (the one MCP Apps run in,
/// `/console/app-frame`), no framing of the console, no referrer.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'";

fn secured(response: Response, cache: &'static str) -> Response {
    with_policy(response, HeaderValue::from_static(CSP), cache)
}

/// `response` with `policy` as its Content-Security-Policy, no sniffing,
/// no referrer and `cache` as its Cache-Control.
fn with_policy(mut response: Response, policy: HeaderValue, cache: &'static str) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

/// An HTML fragment, never cached.
fn fragment(html: String) -> Response {
    secured(Html(html).into_response(), "no-store")
}

fn disabled() -> ApiError {
    ApiError::not_found(
        "console_disabled",
        "the console is off: set `console.enabled: true` in toolgate.yaml",
    )
}

/// `GET /console`: the shell.
async fn shell(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.catalog().settings.console.enabled {
        return Err(disabled());
    }
    let keys = state.catalog().keys().required();
    Ok(secured(
        Html(render("shell.html", minijinja::context! { keys })?).into_response(),
        "no-store",
    ))
}

/// `GET /console/static/{file}`: the embedded assets.
async fn asset(State(state): State<AppState>, Path(file): Path<String>) -> Response {
    if !state.catalog().settings.console.enabled {
        return disabled().into_response();
    }
    let (body, kind): (&'static str, &str) = match file.as_str() {
        "htmx.min.js" => (
            include_str!("../../../console/static/htmx.min.js"),
            "text/javascript; charset=utf-8",
        ),
        "console.js" => (
            include_str!("../../../console/static/console.js"),
            "text/javascript; charset=utf-8",
        ),
        "console.css" => (
            include_str!("../../../console/static/console.css"),
            "text/css; charset=utf-8",
        ),
        // uPlot 1.6.32, MIT (uPlot.LICENSE), from its npm package.
        "uPlot.iife.min.js" => (
            include_str!("../../../console/static/uPlot.iife.min.js"),
            "text/javascript; charset=utf-8",
        ),
        "uPlot.min.css" => (
            include_str!("../../../console/static/uPlot.min.css"),
            "text/css; charset=utf-8",
        ),
        _ => return ApiError::not_found("not_found", "no such console file").into_response(),
    };
    secured(
        ([(header::CONTENT_TYPE, kind)], body).into_response(),
        "no-cache",
    )
}

/// Who is using the console, once admitted.
#[derive(Debug)]
struct Access {
    /// Sees what operators see (`console: all`, or no keys): every key's
    /// recent calls, the configuration's errors, where tools are declared,
    /// MCP servers' errors.
    operator: bool,
}

/// Whether `caller` may use the console's fragments (see the module).
fn console_access(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
) -> Result<Access, ApiError> {
    let catalog = state.catalog();
    let settings = &catalog.settings.console;
    if !settings.enabled {
        return Err(disabled());
    }
    if headers.get("hx-request").is_none() {
        return Err(ApiError::bad_request(
            "console requests come from the console's page (they carry HX-Request)",
        ));
    }
    if let Some(key) = &caller.key {
        return match key.console {
            ConsoleAccess::None => {
                toolgate_engine::support::metrics::record(|m| m.reject("forbidden"));
                Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "console_not_allowed",
                    format!(
                        "API key `{}` may not use the console: give it `console: own` (or `all`) in toolgate.yaml",
                        key.name
                    ),
                ))
            }
            ConsoleAccess::Own => Ok(Access { operator: false }),
            ConsoleAccess::All => Ok(Access { operator: true }),
        };
    }
    if catalog.keys().required() {
        // Only the open paths reach here without a key.
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing_api_key",
            "the console needs an API key",
        ));
    }
    Ok(Access { operator: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_compiles() {
        let names: Vec<&str> = TEMPLATES.templates().map(|(name, _)| name).collect();
        assert_eq!(
            names.len(),
            11,
            "a template failed to compile: only {names:?}"
        );
    }

    #[test]
    fn an_app_s_html_stays_inside_its_attribute() {
        let hostile = "<script>alert('x')</script>\"><img src=x onerror=alert(1)> &amp;";
        let html = render(
            "result.html",
            serde_json::json!({"ok": true, "app": {"uri": "ui://s/a.html", "frame": "/console/app-frame", "html": hostile}}),
        )
        .unwrap();
        let start = html.find("data-app='").unwrap() + "data-app='".len();
        let attribute = &html[start..start + html[start..].find('\'').unwrap()];
        assert!(!attribute.contains(['<', '>', '&']), "{attribute}");
        let decoded: serde_json::Value = serde_json::from_str(attribute).unwrap();
        assert_eq!(decoded["html"], hostile);
    }

    #[test]
    fn only_the_page_and_its_assets_are_open() {
        assert!(is_open("/console"));
        assert!(is_open("/console/static/console.js"));
        assert!(is_open("/console/app-frame"));
        assert!(!is_open("/console/ui/apps/call"));
        assert!(!is_open("/console/ui/catalog"));
        assert!(!is_open("/console/"));
        assert!(!is_open("/consoles"));
    }
}
