//! `POST /v1/chat/completions`: picks the tool set and the route, then
//! either proxies the request untouched or runs the engine's tool loop and
//! encodes its answer (or its events, as SSE chunks) in OpenAI's format.
//! The face's codec: `decode` (a request to the engine's), `encode` (the
//! loop's answer and events to OpenAI's).

pub mod decode;
mod encode;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use toolgate_engine::chat::{self, Plan};
use toolgate_engine::conversation::Notices;
use toolgate_engine::governance::limits::Permit;

use super::common::{self, Admitted};
use crate::http::{ApiError, AppState, Caller, body_error};
use tracing::Instrument;

pub async fn completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let request = decode::decode(&body)?;
    let Admitted { plan, places } = common::plan_request(
        &state,
        &caller,
        &headers,
        request,
        chat::Passthrough::Allowed,
    )
    .await?;
    let the_loop = match plan {
        Plan::Proxy {
            upstream,
            model,
            request,
        } => {
            let body = request.proxy_body(body, &model);
            let span = toolgate_engine::model::upstream::chat_span(&upstream, &model);
            return proxy(&upstream, body, &caller.request_id, places.stream)
                .instrument(span)
                .await;
        }
        Plan::Loop(l) => *l,
    };
    let model = the_loop.request.model.clone();
    let mut chunks = encode::Chunks::new(&model, the_loop.request.include_usage);
    // Boxed: the loop's state is large, and a proxied request (the common
    // case, and the hot one) should not carry or move it.
    Box::pin(common::respond(
        the_loop,
        places,
        Notices::default(),
        |answer| encode::completion(answer, &model),
        move |e| chunks.encode(e),
    ))
    .await
}

/// Forwards a request and passes the upstream's answer back unchanged:
/// status, content type and body, with its length when it has one (a
/// stream stays a stream). `guard` (a stream's place under the cap) is
/// held until the body ends.
async fn proxy(
    upstream: &toolgate_engine::model::upstream::Upstream,
    body: Bytes,
    request_id: &str,
    guard: Option<Permit>,
) -> Result<Response, ApiError> {
    let reply = upstream.chat_with(body, Some(request_id)).await?;
    let status = reply.response.status();
    let content_type = reply.response.headers().get(header::CONTENT_TYPE).cloned();
    // Not size-capped (nothing is buffered); the upstream's read timeout
    // and total deadline still end a trickling answer.
    let body = upstream.body(reply, usize::MAX);
    let mut out = Response::new(Body::new(Held {
        body,
        _guard: guard,
    }));
    *out.status_mut() = status;
    if let Some(ct) = content_type {
        out.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    Ok(out)
}

/// A body that holds a place under the stream cap until it is dropped.
struct Held<B> {
    body: B,
    _guard: Option<Permit>,
}

impl<B: http_body::Body + Unpin> http_body::Body for Held<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
