//! `connections` and the `credentials` of tool files, checked: the key
//! that seals users' tokens, the public URL, each connection and exchange,
//! and that every `credentials` names one that exists.

use std::sync::Arc;

use indexmap::IndexMap;
use toolgate_config::format::CredentialsDecl;
use toolgate_config::{Diagnostic, RawConfig};

use crate::identity::credentials::{Connections, Exchange, OAuthConnection, Seal, seal};
use crate::support::secrets::Secret;

/// `connections`, ready to use, when declared and valid.
pub(super) fn check(
    raw: &RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> Option<Arc<Connections>> {
    let file = &raw.gateway;
    let forwards = check_uses(raw, diags);
    let Some(decl) = file.value.connections.as_ref() else {
        // `forward` needs no connection: the caller's token is sent as is.
        return forwards
            .then(|| crate::tools::tool::http::client().ok())
            .flatten()
            .map(|http| Arc::new(Connections::forward_only(http)));
    };
    let before = diags.iter().filter(|d| d.is_error()).count();
    let err = |diags: &mut Vec<Diagnostic>, path: &str, message: String, hint: &str| {
        diags.push(Diagnostic::error(&file.file, file.pos(path), message, hint));
    };
    match url::Url::parse(&decl.public_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.query().is_none() => {}
        _ => err(
            diags,
            "connections.public_url",
            format!("`{}` is not an http(s) URL", decl.public_url),
            "give the gateway's URL as a browser reaches it, e.g. `https://gateway.example.com`",
        ),
    }
    let key = |diags: &mut Vec<Diagnostic>, path: &str, var: &str| -> Option<Vec<u8>> {
        match env(var) {
            None => {
                err(
                    diags,
                    path,
                    format!("environment variable {var} ({path}) is not set"),
                    "set it to 32 random bytes in base64, e.g. the output of `openssl rand -base64 32`",
                );
                None
            }
            Some(text) => match seal::decode_key(&text) {
                Ok(k) => Some(k),
                Err(e) => {
                    err(
                        diags,
                        path,
                        format!("the key in {var} ({path}) {e}"),
                        "set it to 32 random bytes in base64, e.g. the output of `openssl rand -base64 32`",
                    );
                    None
                }
            },
        }
    };
    let current = key(diags, "connections.key_env", &decl.key_env);
    let previous = decl
        .previous_key_env
        .as_ref()
        .and_then(|var| key(diags, "connections.previous_key_env", var));
    if decl.link_ttl.is_zero() {
        err(
            diags,
            "connections.link_ttl",
            "`connections.link_ttl` is zero, so every connect link would have expired".into(),
            "give a duration such as `10m`",
        );
    }
    let secret =
        |diags: &mut Vec<Diagnostic>, path: String, var: &Option<String>| -> Option<Secret> {
            let var = var.as_ref()?;
            match env(var) {
                Some(v) => Some(Secret::new(v.trim().as_bytes().to_vec())),
                None => {
                    err(
                        diags,
                        &path,
                        format!("environment variable {var} ({path}) is not set"),
                        "set it to the client's secret, or remove the field for a public client",
                    );
                    None
                }
            }
        };
    let mut oauth = IndexMap::new();
    for (name, c) in &decl.oauth {
        let at = format!("connections.oauth.{name}");
        check_name(diags, raw, &at, name);
        for (field, value) in [
            ("issuer", Some(&c.issuer)),
            ("authorization_endpoint", c.authorization_endpoint.as_ref()),
            ("token_endpoint", c.token_endpoint.as_ref()),
            ("resource", c.resource.as_ref()),
        ] {
            check_url(diags, raw, &format!("{at}.{field}"), value);
        }
        oauth.insert(
            name.clone(),
            OAuthConnection {
                issuer: c.issuer.clone(),
                authorization_endpoint: c.authorization_endpoint.clone(),
                token_endpoint: c.token_endpoint.clone(),
                client_id: c.client_id.clone(),
                client_secret: secret(
                    diags,
                    format!("{at}.client_secret_env"),
                    &c.client_secret_env,
                ),
                scopes: c.scopes.clone(),
                resource: c.resource.clone(),
            },
        );
    }
    let mut exchange = IndexMap::new();
    for (name, x) in &decl.exchange {
        let at = format!("connections.exchange.{name}");
        check_name(diags, raw, &at, name);
        if x.issuer.is_none() && x.token_endpoint.is_none() {
            err(
                diags,
                &at,
                format!("token exchange `{name}` names neither `issuer` nor `token_endpoint`"),
                "name the authorization server's issuer URL (its token endpoint is read from its metadata) or its token endpoint",
            );
        }
        for (field, value) in [
            ("issuer", x.issuer.as_ref()),
            ("token_endpoint", x.token_endpoint.as_ref()),
        ] {
            check_url(diags, raw, &format!("{at}.{field}"), value);
        }
        exchange.insert(
            name.clone(),
            Exchange {
                issuer: x.issuer.clone(),
                token_endpoint: x.token_endpoint.clone(),
                client_id: x.client_id.clone(),
                client_secret: secret(
                    diags,
                    format!("{at}.client_secret_env"),
                    &x.client_secret_env,
                ),
                audience: x.audience.clone(),
                resource: x.resource.clone(),
                scopes: x.scopes.clone(),
            },
        );
    }
    if diags.iter().filter(|d| d.is_error()).count() != before {
        return None;
    }
    let seal = Seal::new(&current?, previous.as_deref()).ok()?;
    let store = raw
        .dir
        .join(decl.store.as_deref().unwrap_or(".toolgate/connections"));
    let http = crate::tools::tool::http::client().ok()?;
    Some(Arc::new(Connections::new(
        &decl.public_url,
        decl.link_ttl,
        seal,
        store,
        oauth,
        exchange,
        http,
    )))
}

/// A connection's name goes into URLs and folder names.
fn check_name(diags: &mut Vec<Diagnostic>, raw: &RawConfig, at: &str, name: &str) {
    if !crate::tools::tool::is_valid_name(name) {
        diags.push(Diagnostic::error(
            &raw.gateway.file,
            raw.gateway.pos(at),
            format!("connection name {name:?} is invalid"),
            "use 1-64 letters, digits, `_` or `-`",
        ));
    }
}

fn check_url(diags: &mut Vec<Diagnostic>, raw: &RawConfig, at: &str, value: Option<&String>) {
    let Some(value) = value else { return };
    if !url::Url::parse(value).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
        diags.push(Diagnostic::error(
            &raw.gateway.file,
            raw.gateway.pos(at),
            format!("`{value}` is not an http(s) URL"),
            "give the authorization server's URL, e.g. `https://auth.example.com`",
        ));
    }
}

/// Every `credentials` (of a tool file or an MCP server) names a declared
/// connection or exchange; a tool file's tools leave `Authorization` to
/// it; an MCP server with it is reached over HTTP. `true` when one of them
/// is `forward`.
fn check_uses(raw: &RawConfig, diags: &mut Vec<Diagnostic>) -> bool {
    let mut forwards = false;
    for file in &raw.tool_files {
        forwards |= file.value.credentials == Some(CredentialsDecl::Forward)
            || file
                .value
                .mcp_servers
                .iter()
                .flatten()
                .any(|s| s.credentials == Some(CredentialsDecl::Forward));
        if let Some(how) = &file.value.credentials {
            check_use(raw, file, "credentials", how, diags);
            for (i, tool) in file.value.tools.iter().enumerate() {
                let Some(tool) = tool else { continue };
                if tool
                    .http
                    .headers
                    .keys()
                    .any(|h| h.eq_ignore_ascii_case("authorization"))
                {
                    diags.push(Diagnostic::error(
                        &file.file,
                        file.pos(&format!("tools[{i}].http.headers")),
                        format!(
                            "tool `{}` sets `Authorization`, and its file's `credentials` sends the caller's token there",
                            tool.name
                        ),
                        "remove the header (or `auth_env` of the OpenAPI import), or move the tool to a file without `credentials`",
                    ));
                }
            }
        }
        for (i, server) in file.value.mcp_servers.iter().enumerate() {
            let Some(server) = server else { continue };
            let Some(how) = &server.credentials else {
                continue;
            };
            let at = format!("mcp_servers[{i}].credentials");
            check_use(raw, file, &at, how, diags);
            if server.transport != toolgate_config::format::McpTransport::Http {
                diags.push(Diagnostic::error(
                    &file.file,
                    file.pos(&at),
                    format!(
                        "MCP server `{}` runs on stdio: there is no request to carry a caller's token",
                        server.name
                    ),
                    "use `credentials` with `transport: http` servers only",
                ));
            }
        }
    }
    forwards
}

/// One `credentials` at `at` of `file`.
fn check_use(
    raw: &RawConfig,
    file: &toolgate_config::load::Loaded<toolgate_config::load::RawToolFile>,
    at: &str,
    how: &CredentialsDecl,
    diags: &mut Vec<Diagnostic>,
) {
    let decl = raw.gateway.value.connections.as_ref();
    let missing = match how {
        CredentialsDecl::PerUser(name) => decl
            .is_none_or(|d| !d.oauth.contains_key(name))
            .then(|| format!("connections.oauth.{name}")),
        CredentialsDecl::TokenExchange(name) => decl
            .is_none_or(|d| !d.exchange.contains_key(name))
            .then(|| format!("connections.exchange.{name}")),
        CredentialsDecl::Forward => None,
    };
    if let Some(path) = missing {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos(at),
            format!(
                "`credentials` names `{path}`, which the gateway's configuration does not declare"
            ),
            "declare it under `connections` in the gateway's configuration, or fix the name",
        ));
    }
    if matches!(how, CredentialsDecl::Forward) && raw.gateway.value.auth.jwt.is_none() {
        diags.push(Diagnostic::error(
            &file.file,
            file.pos(at),
            "`credentials: forward` sends the caller's token, and the gateway accepts none (`auth.jwt` is not set)",
            "configure `auth.jwt`, or use `per_user` or `token_exchange`",
        ));
    }
}
