//! `POST /v1/chat/completions`: picks the tool set and the route, then
//! either proxies the request untouched or runs the engine's tool loop and
//! encodes its answer (or its events, as SSE chunks) in OpenAI's format.
//! The face's codec: `decode` (a request to the engine's), `encode` (the
//! loop's answer and events to OpenAI's).

pub mod decode;
mod encode;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::Response;
use toolgate_engine::chat::{self, Plan};
use toolgate_engine::conversation::Notices;

use super::common::{self, Admitted};
use crate::http::{ApiError, AppState, Caller, body_error};

pub async fn completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    let request = decode::decode(&body)?;
    // Boxed, as each step below: this future lives as long as the
    // answer, and would otherwise be sized for its largest step.
    let Admitted { plan, places } = Box::pin(common::plan_request(
        &state,
        &caller,
        &headers,
        request,
        chat::Passthrough::Allowed,
    ))
    .await?;
    let the_loop = match plan {
        Plan::Proxy {
            upstream,
            model,
            request,
            who,
            price,
        } => {
            let passed = common::Passed {
                upstream,
                model,
                request,
                who,
                price,
            };
            // Boxed: the call's state is large, and every future that
            // holds this one would carry it (and copy it as it moves).
            return Box::pin(passed.send(&state, &caller, body, places.stream)).await;
        }
        Plan::Loop(l) => l,
    };
    // The request's bytes and headers are slices of the connection's read
    // buffer: held for the loop's whole answer, they would keep that
    // buffer and make the connection read into a new one. The loop has
    // what it needs of them.
    drop((body, headers));
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
