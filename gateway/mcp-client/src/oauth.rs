//! OAuth 2.1 authorization of the gateway at an MCP server (`oauth` of an
//! HTTP server), with rmcp's authorization module: discovery of the
//! server's protected-resource metadata and its authorization server's
//! metadata, PKCE, dynamic client registration or client ID metadata
//! documents, the `resource` indicator, and refresh.
//!
//! - `client_credentials`: a token is requested when a session starts;
//!   when it expires, the server's 401 ends the session and the supervisor
//!   starts a new one, with a new token.
//! - `authorization_code`: [`login`] (run by `toolgate mcp login SERVER`)
//!   prints the authorization URL for a person, receives the redirect on
//!   127.0.0.1 and keeps the token in the server's token file
//!   ([`TokenFile`], readable by the gateway's user only). A session reads
//!   it, and rmcp refreshes the token (saving the new one) when the server
//!   refuses it.
//!
//! Tokens and secrets never reach logs or errors: rmcp's types print them
//! redacted, and errors here are written in words without them.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, ClientCredentialsConfig,
    CredentialStore, OAuthClientConfig, OAuthState, StoredCredentials,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::spec::OAuthSpec;

/// The largest token file read.
const MAX_TOKEN_FILE: u64 = 1024 * 1024;

/// A server's token, kept in a file only the gateway's user can read.
#[derive(Debug, Clone)]
pub struct TokenFile {
    path: PathBuf,
}

impl TokenFile {
    pub fn new(path: PathBuf) -> TokenFile {
        TokenFile { path }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> AuthError {
        AuthError::CredentialStoreError(format!("{what} {}: {e}", self.path.display()))
    }
}

#[async_trait::async_trait]
impl CredentialStore for TokenFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let file = match tokio::fs::File::open(&self.path).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.error("cannot read the token file", e)),
        };
        let mut text = Vec::new();
        file.take(MAX_TOKEN_FILE + 1)
            .read_to_end(&mut text)
            .await
            .map_err(|e| self.error("cannot read the token file", e))?;
        if text.len() as u64 > MAX_TOKEN_FILE {
            return Err(self.error("the token file is larger than 1 MiB:", "not read"));
        }
        // The parse error would quote the file: only its position is told.
        serde_json::from_slice(&text).map(Some).map_err(|e| {
            self.error(
                "the token file is not valid",
                format_args!("line {} column {}", e.line(), e.column()),
            )
        })
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let path = self.path.clone();
        let text = serde_json::to_vec_pretty(&credentials)
            .map_err(|e| self.error("cannot write the token file", e))?;
        tokio::task::spawn_blocking(move || write_private(&path, &text))
            .await
            .map_err(|e| self.error("cannot write the token file", e))?
            .map_err(|e| self.error("cannot write the token file", e))
    }

    async fn clear(&self) -> Result<(), AuthError> {
        match tokio::fs::remove_file(&self.path).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(self.error("cannot remove the token file", e))
            }
            _ => Ok(()),
        }
    }
}

/// Writes `bytes` to `path` readable by its owner only: a new file beside
/// it, renamed over it (a reader never sees half a token).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Why the gateway is not authorized at a server, in words.
pub fn in_words(e: &AuthError) -> String {
    match e {
        AuthError::AuthorizationRequired => {
            "the server needs an authorization the gateway does not have yet".into()
        }
        other => other.to_string(),
    }
}

/// What to do when the server refuses the gateway's token.
pub fn what_to_do(server: &str, spec: &OAuthSpec) -> String {
    match spec {
        OAuthSpec::ClientCredentials { .. } => {
            "the server refused the client credentials' token: check `oauth` (its client and scopes)".into()
        }
        OAuthSpec::AuthorizationCode { .. } => format!(
            "the server refused the token and it could not be refreshed: run `toolgate mcp login {server}` again"
        ),
    }
}

/// The authorization a session starts with: for client credentials, a new
/// token; for the authorization code, the token file's (refreshed by the
/// session when it expires). `Err` says why, and what to do.
pub async fn authorize(
    server: &str,
    url: &str,
    spec: &OAuthSpec,
) -> Result<AuthorizationManager, String> {
    match spec {
        OAuthSpec::ClientCredentials {
            client_id,
            client_secret,
            scopes,
        } => {
            let mut state = OAuthState::new(url, None)
                .await
                .map_err(|e| format!("OAuth: {}", in_words(&e)))?;
            state
                .authenticate_client_credentials(ClientCredentialsConfig::ClientSecret {
                    client_id: client_id.clone(),
                    client_secret: client_secret.clone(),
                    scopes: scopes.clone(),
                    resource: Some(url.to_owned()),
                })
                .await
                .map_err(|e| {
                    format!(
                        "OAuth client credentials were refused: {} — check `oauth` (client id, secret, scopes)",
                        in_words(&e)
                    )
                })?;
            state
                .into_authorization_manager()
                .ok_or_else(|| "OAuth: the client credentials flow did not end authorized".into())
        }
        OAuthSpec::AuthorizationCode {
            client_id,
            client_secret,
            redirect_port,
            token_file,
            ..
        } => {
            let not_yet = || {
                format!(
                    "not authorized yet: run `toolgate mcp login {server}` and open the URL it prints"
                )
            };
            let mut manager = AuthorizationManager::new(url)
                .await
                .map_err(|e| format!("OAuth: {}", in_words(&e)))?;
            manager.set_credential_store(TokenFile::new(token_file.clone()));
            let stored = manager.initialize_from_store().await.map_err(|e| match e {
                AuthError::CredentialStoreError(why) => format!("OAuth: {why}"),
                other => format!("OAuth: {}", in_words(&other)),
            })?;
            if !stored {
                return Err(not_yet());
            }
            // A confidential client needs its secret to refresh.
            if let (Some(id), Some(secret)) = (client_id, client_secret) {
                manager
                    .configure_client(
                        OAuthClientConfig::new(id.clone(), redirect_uri(*redirect_port))
                            .with_client_secret(secret.clone()),
                    )
                    .map_err(|e| format!("OAuth: {}", in_words(&e)))?;
            }
            Ok(manager)
        }
    }
}

/// The redirect URI `toolgate mcp login` receives the code on.
pub fn redirect_uri(port: u16) -> String {
    format!("http://127.0.0.1:{port}/callback")
}

/// How long [`login`] waits for the person to authorize.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// The authorization code flow for `server` at `url`: `show` is given the
/// URL to open, then the redirect is awaited on 127.0.0.1 (at most
/// [`LOGIN_TIMEOUT`]), the code exchanged and the token kept in the token
/// file. `Err` says what failed.
pub async fn login(
    url: &str,
    spec: &OAuthSpec,
    show: impl FnOnce(&str),
) -> Result<PathBuf, String> {
    let OAuthSpec::AuthorizationCode {
        client_id,
        client_secret,
        client_metadata_url,
        scopes,
        redirect_port,
        token_file,
    } = spec
    else {
        return Err(
            "this server uses client credentials: the gateway authorizes itself, no login is needed"
                .into(),
        );
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", *redirect_port))
        .await
        .map_err(|e| {
            format!("cannot receive the redirect on 127.0.0.1:{redirect_port}: {e} — free the port, or set `oauth.redirect_port`")
        })?;
    let mut manager = AuthorizationManager::new(url)
        .await
        .map_err(|e| format!("OAuth: {}", in_words(&e)))?;
    manager.set_credential_store(TokenFile::new(token_file.clone()));
    let mut state = OAuthState::Unauthorized(manager);
    let mut request =
        AuthorizationRequest::new(redirect_uri(*redirect_port)).with_client_name("toolgate");
    if !scopes.is_empty() {
        request = request.with_scopes(scopes.iter().cloned());
    }
    if let Some(id) = client_id {
        request = request.with_preregistered_client(id.clone());
    }
    if let Some(secret) = client_secret {
        request = request.with_client_secret(secret.clone());
    }
    if let Some(u) = client_metadata_url {
        request = request.with_client_metadata_url(u.clone());
    }
    // The server's own challenge may name its metadata and the scopes it
    // wants: ask it first.
    if let Some(challenge) = challenge(url).await {
        request = request.with_challenge(challenge);
    }
    state
        .start_authorization(request)
        .await
        .map_err(|e| format!("cannot start the authorization: {}", in_words(&e)))?;
    let authorize_at = state
        .get_authorization_url()
        .await
        .map_err(|e| format!("cannot start the authorization: {}", in_words(&e)))?;
    show(&authorize_at);
    let callback = tokio::time::timeout(LOGIN_TIMEOUT, receive_redirect(&listener, *redirect_port))
        .await
        .map_err(|_| "no redirect came back within 5 minutes".to_owned())??;
    state.handle_callback_url(&callback).await.map_err(|e| {
        format!(
            "the authorization server's answer was refused: {}",
            in_words(&e)
        )
    })?;
    Ok(token_file.clone())
}

/// The `WWW-Authenticate` challenge the server answers an unauthorized
/// `initialize` with, if it does (within 30 s; no redirect followed).
async fn challenge(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .ok()?;
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "toolgate", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let response = client
        .post(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, text/event-stream",
        )
        .json(&initialize)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The largest request line and headers read from the browser.
const MAX_REDIRECT_REQUEST: usize = 16 * 1024;

/// Waits for the browser's `GET /callback?...` on `listener`, answers it
/// with a page saying what happened, and returns the full callback URL.
/// Other requests (a favicon) are answered 404 and waited past.
async fn receive_redirect(listener: &tokio::net::TcpListener, port: u16) -> Result<String, String> {
    loop {
        let (mut conn, _) = listener
            .accept()
            .await
            .map_err(|e| format!("cannot receive the redirect: {e}"))?;
        let mut buf = Vec::with_capacity(1024);
        let mut chunk = [0u8; 1024];
        let head = loop {
            let n = match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut chunk)).await
            {
                Ok(Ok(n)) if n > 0 => n,
                _ => break None,
            };
            buf.extend_from_slice(&chunk[..n]);
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                break Some(String::from_utf8_lossy(&buf).into_owned());
            }
            if buf.len() > MAX_REDIRECT_REQUEST {
                break None;
            }
        };
        let Some(head) = head else { continue };
        let target = head
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("GET "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default();
        if !target.starts_with("/callback?") {
            let _ = conn
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
            continue;
        }
        let body = "<!doctype html><title>toolgate</title><p>toolgate received the authorization. You can close this tab; the command line says whether it worked.</p>";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(answer.as_bytes()).await;
        return Ok(format!("http://127.0.0.1:{port}{target}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_token_file_is_private_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("oauth/server.json");
        let store = TokenFile::new(path.clone());
        assert!(store.load().await.unwrap().is_none());
        let credentials =
            StoredCredentials::new("client".into(), None, vec!["read".into()], Some(1));
        store.save(credentials).await.unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let loaded = store.load().await.unwrap().unwrap();
        assert_eq!(loaded.client_id, "client");
        assert_eq!(loaded.granted_scopes, ["read"]);
        std::fs::write(&path, "{\"client_id\": \"secret-ish\", broken").unwrap();
        let e = store.load().await.unwrap_err().to_string();
        assert!(e.contains("not valid") && !e.contains("secret-ish"), "{e}");
        store.clear().await.unwrap();
        assert!(store.load().await.unwrap().is_none());
    }
}
