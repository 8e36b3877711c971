//! An rmcp error in words: the transport's own error under rmcp's
//! wrappers, whether it means the connection is lost or the gateway's
//! credentials were refused, and a sentence that says what to do.

use rmcp::ServiceError;

use crate::{oauth, spec};

/// The transport's own error inside rmcp's wrappers (which name Rust
/// types).
fn innermost<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> &'a (dyn std::error::Error + 'static) {
    if let Some(ServiceError::TransportSend(t)) = e.downcast_ref::<ServiceError>() {
        return innermost(&*t.error);
    }
    if let Some(t) = e.downcast_ref::<rmcp::transport::DynamicTransportError>() {
        return innermost(&*t.error);
    }
    if let Some(rmcp::service::ClientInitializeError::TransportError { error, .. }) =
        e.downcast_ref::<rmcp::service::ClientInitializeError>()
    {
        return innermost(&*error.error);
    }
    // The HTTP client's own error, under rmcp's "Client error".
    if let Some(rmcp::transport::streamable_http_client::StreamableHttpError::Client(http)) =
        e.downcast_ref::<rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>>()
    {
        return http;
    }
    e
}

/// A reqwest error's text without its URL (and its source, which says why).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text
            .replace(&format!(" for url ({url})"), "")
            .replace(url.as_str(), "<url>");
    }
    match std::error::Error::source(e) {
        Some(source) => format!("{text}: {source}"),
        None => text,
    }
}

/// `true` when the connection itself is gone (the server is unreachable, or
/// no longer knows the session), not when one request got an error status
/// (a 429 or 500 fails that call only).
pub(crate) fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    let inner = innermost(e);
    if let Some(http) = inner.downcast_ref::<reqwest::Error>() {
        return http.is_connect() || http.is_timeout() || http.is_request();
    }
    matches!(
        inner.to_string().as_str(),
        "Session expired (HTTP 404)" | "Transport channel closed" | "unexpected end of stream"
    )
}

/// `true` when the server refused the gateway's credentials (HTTP 401, or
/// 403 for a missing scope): trying again will not help until the
/// configuration gives it a token.
pub(crate) fn needs_token(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        innermost(e).to_string().as_str(),
        "Auth required" | "Insufficient scope"
    )
}

/// An rmcp error of `server` as a sentence: the transport's own error
/// rather than rmcp's wrapper, which names Rust types; a refusal of the
/// gateway's credentials says which setting supplies them.
pub(crate) fn in_words(e: &(dyn std::error::Error + 'static), server: &spec::ServerSpec) -> String {
    let oauth = server.oauth();
    if let Some(ServiceError::Timeout { timeout }) = e.downcast_ref::<ServiceError>() {
        return format!("no answer within {timeout:?}");
    }
    let context = match e.downcast_ref::<rmcp::service::ClientInitializeError>() {
        Some(rmcp::service::ClientInitializeError::TransportError { context, .. }) => {
            format!(" (while {context})")
        }
        _ => String::new(),
    };
    let inner = innermost(e);
    // reqwest's errors name the URL, which may hold a secret.
    let text = match inner.downcast_ref::<reqwest::Error>() {
        Some(http) => without_url(http),
        None => inner.to_string(),
    };
    let words = match text.as_str() {
        "Auth required" => match oauth {
            None => "the server answered 401 Unauthorized: give it a token in this server's `headers` (e.g. `Authorization: \"Bearer {{ env.TOKEN }}\"`)".to_owned(),
            Some(oauth) => format!("the server answered 401 Unauthorized: {}", oauth::what_to_do(&server.name, oauth)),
        },
        "Insufficient scope" => match oauth {
            None => "the server answered 403 (insufficient scope): the token in this server's `headers` lacks a permission it needs".to_owned(),
            Some(spec::OAuthSpec::ClientCredentials { .. }) => "the server answered 403 (insufficient scope): the gateway's token lacks a scope it needs — add it to `oauth.scopes`".to_owned(),
            Some(spec::OAuthSpec::AuthorizationCode { .. }) => format!("the server answered 403 (insufficient scope): the gateway's token lacks a scope it needs — add it to `oauth.scopes` and run `toolgate mcp login {}` again", server.name),
        },
        "Session expired (HTTP 404)" => "the server no longer knows the gateway's session (it restarted?)".to_owned(),
        other => other.to_owned(),
    };
    let connection = match e.downcast_ref::<ServiceError>() {
        Some(ServiceError::TransportSend(_)) => "the connection failed: ",
        _ => "",
    };
    format!("{connection}{words}{context}")
}

/// What a call the server refused for its OAuth token says: the reason,
/// and what renews the token — a login the operator runs again, or the
/// gateway's own request with its client credentials. Never "retry": the
/// same token would be refused again.
pub(crate) fn token_refused(server: &spec::ServerSpec, reason: &str) -> String {
    let name = &server.name;
    let next = match server.oauth() {
        Some(spec::OAuthSpec::AuthorizationCode { .. }) => format!(
            "the saved token cannot be used or refreshed: run `toolgate mcp login {name}` again"
        ),
        _ => {
            "the gateway asks its authorization server for a new token with its client credentials"
                .to_owned()
        }
    };
    format!("MCP server `{name}`: {reason}; {next}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An error as the transport says it (rmcp's auth errors read so).
    #[derive(Debug)]
    struct Said(&'static str);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Said {}

    fn server(oauth: Option<spec::OAuthSpec>) -> spec::ServerSpec {
        spec::ServerSpec {
            name: "docs".into(),
            transport: spec::Transport::Http(spec::HttpSpec {
                url: "https://mcp.example.com/mcp".into(),
                headers: Vec::new(),
                per_request: None,
                oauth,
                credentials: None,
            }),
            tools: spec::ToolFilter::new("", &[], &[]).unwrap(),
            timeout: None,
            startup_timeout: Duration::from_secs(5),
            cache_ttl: None,
            required: false,
            on_change: Default::default(),
            pins: Default::default(),
            file: "tools.d/docs.yaml".into(),
            pos: Default::default(),
            disabled: None,
            sampling: None,
        }
    }

    fn login() -> spec::OAuthSpec {
        spec::OAuthSpec::AuthorizationCode {
            client_id: Some("toolgate".into()),
            client_secret: None,
            client_metadata_url: None,
            scopes: vec!["read".into()],
            redirect_port: 8976,
            token_file: "tokens/docs.json".into(),
        }
    }

    fn client_credentials() -> spec::OAuthSpec {
        spec::OAuthSpec::ClientCredentials {
            client_id: "toolgate".into(),
            client_secret: "s3cret".into(),
            scopes: vec!["read".into()],
        }
    }

    /// A refused token says which setting supplies one: a login says to
    /// log in again, client credentials to add the scope, plain headers
    /// to fix the header. Neither says to retry, which would not help.
    #[test]
    fn a_refused_token_names_the_setting_that_gives_one() {
        let scope = Said("Insufficient scope");
        let said = in_words(&scope, &server(Some(login())));
        assert!(
            said.contains("add it to `oauth.scopes` and run `toolgate mcp login docs` again"),
            "{said}"
        );
        let said = in_words(&scope, &server(Some(client_credentials())));
        assert!(
            said.contains("add it to `oauth.scopes`") && !said.contains("mcp login"),
            "{said}"
        );
        let said = in_words(&scope, &server(None));
        assert!(
            said.contains("the token in this server's `headers`") && !said.contains("oauth"),
            "{said}"
        );
        let unauthorized = Said("Auth required");
        let said = in_words(&unauthorized, &server(None));
        assert!(
            said.contains("401 Unauthorized") && said.contains("`headers`"),
            "{said}"
        );
        for s in [
            &server(None),
            &server(Some(login())),
            &server(Some(client_credentials())),
        ] {
            let said = in_words(&scope, s);
            assert!(
                !said.to_lowercase().contains("retry") && !said.contains("try again"),
                "{said}"
            );
        }
        assert!(needs_token(&scope) && needs_token(&unauthorized));
        assert!(!needs_token(&Said("Session expired (HTTP 404)")));
    }

    #[test]
    fn a_token_that_cannot_be_refreshed_names_what_renews_it_never_a_retry() {
        let expired = Said("Auth required");
        let login = server(Some(login()));
        let said = token_refused(&login, &in_words(&expired, &login));
        assert!(said.starts_with("MCP server `docs`: "), "{said}");
        assert!(
            said.ends_with(
                "the saved token cannot be used or refreshed: run `toolgate mcp login docs` again"
            ),
            "{said}"
        );
        let machine = server(Some(client_credentials()));
        let said = token_refused(&machine, &in_words(&expired, &machine));
        assert!(
            said.contains("a new token with its client credentials") && !said.contains("mcp login"),
            "{said}"
        );
        for said in [
            token_refused(&login, "401 Unauthorized"),
            token_refused(&machine, "401 Unauthorized"),
        ] {
            assert!(
                !said.to_lowercase().contains("retry") && !said.contains("try again"),
                "{said}"
            );
        }
    }
}
