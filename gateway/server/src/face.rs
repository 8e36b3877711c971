//! What every face does between parsing its request and encoding the
//! answer: the tool set from the `X-Tool-Set` header, the call context, the
//! engine's plan, the request's places under the caps, and running the loop
//! to a whole answer or to a stream of server-sent events.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use toolgate_engine::chat::{self, Answer, ChatRequest, Event, Loop, Passthrough, Plan};
use toolgate_engine::limits::Permit;

use crate::api::{ApiError, AppState, Caller};

/// The header that picks a tool set when the body does not.
pub const TOOL_SET_HEADER: &str = "x-tool-set";

/// A request the engine planned and the caps admitted.
#[derive(Debug)]
pub struct Admitted {
    pub plan: Plan,
    /// Its places under the caps, held until the response ends.
    pub places: Places,
}

/// A request's places under the stream and loop caps.
#[derive(Debug)]
pub struct Places {
    pub stream: Option<Permit>,
    pub tool_loop: Option<Permit>,
}

/// Plans `request` and takes its places: a stream's under the stream cap,
/// a loop's under the loop cap (503 with `Retry-After` when full).
pub fn admit(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request: ChatRequest,
    passthrough: Passthrough,
) -> Result<Admitted, ApiError> {
    let header_set = match headers.get(TOOL_SET_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("the X-Tool-Set header is not valid text"))?
                .to_owned(),
        ),
    };
    let context = crate::api::call_context(headers, caller)?;
    let catalog = state.catalog();
    let stream = request.stream;
    let plan = chat::plan(
        &catalog,
        &state.services(),
        request,
        header_set,
        caller.key.clone(),
        context,
        passthrough,
    )?;
    let limits = &catalog.settings.limits;
    let key = caller.key.as_deref();
    let stream = match stream {
        true => Some(state.guards.enter_stream(limits, key).map_err(overloaded)?),
        false => None,
    };
    let tool_loop = match &plan {
        Plan::Loop(_) => Some(state.guards.enter_loop(limits, key).map_err(overloaded)?),
        Plan::Proxy { .. } => None,
    };
    Ok(Admitted {
        plan,
        places: Places { stream, tool_loop },
    })
}

/// Runs a planned loop and answers: `whole` encodes an answer, `events` a
/// stream's events (as SSE, kept alive while tools run). The places are
/// held until the answer is sent or the stream ends (or the client leaves).
pub async fn respond(
    the_loop: Loop,
    places: Places,
    whole: impl FnOnce(Answer) -> Value,
    mut events: impl FnMut(Event) -> Vec<SseEvent> + Send + 'static,
) -> Result<Response, ApiError> {
    if places.stream.is_none() {
        let answer = the_loop.run().await?;
        drop(places);
        return Ok(axum::Json(whole(answer)).into_response());
    }
    let stream = the_loop.start_stream().await?;
    let sse = futures::StreamExt::flat_map(stream, move |e| {
        let _held = &places;
        futures::stream::iter(events(e).into_iter().map(Ok::<_, Infallible>))
    });
    Ok(Sse::new(sse)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
        .into_response())
}

/// 503 with `Retry-After` for a request over a concurrency cap.
fn overloaded(full: toolgate_engine::limits::Full) -> ApiError {
    toolgate_engine::metrics::record(|m| m.reject(full.code));
    let mut err = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        full.code,
        full.message,
    );
    err.retry_after = Some(1);
    err
}
