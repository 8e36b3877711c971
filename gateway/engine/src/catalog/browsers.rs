//! What every HTTP endpoint accepts from web browsers, compiled at load
//! from `http.allowed_origins` and `http.allowed_hosts` (and the older
//! spellings under `mcp` and `console`, which add to them).
//!
//! A web page can send a request to any address, a gateway on 127.0.0.1
//! included; the browser only keeps the page from reading an answer it
//! was not allowed. So the gateway itself refuses what a page sends:
//! an `Origin` that is not this machine's, the gateway's own or a listed
//! one, and (without API keys, where DNS rebinding makes the page's
//! origin the gateway's) a `Host` that is not a loopback or listed name.
//! The server applies the rules ([`BrowserRules`]) before any handler.

use toolgate_config::load::Loaded;
use toolgate_config::{Diagnostic, GatewayFile};

/// Host names that always name this machine.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The port part of an allowed origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Port {
    /// `:*`, or no port written: any port.
    Any,
    /// This port (the scheme's default when the `Origin` names none).
    Exact(u16),
}

/// One entry of `http.allowed_origins`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OriginPattern {
    scheme: String,
    host: String,
    port: Port,
}

/// An `Origin` header's value, parsed: scheme, host (lowercase, IPv6
/// without brackets) and port (the scheme's default when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Origin {
    /// Parses `scheme://host[:port]`; `None` for anything else (`null`,
    /// a path, user information).
    pub fn parse(value: &str) -> Option<Origin> {
        let (scheme, rest) = value.trim().split_once("://")?;
        if rest.is_empty() || rest.contains(['/', '@', '?', '#', ' ']) {
            return None;
        }
        let url = url::Url::parse(value.trim()).ok()?;
        let host = match url.host()? {
            url::Host::Domain(d) => d.to_ascii_lowercase(),
            url::Host::Ipv4(ip) => ip.to_string(),
            url::Host::Ipv6(ip) => ip.to_string(),
        };
        Some(Origin {
            scheme: scheme.to_ascii_lowercase(),
            host,
            port: url.port_or_known_default(),
        })
    }

    /// `true` when the origin's host is this machine.
    fn is_loopback(&self) -> bool {
        matches!(self.scheme.as_str(), "http" | "https")
            && LOOPBACK_HOSTS.contains(&self.host.as_str())
    }

    /// `true` when the origin names the host the request was sent to
    /// (`Host`, with its port or the scheme's default): a page the
    /// gateway served itself.
    fn is_host(&self, host: &str) -> bool {
        let (name, port) = split_host(host);
        let port = port.or(match self.scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        });
        self.host.eq_ignore_ascii_case(name) && self.port == port
    }
}

/// `host[:port]` split (`[::1]:8080`, `localhost`, a bare IPv6 literal),
/// brackets removed.
fn split_host(host: &str) -> (&str, Option<u16>) {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (name.ends_with(']') || !name.contains(':')) =>
        {
            (name, port.parse().ok())
        }
        _ => (host, None),
    };
    (name.trim_start_matches('[').trim_end_matches(']'), port)
}

impl OriginPattern {
    fn parse(value: &str) -> Option<OriginPattern> {
        let value = value.trim();
        let (base, any) = match value.strip_suffix(":*") {
            Some(base) => (base, true),
            None => (value, false),
        };
        let origin = Origin::parse(base)?;
        // A port written in the entry is exact; none (or `:*`) is any.
        let written = base
            .split_once("://")
            .is_some_and(|(_, rest)| split_host(rest).1.is_some());
        if any && written {
            return None;
        }
        Some(OriginPattern {
            port: match (written, origin.port) {
                (true, Some(port)) => Port::Exact(port),
                _ => Port::Any,
            },
            scheme: origin.scheme,
            host: origin.host,
        })
    }

    fn matches(&self, origin: &Origin) -> bool {
        self.scheme == origin.scheme
            && self.host == origin.host
            && match self.port {
                Port::Any => true,
                Port::Exact(port) => origin.port == Some(port),
            }
    }
}

/// The browser rules of one catalog.
#[derive(Debug, Clone, Default)]
pub struct BrowserRules {
    origins: Vec<OriginPattern>,
    hosts: Vec<String>,
}

/// Why a request is refused as one a web page may have sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrowserRefusal {
    #[error(
        "requests from the web page at `{0}` are refused: only pages of this machine, the gateway's own and those in `http.allowed_origins` may call the gateway"
    )]
    Origin(String),
    #[error(
        "this request comes from a page of another site (Sec-Fetch-Site: cross-site) and is refused"
    )]
    CrossSite,
    #[error(
        "this gateway has no API keys, so it answers only to loopback names and those in `http.allowed_hosts`; `{0}` is neither (add it there, or configure API keys)"
    )]
    Host(String),
}

impl BrowserRules {
    /// `true` when `host` (a `Host` header's value) is a loopback name or
    /// a listed one (`name`, or `name:port` for that port only).
    pub fn host_allowed(&self, host: &str) -> bool {
        let (name, _) = split_host(host);
        LOOPBACK_HOSTS.iter().any(|h| h.eq_ignore_ascii_case(name))
            || self
                .hosts
                .iter()
                .any(|a| a.eq_ignore_ascii_case(name) || a.eq_ignore_ascii_case(host))
    }

    /// `true` when a page of `origin` may call a gateway reached at `host`.
    pub fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let Some(parsed) = Origin::parse(origin) else {
            return false; // `null` (sandboxed frames, files) and junk
        };
        parsed.is_loopback()
            || host.is_some_and(|h| parsed.is_host(h))
            || self.origins.iter().any(|p| p.matches(&parsed))
    }

    /// The rules for one request: its `Origin`, `Sec-Fetch-Site`, `Host`
    /// (or HTTP/2 authority) and method, and whether the gateway has API
    /// keys. `probe` is a health or metrics path, which answers to any
    /// `Host`.
    pub fn check(&self, request: &BrowserRequest<'_>) -> Result<(), BrowserRefusal> {
        if !request.keys && !request.probe {
            let host = request.host.unwrap_or_default();
            if !self.host_allowed(host) {
                return Err(BrowserRefusal::Host(host.to_owned()));
            }
        }
        match request.origin {
            Some(origin) if !self.origin_allowed(origin, request.host) => {
                Err(BrowserRefusal::Origin(origin.to_owned()))
            }
            Some(_) => Ok(()),
            // Browsers send `Origin` with every request that is not a GET
            // or HEAD; an old one that did not still says where it came from.
            None if request.cross_site && !request.safe_method => Err(BrowserRefusal::CrossSite),
            None => Ok(()),
        }
    }
}

/// What [`BrowserRules::check`] reads of a request.
#[derive(Debug, Clone, Copy, Default)]
pub struct BrowserRequest<'a> {
    pub origin: Option<&'a str>,
    pub host: Option<&'a str>,
    /// `Sec-Fetch-Site: cross-site`.
    pub cross_site: bool,
    /// GET, HEAD or OPTIONS.
    pub safe_method: bool,
    /// The gateway has API keys.
    pub keys: bool,
    /// `/healthz`, `/readyz`, `/metrics`.
    pub probe: bool,
}

/// Checks `http.allowed_origins` and `http.allowed_hosts` (and the older
/// `mcp.allowed_*`, `console.allowed_hosts`) and compiles them.
pub(crate) fn check(file: &Loaded<GatewayFile>, diags: &mut Vec<Diagnostic>) -> BrowserRules {
    let g = &file.value;
    let mut rules = BrowserRules::default();
    let origins = [
        ("http.allowed_origins", &g.http.allowed_origins),
        ("mcp.allowed_origins", &g.mcp.allowed_origins),
    ];
    for (path, list) in origins {
        for (i, value) in list.iter().enumerate() {
            match OriginPattern::parse(value) {
                Some(p) => rules.origins.push(p),
                None => diags.push(Diagnostic::error(
                    &file.file,
                    file.pos(&format!("{path}[{i}]")),
                    format!("{value:?} is not a browser origin"),
                    "write it as a page's origin: scheme, host and optional port, e.g. `https://app.example.com`, `https://app.example.com:8443`, or `http://tools.internal:*` for any port (no path)",
                )),
            }
        }
    }
    let hosts = [
        ("http.allowed_hosts", &g.http.allowed_hosts),
        ("mcp.allowed_hosts", &g.mcp.allowed_hosts),
        ("console.allowed_hosts", &g.console.allowed_hosts),
    ];
    for (path, list) in hosts {
        for (i, host) in list.iter().enumerate() {
            if host.trim().is_empty() || host.contains(['/', ' ', '@']) {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos(&format!("{path}[{i}]")),
                    format!("{host:?} is not a host name"),
                    "give the name the gateway is reached at, e.g. `gateway.internal` or `gateway.internal:8080`",
                ));
            } else {
                rules.hosts.push(host.trim().to_owned());
            }
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(origins: &[&str], hosts: &[&str]) -> BrowserRules {
        BrowserRules {
            origins: origins
                .iter()
                .map(|o| OriginPattern::parse(o).unwrap_or_else(|| panic!("{o}")))
                .collect(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    #[test]
    fn loopback_own_and_listed_origins_pass_others_do_not() {
        let r = rules(
            &[
                "https://app.example.com",
                "http://tools.internal:*",
                "https://x.example:8443",
            ],
            &[],
        );
        let host = Some("gateway.example:8080");
        for ok in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:6274",
            "http://gateway.example:8080",
            "https://app.example.com",
            "https://app.example.com:444",
            "http://tools.internal:9",
            "https://x.example:8443",
        ] {
            assert!(r.origin_allowed(ok, host), "{ok}");
        }
        for refused in [
            "http://evil.example",
            "null",
            "http://gateway.example:8081",
            "https://gateway.example:8080.evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "https://x.example",
            "file://",
            "http://app.example.com",
            "",
            "http://user@localhost",
        ] {
            assert!(!r.origin_allowed(refused, host), "{refused}");
        }
        // Same origin needs a Host to compare with.
        assert!(!r.origin_allowed("http://gateway.example:8080", None));
        // The default port is the scheme's.
        assert!(r.origin_allowed("https://gw.example", Some("gw.example")));
        assert!(!r.origin_allowed("http://gw.example", Some("gw.example:8080")));
    }

    #[test]
    fn hosts_are_loopback_or_listed() {
        let r = rules(&[], &["gateway.internal", "other.internal:9000"]);
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "[::1]:8080",
            "::1",
            "LOCALHOST",
            "gateway.internal:8080",
            "other.internal:9000",
        ] {
            assert!(r.host_allowed(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:8080",
            "other.internal:9001",
            "",
        ] {
            assert!(!r.host_allowed(refused), "{refused}");
        }
    }

    #[test]
    fn the_check_applies_the_host_rule_only_without_keys_and_not_to_probes() {
        let r = rules(&[], &[]);
        let req = BrowserRequest {
            host: Some("rebound.example:8080"),
            ..BrowserRequest::default()
        };
        assert_eq!(
            r.check(&req),
            Err(BrowserRefusal::Host("rebound.example:8080".into()))
        );
        assert_eq!(r.check(&BrowserRequest { keys: true, ..req }), Ok(()));
        assert_eq!(r.check(&BrowserRequest { probe: true, ..req }), Ok(()));
        let page = BrowserRequest {
            origin: Some("http://evil.example"),
            host: Some("127.0.0.1:8080"),
            keys: true,
            ..BrowserRequest::default()
        };
        assert!(matches!(r.check(&page), Err(BrowserRefusal::Origin(_))));
        let old_browser = BrowserRequest {
            origin: None,
            cross_site: true,
            ..page
        };
        assert_eq!(r.check(&old_browser), Err(BrowserRefusal::CrossSite));
        assert_eq!(
            r.check(&BrowserRequest {
                safe_method: true,
                ..old_browser
            }),
            Ok(())
        );
    }

    #[test]
    fn origin_patterns_are_parsed_strictly() {
        for bad in [
            "app.example.com",
            "https://a.example/path",
            "https://a.example:1:*",
            "null",
            "*",
        ] {
            assert_eq!(OriginPattern::parse(bad), None, "{bad}");
        }
    }
}
