//! Google's Gemini API as a face of the same tool loop:
//! `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`
//! (server-sent events with `alt=sse`, else one JSON array),
//! `:countTokens`, and `GET /v1beta/models[/{model}]`; the same under
//! `/v1/` (Google's SDKs of today call `v1`), where a model list or a
//! model is Google's when the client is one of Google's (its
//! `x-goog-api-key` or `x-goog-api-client` header). The request is decoded
//! into the engine's conversation (`decode`), the tool set is picked as on
//! every face, and the answer or events are encoded as Gemini responses
//! (`encode`). Errors use Google's error body.
//!
//! A stream is exactly `data: {json}` events separated by `\r\n\r\n`: no
//! comments, names or end marker, since Google's clients fail on them. So
//! no keep-alive is sent while tools run.

mod decode;
mod encode;

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolgate_engine::chat::Passthrough;

use super::common::{self, Planned};
use crate::http::{ApiError, AppState, Caller, ErrorShape, body_error};

/// Whether a request is for the Gemini face: its paths, and on the paths
/// it shares with OpenAI's API (`/v1/models[/…]`) a client of Google's.
pub fn is_gemini(path: &str, headers: &HeaderMap) -> bool {
    if path.starts_with("/v1beta/") || path.starts_with("/v1alpha/") || path == "/v1beta" {
        return true;
    }
    if let Some(rest) = path.strip_prefix("/v1/models/")
        && (rest.contains(':') || rest.contains("%3A") || rest.contains("%3a"))
    {
        return true;
    }
    (path == "/v1/models" || path.starts_with("/v1/models/")) && from_google(headers)
}

/// A client of Google's: its key header or its client header.
pub fn from_google(headers: &HeaderMap) -> bool {
    headers.contains_key("x-goog-api-key") || headers.contains_key("x-goog-api-client")
}

/// What a `models/{model}:{method}` path asks.
enum Method {
    Generate { stream: bool },
    CountTokens,
}

/// `{model}:{method}` split at its last colon (`%3A` too).
fn action(path: &str) -> Result<(String, Method), ApiError> {
    let path = path.replace("%3A", ":").replace("%3a", ":");
    let Some((model, method)) = path.rsplit_once(':') else {
        return Err(ApiError::not_found(
            "unknown_method",
            format!(
                "`{path}` names no method; POST models/{{model}}:generateContent, :streamGenerateContent or :countTokens"
            ),
        ));
    };
    let method = match method {
        "generateContent" => Method::Generate { stream: false },
        "streamGenerateContent" => Method::Generate { stream: true },
        "countTokens" => Method::CountTokens,
        other => {
            return Err(ApiError::not_found(
                "unknown_method",
                format!(
                    "the method `{other}` is not served here; this gateway serves generateContent, streamGenerateContent and countTokens"
                ),
            ));
        }
    };
    let model = model.strip_prefix("models/").unwrap_or(model);
    if model.is_empty() {
        return Err(ApiError::bad_request("the path names no model"));
    }
    Ok((model.to_owned(), method))
}

/// `POST …/models/{model}:{method}`.
pub async fn generate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(model_action): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, caller, &model_action, &uri, headers, body)
        .await
        .unwrap_or_else(|e| e.into_shaped(ErrorShape::Google))
}

async fn handle(
    state: AppState,
    caller: Caller,
    model_action: &str,
    uri: &axum::http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let (model, method) = action(model_action)?;
    let stream = match method {
        Method::CountTokens => return count_tokens(&body, &model),
        Method::Generate { stream } => stream,
    };
    let sse = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "alt=sse"));
    // The upstream streams server-sent events: a client that reads a JSON
    // array gets the loop's answer in its own framing.
    let passthrough = if stream && !sse {
        Passthrough::Never
    } else {
        Passthrough::Allowed
    };
    let mut thoughts = false;
    let (_, planned) = common::plan_decoded(&state, &caller, &headers, &body, passthrough, |v| {
        thoughts = decode::field(v, "generationConfig")
            .and_then(|g| decode::field(g, "thinkingConfig"))
            .and_then(|t| decode::field(t, "includeThoughts"))
            == Some(&json!(true));
        decode::decode(v, &model, stream)
    })
    .await?;
    let (the_loop, places, notices) = match planned {
        Planned::Proxied(response) => return Ok(response),
        Planned::Loop {
            the_loop,
            places,
            notices,
        } => (the_loop, places, notices),
    };
    let shown = encode::Shown::new(&model, thoughts);
    let mut encoder = encode::StreamEncoder::new(shown.clone());
    common::respond_with(
        the_loop,
        places,
        notices,
        |answer| axum::Json(encode::whole(answer, &shown)).into_response(),
        move |events, places| {
            let chunks = futures::StreamExt::flat_map(events, move |e| {
                futures::stream::iter(encoder.encode(e))
            });
            streamed(chunks, sse, places)
        },
    )
    .await
}

/// Partial responses framed as Google frames them: server-sent events of
/// `data: {json}\r\n\r\n`, or one JSON array (`[{…},\r\n{…}]`).
fn streamed(
    chunks: impl futures::Stream<Item = Value> + Send + 'static,
    sse: bool,
    places: common::Places,
) -> Response {
    let mut first = true;
    let framed = futures::StreamExt::map(chunks, move |chunk| {
        let _held = &places;
        let text = if sse {
            format!("data: {chunk}\r\n\r\n")
        } else if first {
            format!("[{chunk}")
        } else {
            format!(",\r\n{chunk}")
        };
        first = false;
        Ok::<_, Infallible>(Bytes::from(text))
    });
    let (body, content_type) = if sse {
        (Body::from_stream(framed), "text/event-stream")
    } else {
        let end = futures::stream::once(async { Ok::<_, Infallible>(Bytes::from_static(b"]")) });
        (
            Body::from_stream(futures::StreamExt::chain(framed, end)),
            "application/json; charset=UTF-8",
        )
    };
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// `:countTokens`: the request's tokens, estimated (no upstream is asked;
/// see `common::estimate_tokens`). The body is a request, or
/// `{"generateContentRequest": …}`.
fn count_tokens(body: &Bytes, model: &str) -> Result<Response, ApiError> {
    let original: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
    let request = decode::field(&original, "generateContentRequest").unwrap_or(&original);
    let translated = decode::decode(request, model, false)?;
    let total = common::estimate_tokens(&translated.request);
    Ok(axum::Json(json!({"totalTokens": total})).into_response())
}

/// A model as Google's API lists it.
fn model_entry(name: &str, upstream: &str) -> Value {
    json!({
        "name": format!("models/{name}"),
        "baseModelId": name,
        "version": "001",
        "displayName": name,
        "description": format!("served by toolgate's upstream `{upstream}`"),
        "inputTokenLimit": 1_048_576,
        "outputTokenLimit": 65_536,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
    })
}

/// `GET …/models`: the models routes can serve, in one page (no
/// `nextPageToken`: Google's clients read an empty one as another page).
pub async fn list_models(State(state): State<AppState>) -> Response {
    let models: Vec<Value> = state
        .catalog()
        .upstreams
        .list_models()
        .await
        .iter()
        .map(|(id, upstream)| model_entry(id, upstream))
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

/// `GET …/models/{model}`: one model a route serves, else 404.
pub async fn get_model(State(state): State<AppState>, Path(model): Path<String>) -> Response {
    let model = model.strip_prefix("models/").unwrap_or(&model).to_owned();
    match state.catalog().upstreams.resolve(&model) {
        Some(r) => axum::Json(model_entry(&model, &r.upstream.name)).into_response(),
        None => ApiError::not_found(
            "model_not_found",
            format!("models/{model} is not found: no route of this gateway serves it"),
        )
        .into_shaped(ErrorShape::Google),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_headers_tell_google_s_clients_apart() {
        let none = HeaderMap::new();
        let mut google = HeaderMap::new();
        google.insert(
            "x-goog-api-client",
            "google-genai-sdk/3.6.1".parse().unwrap(),
        );
        assert!(is_gemini("/v1beta/models", &none));
        assert!(is_gemini("/v1/models/gemini-x:generateContent", &none));
        assert!(is_gemini(
            "/v1/models/gemini-x%3AstreamGenerateContent",
            &none
        ));
        assert!(!is_gemini("/v1/models", &none));
        assert!(is_gemini("/v1/models", &google));
        assert!(!is_gemini("/v1/chat/completions", &google));
    }

    #[test]
    fn a_path_names_a_model_and_a_method() {
        let (m, method) = action("gemini-2.5-flash:streamGenerateContent").unwrap();
        assert_eq!(m, "gemini-2.5-flash");
        assert!(matches!(method, Method::Generate { stream: true }));
        assert!(matches!(
            action("m%3AcountTokens").unwrap().1,
            Method::CountTokens
        ));
        assert_eq!(
            action("m:embedContent").err().unwrap().status,
            StatusCode::NOT_FOUND
        );
        assert_eq!(action("m").err().unwrap().status, StatusCode::NOT_FOUND);
    }
}
