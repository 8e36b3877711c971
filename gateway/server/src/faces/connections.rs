//! Users' upstream accounts (`connections`): connecting one from a
//! browser, seeing which are connected, disconnecting.
//!
//! - `GET /connect/{name}?ticket=...`: a connect link (given in the error
//!   of a tool that acts as the user, or by `POST
//!   /v1/connections/{name}/link`). Open: the sealed ticket names the user;
//!   it redirects to the authorization server.
//! - `GET /connect/callback?code=...&state=...`: where the authorization
//!   server sends the browser back; the token is kept, sealed, for the
//!   user the state names.
//! - `GET /v1/connections`: the caller's accounts, connected or not.
//! - `POST /v1/connections/{name}/link`: a connect link for the caller.
//! - `DELETE /v1/connections/{name}`: the caller disconnects; a key with
//!   `console: all` may name another user with `?subject=`. No endpoint
//!   ever answers with a token.

use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_config::format::ConsoleAccess;
use toolgate_engine::identity::credentials::{ConnectError, Connections};

use crate::http::{ApiError, AppState, Caller};

pub(crate) fn connections(state: &AppState) -> Result<std::sync::Arc<Connections>, ApiError> {
    state.catalog().connections.clone().ok_or_else(|| {
        ApiError::not_found(
            "no_connections",
            "this gateway declares no `connections`: no tool acts as its caller upstream",
        )
    })
}

pub(crate) fn subject(caller: &Caller) -> Result<String, ApiError> {
    caller.subject().ok_or_else(|| {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "no_identity",
            "connections belong to a user, and this gateway has no API keys or tokens to tell who calls",
        )
    })
}

/// A page for the person in the browser.
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title></head><body><h1>{}</h1><p>{}</p></body></html>",
        escape(title),
        escape(title),
        escape(text)
    );
    (
        status,
        [
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CONTENT_SECURITY_POLICY, "default-src 'none'"),
        ],
        Html(body),
    )
        .into_response()
}

fn failed(e: &ConnectError) -> Response {
    let status = match e {
        ConnectError::Unknown(_) => StatusCode::NOT_FOUND,
        ConnectError::BadLink(_) | ConnectError::Expired | ConnectError::Refused(_) => {
            StatusCode::BAD_REQUEST
        }
        ConnectError::Server(_) | ConnectError::Store(_) => StatusCode::BAD_GATEWAY,
    };
    page(status, "Not connected", &e.to_string())
}

#[derive(Deserialize)]
pub struct LinkQuery {
    #[serde(default)]
    ticket: String,
}

/// `GET /connect/{name}?ticket=...`.
pub async fn start(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<LinkQuery>,
) -> Response {
    let Some(conns) = state.catalog().connections.clone() else {
        return page(
            StatusCode::NOT_FOUND,
            "Not connected",
            "this gateway declares no connections",
        );
    };
    match conns.authorize_url(&name, &q.ticket).await {
        Ok(url) => (
            StatusCode::FOUND,
            [
                (header::LOCATION, url),
                (header::CACHE_CONTROL, "no-store".to_owned()),
                (header::REFERRER_POLICY, "no-referrer".to_owned()),
            ],
        )
            .into_response(),
        Err(e) => failed(&e),
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
}

/// `GET /connect/callback?code=...&state=...`.
pub async fn callback(State(state): State<AppState>, Query(q): Query<CallbackQuery>) -> Response {
    let Some(conns) = state.catalog().connections.clone() else {
        return page(
            StatusCode::NOT_FOUND,
            "Not connected",
            "this gateway declares no connections",
        );
    };
    if let Some(error) = q.error {
        let text = match q.error_description {
            Some(d) => format!("the authorization server answered {error}: {d}"),
            None => format!("the authorization server answered {error}"),
        };
        return page(StatusCode::BAD_REQUEST, "Not connected", &text);
    }
    let (Some(code), Some(st)) = (q.code, q.state) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            "the redirect carries no `code` and `state`",
        );
    };
    let store = conns.store(state.shared.as_ref());
    match conns.finish(&store, &code, &st).await {
        Ok((name, _)) => page(
            StatusCode::OK,
            "Connected",
            &format!(
                "Your `{name}` account is connected. You can close this page and call the tool again."
            ),
        ),
        Err(e) => failed(&e),
    }
}

/// `GET /v1/connections`.
pub async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Value>, ApiError> {
    let conns = connections(&state)?;
    let subject = subject(&caller)?;
    let store = conns.store(state.shared.as_ref());
    let status = conns
        .status(&store, &subject)
        .await
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "store_unavailable", e.to_string()))?;
    let data: Vec<Value> = status
        .into_iter()
        .map(|(name, kept)| {
            json!({
                "name": name,
                "connected": kept.is_some(),
                "expires_at": kept.flatten(),
            })
        })
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `POST /v1/connections/{name}/link`.
pub async fn link(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let conns = connections(&state)?;
    let subject = subject(&caller)?;
    if !conns.names().any(|n| n == name) {
        return Err(ApiError::not_found(
            "unknown_connection",
            format!("this gateway has no connection `{name}`"),
        ));
    }
    Ok(Json(
        json!({"name": name, "url": conns.link(&name, &subject)}),
    ))
}

#[derive(Deserialize)]
pub struct DisconnectQuery {
    #[serde(default)]
    subject: Option<String>,
}

/// `DELETE /v1/connections/{name}`.
pub async fn disconnect(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Query(q): Query<DisconnectQuery>,
) -> Result<Json<Value>, ApiError> {
    let conns = connections(&state)?;
    let own = subject(&caller)?;
    let whose = match q.subject {
        Some(other) if other != own => {
            let admin = caller
                .key
                .as_ref()
                .is_some_and(|k| k.console == ConsoleAccess::All);
            if !admin {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "only a key with `console: all` may disconnect another user",
                ));
            }
            other
        }
        _ => own,
    };
    let store = conns.store(state.shared.as_ref());
    let removed = conns
        .disconnect(&store, &name, &whose)
        .await
        .map_err(|e| match e {
            ConnectError::Unknown(_) => ApiError::not_found("unknown_connection", e.to_string()),
            e => ApiError::new(StatusCode::BAD_GATEWAY, "store_unavailable", e.to_string()),
        })?;
    Ok(Json(
        json!({"name": name, "subject": whose, "disconnected": removed}),
    ))
}
