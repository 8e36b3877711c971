//! The service every connection runs. The hottest routes,
//! `POST /v1/chat/completions` and `POST /v1/messages`, are served without
//! the router: the same steps the layers take ([`Observed`], [`identify`],
//! [`read_body`]) run in one pass before the handler, without route
//! matching, the boxed layers and the extractors around them
//! (`tests/bench/proxy.sh` and `instructions.sh` measure what that saves
//! per proxied request). Every other request goes to the router.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{Method, Request};
use axum::response::{IntoResponse, Response};
use hyper_util::service::TowerToHyperService;
use tracing::Instrument;

use super::PATHS;
use crate::faces::{chat, messages};
use crate::http::{AppState, ErrorShape, Observed, Route, identify, read_body};

/// The paths served directly.
const CHAT: &str = "/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";

/// A face served directly.
#[derive(Debug, Clone, Copy)]
enum Direct {
    Chat,
    Messages,
}

/// The gateway as one hyper service: the direct route, else the router.
#[derive(Debug, Clone)]
pub struct Gateway {
    router: TowerToHyperService<Router>,
    state: AppState,
}

impl Gateway {
    /// Every route of [`super::router`], with chat completions and
    /// Messages served directly.
    pub fn new(state: AppState) -> Gateway {
        Gateway {
            router: TowerToHyperService::new(super::router(state.clone())),
            state,
        }
    }
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<B> hyper::service::Service<Request<B>> for Gateway
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError> + std::fmt::Display,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn call(&self, req: Request<B>) -> Answer {
        let direct = match req.uri().path() {
            CHAT => Some(Direct::Chat),
            MESSAGES => Some(Direct::Messages),
            _ => None,
        };
        match direct.filter(|_| req.method() == Method::POST) {
            Some(face) => {
                let (parts, body) = req.into_parts();
                Box::pin(serve(self.state.clone(), parts, body, face))
            }
            None => Box::pin(hyper::service::Service::call(&self.router, req)),
        }
    }
}

/// A request to a face served directly: observed, admitted and read as
/// the layers do, then the router's own handler.
///
/// Its future lives (boxed) for as long as the handler runs, which for a
/// streamed answer is the whole wait for the model's first answer. So it
/// holds the request's head once, lends it to [`answer`], and awaits
/// nothing large inline: admission (identifying the caller, reading the
/// body) and each face's handler are boxed.
async fn serve<B>(
    state: AppState,
    mut parts: axum::http::request::Parts,
    body: B,
    face: Direct,
) -> Result<Response, Infallible>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::fmt::Display,
{
    let path = match face {
        Direct::Chat => CHAT,
        Direct::Messages => MESSAGES,
    };
    let observed = Observed::begin(&parts, Route::Direct(path));
    let request_id = observed.id.clone();
    let answer = answer(&state, &mut parts, body, face, request_id)
        .instrument(observed.span.clone())
        .await;
    Ok(observed.finish(&state, answer))
}

/// The caller identified, the body read, the face's handler run.
async fn answer<B>(
    state: &AppState,
    parts: &mut axum::http::request::Parts,
    body: B,
    face: Direct,
    request_id: String,
) -> Response
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::fmt::Display,
{
    let shape = match face {
        Direct::Chat => ErrorShape::OpenAi,
        Direct::Messages => ErrorShape::Anthropic,
    };
    // Admission boxed, once, for both its steps: it is over before the
    // handler runs, and inline it would size the future the handler's
    // whole run is awaited in.
    let admitted = Box::pin(async {
        let caller = identify(state, parts, request_id, PATHS).await?;
        Ok::<_, Response>((caller, read_body(state, body, shape).await?))
    })
    .await;
    let (caller, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let headers = std::mem::take(&mut parts.headers);
    match face {
        Direct::Chat => {
            // The rest of the request's head is not needed, and holds
            // slices of the connection's read buffer (see
            // `chat::completions`).
            drop((
                std::mem::take(&mut parts.uri),
                std::mem::take(&mut parts.extensions),
            ));
            // Each face's handler boxed: this future lives as long as
            // the request, and would otherwise be sized for the larger
            // of the two.
            Box::pin(chat::completions(
                State(state.clone()),
                Extension(caller),
                headers,
                Ok(body),
            ))
            .await
            .into_response()
        }
        Direct::Messages => {
            Box::pin(messages::messages(
                State(state.clone()),
                Extension(caller),
                std::mem::take(&mut parts.uri),
                headers,
                Ok(body),
            ))
            .await
        }
    }
}

/// The size of a direct request's future for a body of type `B`: checked
/// by `server::tests` with the body each connection serves.
#[cfg(test)]
pub(crate) fn future_size<B>() -> usize
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::fmt::Display,
{
    fn size_of_future<B, F>(_: impl FnOnce(AppState, axum::http::request::Parts, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }
    size_of_future(|state, parts, body: B| serve(state, parts, body, Direct::Chat))
}
