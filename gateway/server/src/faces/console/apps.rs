//! MCP Apps in the console: a tool whose MCP server names an interface
//! for it (`_meta.ui.resourceUri`, a `ui://` resource) shows that
//! interface under its result, as an MCP Apps host does.
//!
//! - The interface is shown when a tool set of the caller's that holds
//!   the tool also offers the resource (the rule the MCP face reads
//!   resources by: `resources: [ui://*]` in the set); otherwise the
//!   result says why not. It is read from the server like any resource,
//!   as the caller, bounded by `limits.max_response_bytes`.
//! - It runs in `/console/app-frame`, a document of no data served with
//!   its own policy: a sandbox without `allow-same-origin` (an opaque
//!   origin: the console's key, cookies and pages are out of its reach),
//!   scripts and styles inline, other origins only those the resource
//!   declares (`_meta.ui.csp`, checked to be origins), framed only by the
//!   console. The console hands it the interface's HTML by `postMessage`.
//! - The console's script speaks the MCP Apps protocol to it (`ui/*` over
//!   `postMessage`); the one thing the interface may ask of the gateway
//!   is a call of a tool of its own server (`POST /console/ui/apps/call`),
//!   which runs as the tool API runs it, for the person's key.

use axum::Json;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_engine::catalog::Catalog;
use toolgate_engine::tools::tool::context::CallContext;
use toolgate_engine::tools::tool::mcp::Asked;
use toolgate_engine::tools::tool::{Tool, ToolKind};

use super::console_access;
use crate::http::{ApiError, AppState, Caller};

/// The MIME type of an MCP App's HTML.
const APP_MIME: &str = "text/html;profile=mcp-app";

/// At most this many origins per directive are taken from a resource's
/// declaration; the rest are left out.
const MAX_ORIGINS: usize = 16;

/// The `ui://` interface `tool`'s server names for it, as the gateway
/// offers it.
fn interface_of(tool: &Tool) -> Option<String> {
    let ToolKind::Mcp(mcp) = &tool.kind else {
        return None;
    };
    let meta = mcp.meta.as_deref()?;
    meta.get("ui")
        .and_then(|ui| ui.get("resourceUri"))
        .or_else(|| meta.get("ui/resourceUri"))
        .and_then(Value::as_str)
        .filter(|uri| uri.starts_with("ui://"))
        .map(str::to_owned)
}

/// What the console shows of `tool`'s interface under its result: `None`
/// for a tool without one; else `{uri, frame, html, border}` to run it,
/// or `{uri, problem}` saying why it is not shown.
pub(super) async fn shown(
    state: &AppState,
    catalog: &Catalog,
    caller: &Caller,
    context: &CallContext,
    tool: &Tool,
) -> Option<Value> {
    let uri = interface_of(tool)?;
    let who = caller.subject();
    if !catalog.offers_with_tool(caller.key.as_deref(), &tool.name, &uri, who.as_deref()) {
        return Some(json!({
            "uri": uri,
            "problem": format!(
                "no tool set of yours that holds `{}` offers its interface: add `{uri}` (or `ui://*`) to the set's `resources`",
                tool.name
            ),
        }));
    }
    let registry = catalog.mcp().clone();
    let read = state
        .executor
        .ask_as_caller(catalog, context, Asked::Resource(&uri), |asker| {
            let (registry, uri) = (registry.clone(), uri.clone());
            async move {
                let asker = asker.as_ref().map(|(s, t)| (s.as_str(), t.as_str()));
                registry.read_resource(&uri, asker, None).await
            }
        })
        .await;
    let limit = catalog.settings.limits.max_response_bytes;
    let app = read
        .map_err(|e| format!("the server could not give it: {}", e.message))
        .and_then(|result| {
            serde_json::to_value(&result).map_err(|e| format!("it cannot be read: {e}"))
        })
        .and_then(|result| page(&result, limit));
    Some(match app {
        Ok(app) => json!({
            "uri": uri,
            "frame": frame_path(&app.csp),
            "html": app.html,
            "border": app.border,
        }),
        Err(problem) => json!({"uri": uri, "problem": problem}),
    })
}

/// An interface as read: its HTML and what its resource declares.
#[derive(Debug, PartialEq)]
struct Page {
    html: String,
    csp: Origins,
    border: Option<bool>,
}

/// The interface in a `resources/read` result (JSON): its first HTML
/// content, at most `limit` bytes.
fn page(result: &Value, limit: usize) -> Result<Page, String> {
    let contents = result
        .get("contents")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let html_of = |c: &&Value| {
        let mime = c.get("mimeType").and_then(Value::as_str).unwrap_or("");
        mime == APP_MIME || mime.starts_with("text/html")
    };
    let Some(content) = contents.iter().find(html_of) else {
        return Err(format!("the resource holds no `{APP_MIME}` content"));
    };
    let Some(html) = content.get("text").and_then(Value::as_str) else {
        return Err("the resource's HTML is not text".into());
    };
    if html.len() > limit {
        return Err(format!(
            "its HTML is {} bytes, more than limits.max_response_bytes ({limit})",
            html.len()
        ));
    }
    let ui = content.get("_meta").and_then(|m| m.get("ui"));
    Ok(Page {
        html: html.to_owned(),
        csp: ui
            .and_then(|ui| ui.get("csp"))
            .map(Origins::declared)
            .unwrap_or_default(),
        border: ui
            .and_then(|ui| ui.get("prefersBorder"))
            .and_then(Value::as_bool),
    })
}

/// The origins an interface may reach, by directive (MCP Apps'
/// `McpUiResourceCsp`), each checked to be an origin.
#[derive(Debug, Default, PartialEq, Deserialize)]
pub struct Origins {
    /// `connectDomains`: fetch, XHR, WebSocket.
    #[serde(default)]
    connect: Option<String>,
    /// `resourceDomains`: scripts, styles, images, fonts, media.
    #[serde(default)]
    resource: Option<String>,
    /// `frameDomains`: nested frames.
    #[serde(default)]
    frame: Option<String>,
    /// `baseUriDomains`: `<base href>`.
    #[serde(default)]
    base: Option<String>,
}

impl Origins {
    /// A resource's `_meta.ui.csp`: the origins it declares, those that
    /// are not origins left out.
    fn declared(csp: &Value) -> Origins {
        let list = |field: &str| {
            let kept: Vec<&str> = csp
                .get(field)
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter_map(Value::as_str)
                .filter(|o| is_origin(o))
                .take(MAX_ORIGINS)
                .collect();
            (!kept.is_empty()).then(|| kept.join(" "))
        };
        Origins {
            connect: list("connectDomains"),
            resource: list("resourceDomains"),
            frame: list("frameDomains"),
            base: list("baseUriDomains"),
        }
    }

    /// The origins of one directive from a query (untrusted): those that
    /// are origins, at most [`MAX_ORIGINS`]; `none` when there are none.
    fn directive(list: Option<&str>, none: &str) -> String {
        let kept: Vec<&str> = list
            .unwrap_or_default()
            .split_ascii_whitespace()
            .filter(|o| is_origin(o))
            .take(MAX_ORIGINS)
            .collect();
        if kept.is_empty() {
            none.to_owned()
        } else {
            kept.join(" ")
        }
    }

    /// The frame's `Content-Security-Policy`.
    fn policy(&self) -> String {
        let resource = Origins::directive(self.resource.as_deref(), "");
        let connect = Origins::directive(self.connect.as_deref(), "'none'");
        let frame = Origins::directive(self.frame.as_deref(), "'none'");
        let base = Origins::directive(self.base.as_deref(), "'none'");
        let with = |first: &str| format!("{first} {resource}").trim_end().to_owned();
        format!(
            "sandbox allow-scripts; default-src 'none'; script-src {}; style-src {}; \
             img-src {}; font-src {}; media-src {}; connect-src {connect}; frame-src {frame}; \
             base-uri {base}; form-action 'none'; frame-ancestors 'self'",
            with("'unsafe-inline'"),
            with("'unsafe-inline'"),
            with("data: blob:"),
            with("data:"),
            with("data: blob:"),
        )
    }
}

/// `true` for an origin a policy may name: `http(s)` or `ws(s)`, a host
/// (its first label may be `*`) and a port; nothing else, so that no
/// declaration adds a directive or a keyword.
fn is_origin(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https" | "ws" | "wss") {
        return false;
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let host = host.strip_prefix("*.").unwrap_or(host);
    let label = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    text.len() <= 255
        && host.split('.').all(label)
        && port
            .is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The frame's path with the interface's origins in its query.
fn frame_path(csp: &Origins) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in [
        ("connect", &csp.connect),
        ("resource", &csp.resource),
        ("frame", &csp.frame),
        ("base", &csp.base),
    ] {
        if let Some(value) = value {
            query.append_pair(name, value);
        }
    }
    let query = query.finish();
    if query.is_empty() {
        "/console/app-frame".into()
    } else {
        format!("/console/app-frame?{query}")
    }
}

/// The frame's document: it takes the interface's HTML from the page that
/// framed it (the console), once, and becomes it.
const FRAME: &str = r#"<!doctype html>
<html><head><meta charset="utf-8"><title>MCP App</title><script>
(function () {
  "use strict";
  function take(e) {
    if (e.source !== window.parent || !e.data || e.data.type !== "toolgate/app-html") { return; }
    window.removeEventListener("message", take);
    document.open();
    document.write(String(e.data.html));
    document.close();
  }
  window.addEventListener("message", take);
  window.parent.postMessage({ type: "toolgate/app-frame-ready" }, "*");
})();
</script></head><body></body></html>
"#;

/// `GET /console/app-frame`: the document an interface runs in (no data,
/// so no key: see the module).
pub async fn frame(State(state): State<AppState>, Query(origins): Query<Origins>) -> Response {
    if !state.catalog().settings.console.enabled {
        return super::disabled().into_response();
    }
    match HeaderValue::from_str(&origins.policy()) {
        Ok(policy) => super::with_policy(Html(FRAME).into_response(), policy, "no-cache"),
        Err(_) => ApiError::bad_request("the frame's origins are not text").into_response(),
    }
}

/// A tool call an interface asks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppCall {
    /// The gateway's name of the tool whose interface asks.
    tool: String,
    /// The server's name of the tool it calls (an interface knows its
    /// server's names, not the gateway's).
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// `POST /console/ui/apps/call`: an interface calls a tool of its own
/// server, as the tool API runs it for the person's key; the result in
/// MCP's `CallToolResult` form (a failed call is a result with
/// `isError`, as MCP has it).
pub async fn call(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Json(asked): Json<AppCall>,
) -> Result<Response, ApiError> {
    console_access(&state, &caller, &headers)?;
    let context = crate::faces::common::call_context(&headers, &caller)?;
    let catalog = state.catalog();
    crate::faces::common::list_as(&state, &catalog, &caller).await;
    crate::faces::tools::check_tool(&catalog, &caller, &asked.tool)?;
    let who = caller.subject();
    let server = catalog
        .tool_as(&asked.tool, who.as_deref())
        .filter(|t| interface_of(t).is_some())
        .and_then(|t| match &t.kind {
            ToolKind::Mcp(m) => Some(m.server().to_owned()),
            _ => None,
        })
        .ok_or_else(|| {
            ApiError::bad_request(format!("tool `{}` has no MCP App interface", asked.tool))
        })?;
    let name = catalog
        .tools()
        .find(|t| {
            matches!(&t.kind, ToolKind::Mcp(m) if m.server() == server && m.remote_name() == asked.name)
        })
        .map(|t| t.name.clone())
        .ok_or_else(|| {
            ApiError::not_found(
                "unknown_tool",
                format!(
                    "MCP server `{server}` offers no tool `{}` through the gateway",
                    asked.name
                ),
            )
        })?;
    let arguments = asked.arguments.unwrap_or_else(|| json!({}));
    let result = crate::faces::tools::run_tool(&state, &caller, &context, name, arguments).await?;
    let wire = crate::faces::mcp::wire::result(&result).map_err(|e| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            format!("the result cannot be encoded: {e}"),
        )
    })?;
    let mut response = Json(wire).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_origins_reach_the_policy() {
        for good in [
            "https://api.example.com",
            "https://*.example.com",
            "wss://live.example.com:8443",
            "http://localhost:3000/",
        ] {
            assert!(is_origin(good), "{good}");
        }
        for bad in [
            "*",
            "'unsafe-eval'",
            "https://a.example.com; script-src *",
            "https://a.example.com/path",
            "javascript://x",
            "https://",
            "https://a..b",
            "https://a.b:99999x",
            "data:",
        ] {
            assert!(!is_origin(bad), "{bad}");
        }
    }

    #[test]
    fn an_interface_without_declarations_reaches_nothing_outside() {
        let policy = Origins::default().policy();
        assert!(policy.starts_with("sandbox allow-scripts;"), "{policy}");
        assert!(policy.contains("connect-src 'none'"), "{policy}");
        assert!(policy.contains("script-src 'unsafe-inline';"), "{policy}");
        assert!(policy.contains("frame-ancestors 'self'"), "{policy}");
        assert!(!policy.contains("allow-same-origin"), "{policy}");
    }

    #[test]
    fn declared_origins_go_to_their_directives_and_through_the_query() {
        let declared = Origins::declared(&json!({
            "connectDomains": ["https://api.example.com", "https://x.example.com; img-src *"],
            "resourceDomains": ["https://cdn.example.com"],
        }));
        let path = frame_path(&declared);
        assert_eq!(
            path,
            "/console/app-frame?connect=https%3A%2F%2Fapi.example.com&resource=https%3A%2F%2Fcdn.example.com"
        );
        let query = Query::<Origins>::try_from_uri(&path.parse().unwrap()).unwrap();
        let policy = query.policy();
        assert!(
            policy.contains("connect-src https://api.example.com;"),
            "{policy}"
        );
        assert!(
            policy.contains("script-src 'unsafe-inline' https://cdn.example.com;"),
            "{policy}"
        );
        // A query written by hand is checked again.
        let forged = Query::<Origins>::try_from_uri(
            &"/console/app-frame?connect=*%20%27unsafe-eval%27%3B%20script-src%20*"
                .parse()
                .unwrap(),
        )
        .unwrap();
        assert!(forged.policy().contains("connect-src 'none';"));
    }

    #[test]
    fn the_interface_is_the_first_html_content_within_the_limit() {
        let result = json!({"contents": [
            {"uri": "ui://s/a.txt", "mimeType": "text/plain", "text": "no"},
            {"uri": "ui://s/a.html", "mimeType": APP_MIME, "text": "<p>hi</p>",
             "_meta": {"ui": {"prefersBorder": true, "csp": {"connectDomains": ["https://api.example.com"]}}}},
        ]});
        let page = page(&result, 1000).unwrap();
        assert_eq!(page.html, "<p>hi</p>");
        assert_eq!(page.border, Some(true));
        assert_eq!(page.csp.connect.as_deref(), Some("https://api.example.com"));
        assert!(
            super::page(&result, 4)
                .unwrap_err()
                .contains("max_response_bytes")
        );
        assert!(super::page(&json!({"contents": []}), 10).is_err());
    }
}
