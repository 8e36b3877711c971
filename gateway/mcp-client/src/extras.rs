//! What a server offers besides tools: prompts, resources and resource
//! templates, listed when its capabilities declare them (every page, at
//! most [`MAX_PAGES`]), and the rules that find which server serves a
//! prompt or a URI.
//!
//! Prompts are renamed like tools (the server's `tools.prefix`, the same
//! naming rule), so two servers' prompts never clash; resource URIs stay
//! as the server wrote them (a client may know them), and when two servers
//! list the same URI the first declared serves it — except MCP Apps'
//! interfaces (`ui://` resources), which are namespaced by server
//! ([`app_uri`]): the tool whose `_meta` names one comes with it, so its
//! URI is the gateway's to choose, and two servers' apps never collide.

use rmcp::model::{PaginatedRequestParams, Prompt, Resource, ResourceTemplate};
use rmcp::{Peer, RoleClient, ServiceError};

/// Pages of a list read at most, per list.
pub const MAX_PAGES: usize = 100;

/// The longest URI (or URI template) matched against templates.
pub const MAX_URI_CHARS: usize = 8192;

/// A server's prompts, resources and resource templates, as it listed them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extras {
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

/// Lists what the server's capabilities declare. A list that fails is
/// left empty and said in the logs: tools still work without it.
pub async fn list(peer: &Peer<RoleClient>, server: &str) -> Extras {
    let caps = peer.peer_info().map(|i| i.capabilities.clone());
    let has_prompts = caps.as_ref().is_some_and(|c| c.prompts.is_some());
    let has_resources = caps.as_ref().is_some_and(|c| c.resources.is_some());
    let mut extras = Extras::default();
    if has_prompts {
        extras.prompts = logged(
            server,
            "prompts/list",
            pages(|cursor| async move {
                let page = peer.list_prompts(Some(params(cursor))).await?;
                Ok((page.prompts, page.next_cursor))
            })
            .await,
        );
    }
    if has_resources {
        extras.resources = logged(
            server,
            "resources/list",
            pages(|cursor| async move {
                let page = peer.list_resources(Some(params(cursor))).await?;
                Ok((page.resources, page.next_cursor))
            })
            .await,
        );
        extras.templates = logged(
            server,
            "resources/templates/list",
            pages(|cursor| async move {
                let page = peer.list_resource_templates(Some(params(cursor))).await?;
                Ok((page.resource_templates, page.next_cursor))
            })
            .await,
        );
    }
    extras
}

fn params(cursor: Option<String>) -> PaginatedRequestParams {
    PaginatedRequestParams::default().with_cursor(cursor)
}

fn logged<T>(server: &str, method: &str, listed: Result<Vec<T>, ServiceError>) -> Vec<T> {
    listed.unwrap_or_else(|e| {
        tracing::warn!(mcp_server = %server, "`{method}` of MCP server `{server}` failed: {e}; it is offered empty");
        Vec::new()
    })
}

/// Every page of a list, at most [`MAX_PAGES`].
async fn pages<T, F, Fut>(mut page: F) -> Result<Vec<T>, ServiceError>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let (items, next) = page(cursor).await?;
        out.extend(items);
        cursor = next;
        if cursor.is_none() {
            return Ok(out);
        }
    }
    Err(ServiceError::McpError(rmcp::ErrorData::internal_error(
        format!("the server gave more than {MAX_PAGES} pages"),
        None,
    )))
}

/// `true` when `uri` is one that `template` (RFC 6570) describes: its
/// literal parts in order, each expression standing for at least one
/// character — no `/` for a simple one (`{id}`), anything for a reserved
/// or fragment one (`{+path}`, `{#frag}`). The template becomes a regular
/// expression (the `regex` crate matches in linear time); a URI or template
/// longer than [`MAX_URI_CHARS`] matches nothing.
pub fn template_matches(template: &str, uri: &str) -> bool {
    if template.len() > MAX_URI_CHARS || uri.len() > MAX_URI_CHARS {
        return false;
    }
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        pattern.push_str(&regex::escape(&rest[..open]));
        let expr = &rest[open + 1..open + close];
        pattern.push_str(if expr.starts_with('+') || expr.starts_with('#') {
            "(?s:.+)"
        } else {
            "[^/]+"
        });
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::RegexBuilder::new(&pattern)
        .size_limit(1 << 20)
        .build()
        .is_ok_and(|re| re.is_match(uri))
}

/// The scheme of MCP Apps' interfaces.
const APP_SCHEME: &str = "ui://";

/// An MCP App's `ui://` URI of server `server` as the gateway offers it:
/// `ui://<server>/<the rest>`. `None` for any other URI (kept as written).
pub fn app_uri(server: &str, uri: &str) -> Option<String> {
    uri.strip_prefix(APP_SCHEME)
        .map(|rest| format!("{APP_SCHEME}{server}/{rest}"))
}

/// The URI the server `server` knows for a URI the gateway offers (the
/// inverse of [`app_uri`]); any other URI is its own.
pub fn upstream_uri<'a>(server: &str, uri: &'a str) -> std::borrow::Cow<'a, str> {
    match uri
        .strip_prefix(APP_SCHEME)
        .and_then(|rest| rest.strip_prefix(server))
        .and_then(|rest| rest.strip_prefix('/'))
    {
        Some(rest) => std::borrow::Cow::Owned(format!("{APP_SCHEME}{rest}")),
        None => std::borrow::Cow::Borrowed(uri),
    }
}

/// A tool's `_meta` with the app interface it names (`ui.resourceUri`, or
/// the older `ui/resourceUri`) as the gateway offers it.
pub fn app_meta(
    server: &str,
    mut meta: serde_json::Map<String, serde_json::Value>,
) -> serde_json::Map<String, serde_json::Value> {
    let rewrite = |v: &mut serde_json::Value| {
        if let Some(uri) = v.as_str().and_then(|u| app_uri(server, u)) {
            *v = serde_json::Value::String(uri);
        }
    };
    if let Some(v) = meta.get_mut("ui").and_then(|ui| ui.get_mut("resourceUri")) {
        rewrite(v);
    }
    if let Some(v) = meta.get_mut("ui/resourceUri") {
        rewrite(v);
    }
    meta
}

/// A server's resources and templates with their app URIs as the gateway
/// offers them.
pub(crate) fn offered(server: &str, extras: &Extras) -> (Vec<Resource>, Vec<ResourceTemplate>) {
    let resources = extras
        .resources
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(uri) = app_uri(server, &r.uri) {
                r.uri = uri;
            }
            r
        })
        .collect();
    let templates = extras
        .templates
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if let Some(uri) = app_uri(server, &t.uri_template) {
                t.uri_template = uri;
            }
            t
        })
        .collect();
    (resources, templates)
}

/// A read's contents with their app URIs as the gateway offers them.
pub(crate) fn offered_contents(server: &str, result: &mut rmcp::model::ReadResourceResult) {
    use rmcp::model::ResourceContents;
    for c in &mut result.contents {
        let uri = match c {
            ResourceContents::TextResourceContents { uri, .. }
            | ResourceContents::BlobResourceContents { uri, .. } => uri,
            _ => continue,
        };
        if let Some(offered) = app_uri(server, uri) {
            *uri = offered;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_the_uris_they_describe() {
        let t = "test://template/{id}/data";
        assert!(template_matches(t, "test://template/123/data"));
        assert!(!template_matches(t, "test://template//data"));
        assert!(!template_matches(t, "test://template/1/2/data"));
        assert!(!template_matches(t, "test://template/123/data/more"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches("x://{a}{b}", "x://ab"));
        assert!(template_matches("plain://uri", "plain://uri"));
        assert!(!template_matches("broken://{id", "broken://{id"));
        let long = "a".repeat(MAX_URI_CHARS + 1);
        assert!(!template_matches("{+x}", &long));
        // Many expressions over a long URI: matched in linear time.
        let template = "x://{+a}b{+c}b{+d}b{+e}b{+f}b{+g}b{+h}b{+i}c";
        assert!(!template_matches(
            template,
            &format!("x://{}", "b".repeat(4000))
        ));
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_template_and_uri_are_matched_without_panicking(
            template in "[a-z:/{}+#]{0,40}",
            uri in "[a-z:/{}]{0,60}",
        ) {
            let _ = template_matches(&template, &uri);
        }

        #[test]
        fn a_uri_made_from_a_template_matches_it(
            prefix in "[a-z]{1,8}://[a-z/]{0,8}",
            value in "[a-z0-9]{1,12}",
            suffix in "(/[a-z]{1,6}){0,2}",
        ) {
            let template = format!("{prefix}{{id}}{suffix}");
            let uri = format!("{prefix}{value}{suffix}");
            prop_assert!(template_matches(&template, &uri));
        }
    }

    #[test]
    fn app_uris_are_namespaced_by_server_and_found_again() {
        assert_eq!(
            app_uri("py", "ui://py/dashboard.html").as_deref(),
            Some("ui://py/py/dashboard.html")
        );
        assert_eq!(app_uri("py", "demo://x"), None);
        assert_eq!(
            upstream_uri("py", "ui://py/py/dashboard.html"),
            "ui://py/dashboard.html"
        );
        // Another server's app, or another scheme, is left as it is.
        assert_eq!(
            upstream_uri("other", "ui://py/py/dashboard.html"),
            "ui://py/py/dashboard.html"
        );
        assert_eq!(upstream_uri("py", "demo://x"), "demo://x");
        let meta = serde_json::json!({"ui": {"resourceUri": "ui://a.html"}, "ui/resourceUri": "ui://a.html", "other": "ui://keep"});
        let offered = app_meta("s", meta.as_object().cloned().unwrap_or_default());
        assert_eq!(offered["ui"]["resourceUri"], "ui://s/a.html");
        assert_eq!(offered["ui/resourceUri"], "ui://s/a.html");
        assert_eq!(offered["other"], "ui://keep");
    }
}
