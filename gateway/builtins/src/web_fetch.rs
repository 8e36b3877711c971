//! `web_fetch`: fetch a URL and return its readable content: HTML through
//! `dom_smoothie` (a port of Mozilla's Readability) as markdown or text,
//! JSON pretty-printed, other text as is; binary content is refused.
//!
//! Private, loopback and link-local addresses are refused unless
//! `builtins.web_fetch.allow_private` is set: IP literals are checked before
//! each request, names by the client's DNS resolver, and redirects are
//! followed one by one so each hop gets both checks. The client ignores
//! proxy variables (a proxy would resolve names itself, past the check).

use std::net::SocketAddr;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate::tool;
use url::Url;

use super::address::{AddressPolicy, Refusal};
use toolgate::ToolError;
use toolgate::context::ToolContext;
use toolgate_config::format::WebFetchDecl;

/// The HTTP client of `web_fetch` and its address policy.
#[derive(Debug, Clone)]
pub struct Fetcher {
    /// The client with the address policy, or why it could not be built.
    client: Result<reqwest::Client, String>,
    policy: AddressPolicy,
    max_redirects: usize,
    max_bytes: usize,
}

/// A fetched document.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The URL after redirects.
    pub url: Url,
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The body was longer than the byte cap and was cut.
    pub truncated: bool,
}

/// The DNS resolver that refuses names resolving to refused addresses.
struct GuardedResolver {
    policy: AddressPolicy,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = addrs.iter().find(|a| !policy.allows(a.ip())) {
                return Err(Box::new(Refusal { host, ip: bad.ip() }) as _);
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl Fetcher {
    /// The client for `decl`: public addresses only unless `allow_private`.
    pub fn new(decl: &WebFetchDecl) -> Fetcher {
        Fetcher::with_policy(decl, AddressPolicy::new(decl.allow_private))
    }

    /// The client with an address policy of one's own (tests).
    pub fn with_policy(decl: &WebFetchDecl, policy: AddressPolicy) -> Fetcher {
        let client = reqwest::Client::builder()
            .user_agent(concat!(
                "Mozilla/5.0 (compatible; toolgate/",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .dns_resolver(Arc::new(GuardedResolver {
                policy: policy.clone(),
            }))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(decl.timeout)
            .connect_timeout(decl.timeout.min(std::time::Duration::from_secs(10)))
            .referer(false)
            .build()
            // Never a default client: it would lose the address checks.
            .map_err(|e| format!("web_fetch's HTTP client cannot be built: {e}"));
        Fetcher {
            client,
            policy,
            max_redirects: decl.max_redirects,
            max_bytes: decl.max_bytes,
        }
    }

    /// Fetches `url`, following redirects, each hop checked.
    pub async fn fetch(&self, url: &str) -> Result<Fetched, ToolError> {
        let mut url =
            Url::parse(url).map_err(|e| ToolError::Failed(format!("{url:?} is not a URL: {e}")))?;
        let client = self
            .client
            .as_ref()
            .map_err(|e| ToolError::Failed(e.clone()))?;
        for _ in 0..=self.max_redirects {
            self.check(&url)?;
            let resp = client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| request_error(&e, &url))?;
            if resp.status().is_redirection()
                && let Some(location) = resp.headers().get(reqwest::header::LOCATION)
            {
                let location = location.to_str().map_err(|_| {
                    ToolError::Backend(format!("{url} redirects to an unreadable location"))
                })?;
                url = url.join(location).map_err(|e| {
                    ToolError::Backend(format!("{url} redirects to {location:?}: {e}"))
                })?;
                continue;
            }
            let status = resp.status().as_u16();
            let content_type = resp
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let (body, truncated) = read_capped(resp, self.max_bytes, &url).await?;
            return Ok(Fetched {
                url,
                status,
                content_type,
                body,
                truncated,
            });
        }
        Err(ToolError::Backend(format!(
            "more than {} redirects",
            self.max_redirects
        )))
    }

    /// The scheme and, for an IP literal, the address.
    fn check(&self, url: &Url) -> Result<(), ToolError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::Refused(format!(
                "{url}: only http and https URLs are fetched"
            )));
        }
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => None,
            None => return Err(ToolError::Refused(format!("{url} has no host"))),
        };
        if let Some(ip) = ip
            && !self.policy.allows(ip)
        {
            return Err(ToolError::Refused(
                Refusal {
                    host: url.host_str().unwrap_or_default().to_owned(),
                    ip,
                }
                .to_string(),
            ));
        }
        Ok(())
    }
}

/// A request error; a refusal of the resolver is a refusal, and the URL is
/// named once (reqwest's message would repeat it).
fn request_error(e: &reqwest::Error, url: &Url) -> ToolError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(refusal) = err.downcast_ref::<Refusal>() {
            return ToolError::Refused(refusal.to_string());
        }
        source = err.source();
    }
    if e.is_timeout() {
        return ToolError::Backend(format!("{url}: timed out"));
    }
    let cause = std::error::Error::source(e).map_or_else(|| e.to_string(), ToString::to_string);
    ToolError::Backend(format!("{url}: {cause}"))
}

async fn read_capped(
    mut resp: reqwest::Response,
    max: usize,
    url: &Url,
) -> Result<(Vec<u8>, bool), ToolError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| request_error(&e, url))? {
        let room = max.saturating_sub(body.len());
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// How HTML is rendered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FetchFormat {
    /// Markdown (headings, links, lists kept).
    #[default]
    Markdown,
    /// Plain text.
    Text,
}

/// Fetch a web page or document and return its readable content: the main
/// text of an HTML page as markdown (or plain text), JSON pretty-printed,
/// other text as is. Private and local addresses are refused.
#[tool(category = "web", read_only)]
pub async fn web_fetch(
    ctx: &ToolContext,
    /// The http(s) URL.
    url: String,
    /// How to render HTML: `markdown` (default) or `text`.
    format: Option<FetchFormat>,
    /// Longest content returned, in characters (at most the configured cap).
    #[schemars(range(min = 100))]
    max_chars: Option<u64>,
) -> Result<Value, ToolError> {
    let settings = &crate::settings(ctx)?.web_fetch;
    let fetched = crate::settings(ctx)?.fetcher().fetch(&url).await?;
    let status = fetched.status;
    let final_url = fetched.url.to_string();
    let content_type = fetched.content_type.clone().unwrap_or_default();
    let format = format.unwrap_or_default();
    let (title, content, kind) = tokio::task::spawn_blocking(move || render(&fetched, format))
        .await
        .map_err(|e| ToolError::Failed(format!("rendering failed: {e}")))??;
    if status >= 400 {
        let excerpt: String = content.chars().take(300).collect();
        return Err(ToolError::Backend(format!(
            "{final_url} answered HTTP {status}: {excerpt}"
        )));
    }
    let cap = max_chars
        .and_then(|m| usize::try_from(m).ok())
        .map_or(settings.max_chars, |m| m.min(settings.max_chars));
    let total = content.chars().count();
    let content = if total > cap {
        let end = content
            .char_indices()
            .nth(cap)
            .map_or(content.len(), |(i, _)| i);
        format!(
            "{}\n[content truncated: {} more characters]",
            &content[..end],
            total - cap
        )
    } else {
        content
    };
    let mut out = json!({
        "url": final_url,
        "status": status,
        "content_type": content_type,
        "kind": kind,
        "content": content,
    });
    if let Some(title) = title.filter(|t| !t.is_empty()) {
        out["title"] = json!(title);
    }
    Ok(out)
}

/// The readable content of a document: (title, content, kind).
fn render(
    doc: &Fetched,
    format: FetchFormat,
) -> Result<(Option<String>, String, &'static str), ToolError> {
    let ct = doc
        .content_type
        .as_deref()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let mime = ct.split(';').next().unwrap_or_default().trim().to_owned();
    let text = || String::from_utf8_lossy(&doc.body).into_owned();
    let looks_like_html = || {
        let head: String = String::from_utf8_lossy(&doc.body[..doc.body.len().min(512)])
            .trim_start()
            .to_ascii_lowercase();
        head.starts_with("<!doctype html") || head.starts_with("<html")
    };
    if mime == "application/json" || mime.ends_with("+json") {
        return Ok(match serde_json::from_slice::<Value>(&doc.body) {
            Ok(v) => (
                None,
                serde_json::to_string_pretty(&v).unwrap_or_else(|_| text()),
                "json",
            ),
            Err(_) => (None, text(), "text"),
        });
    }
    if mime == "text/html"
        || mime == "application/xhtml+xml"
        || (mime.is_empty() && looks_like_html())
    {
        let html = text();
        // Readability's work grows with nesting depth (a hostile page of
        // 100,000 nested elements would hold a thread for minutes): such a
        // page is reduced to its text, which takes one pass.
        if html_depth(&html) > MAX_HTML_DEPTH {
            return Ok((None, strip_tags(&html), "html"));
        }
        let (title, content) = html_to_readable(&html, doc.url.as_str(), format);
        return Ok((title, content, "html"));
    }
    let is_text = mime.starts_with("text/")
        || mime.ends_with("+xml")
        || matches!(
            mime.as_str(),
            "application/xml"
                | "application/javascript"
                | "application/x-yaml"
                | "application/yaml"
        )
        || (mime.is_empty() && std::str::from_utf8(&doc.body).is_ok());
    if is_text {
        return Ok((None, text(), "text"));
    }
    Err(ToolError::Failed(format!(
        "{}: binary content ({mime}, {} bytes) is not supported",
        doc.url,
        doc.body.len()
    )))
}

/// Readability's article, as markdown or text; the whole page's text when
/// no article stands out.
/// Deepest element nesting Readability is given.
const MAX_HTML_DEPTH: usize = 256;

/// The deepest element nesting of `html`, estimated in one pass over its
/// tags (void and self-closed elements do not nest).
fn html_depth(html: &str) -> usize {
    const VOID: &[&str] = &[
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr", "!doctype",
    ];
    let (mut depth, mut deepest) = (0usize, 0usize);
    let bytes = html.as_bytes();
    let mut i = 0;
    while let Some(off) = bytes[i..].iter().position(|b| *b == b'<') {
        i += off + 1;
        let closing = bytes.get(i) == Some(&b'/');
        let start = if closing { i + 1 } else { i };
        let end = bytes[start..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'!'))
            .map_or(bytes.len(), |n| start + n);
        if end == start {
            continue;
        }
        let name = html[start..end].to_ascii_lowercase();
        let self_closed = bytes[end..]
            .iter()
            .position(|b| *b == b'>')
            .is_some_and(|n| n > 0 && bytes[end + n - 1] == b'/');
        if closing {
            depth = depth.saturating_sub(1);
        } else if !VOID.contains(&name.as_str()) && !self_closed {
            depth += 1;
            deepest = deepest.max(depth);
        }
        i = end;
    }
    deepest
}

fn html_to_readable(html: &str, url: &str, format: FetchFormat) -> (Option<String>, String) {
    let text_mode = match format {
        FetchFormat::Markdown => dom_smoothie::TextMode::Markdown,
        FetchFormat::Text => dom_smoothie::TextMode::Formatted,
    };
    let config = dom_smoothie::Config {
        text_mode,
        max_elements_to_parse: 100_000,
        ..Default::default()
    };
    let parsed = dom_smoothie::Readability::new(html, Some(url), Some(config.clone()))
        .and_then(|mut r| r.parse());
    let parsed = match parsed {
        Ok(article) => Ok(article),
        // Short pages (no "article"): every policy failed; take it raw.
        Err(_) => dom_smoothie::Readability::new(html, Some(url), Some(config))
            .and_then(|mut r| r.parse_with_policy(dom_smoothie::ParsePolicy::Raw)),
    };
    match parsed {
        Ok(article) => (
            Some(article.title.trim().to_owned()),
            article.text_content.trim().to_owned(),
        ),
        Err(_) => (None, strip_tags(html)),
    }
}

/// Last resort: the text between tags, whitespace collapsed.
fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod deep_html {
    use super::*;

    #[test]
    fn depth_is_estimated_from_tags() {
        assert_eq!(
            html_depth("<html><body><p>a<br>b<img src=x/></p></body></html>"),
            3
        );
        assert_eq!(
            html_depth("<!doctype html><div><div></div><div></div></div>"),
            2
        );
    }

    /// A hostile page nested 100,000 elements deep is reduced to its text
    /// at once: no stack overflow (rendering runs on a blocking thread,
    /// where one would abort the gateway) and no minutes of work.
    #[test]
    fn deeply_nested_html_does_not_overflow() {
        for depth in [1_000usize, 100_000] {
            let body = format!(
                "<html><body>{}deep{}</body></html>",
                "<div>".repeat(depth),
                "</div>".repeat(depth)
            );
            let doc = Fetched {
                url: Url::parse("http://example.com/").unwrap(),
                status: 200,
                content_type: Some("text/html".into()),
                body: body.into_bytes(),
                truncated: false,
            };
            for format in [FetchFormat::Markdown, FetchFormat::Text] {
                let (_, content, _) = render(&doc, format).unwrap();
                assert!(content.contains("deep"), "{content}");
            }
        }
    }
}
