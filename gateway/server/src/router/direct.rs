//! The service every connection runs. The hottest route,
//! `POST /v1/chat/completions`, is served without the router: the same
//! steps the layers take ([`Observed`], [`identify`], [`read_body`]) run in
//! one pass before the handler, without route matching, the boxed layers
//! and the extractors around them (`tests/bench/proxy.sh` measures what
//! that saves per proxied request). Every other request goes to the
//! router.

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
use crate::faces::chat;
use crate::http::{AppState, ErrorShape, Observed, Route, identify, read_body};

/// The path served directly.
const CHAT: &str = "/v1/chat/completions";

/// The gateway as one hyper service: the direct route, else the router.
#[derive(Debug, Clone)]
pub struct Gateway {
    router: TowerToHyperService<Router>,
    state: AppState,
}

impl Gateway {
    /// Every route of [`super::router`], with chat completions served
    /// directly.
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
        if req.method() == Method::POST && req.uri().path() == CHAT {
            Box::pin(chat(self.state.clone(), req))
        } else {
            Box::pin(hyper::service::Service::call(&self.router, req))
        }
    }
}

/// `POST /v1/chat/completions`: observed, admitted and read as the layers
/// do, then the router's own handler.
async fn chat<B>(state: AppState, req: Request<B>) -> Result<Response, Infallible>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::fmt::Display,
{
    let (mut parts, body) = req.into_parts();
    let observed = Observed::begin(&parts, Route::Direct(CHAT));
    let request_id = observed.id.clone();
    let answer = async {
        let caller = match identify(&state, &mut parts, request_id, PATHS).await {
            Ok(caller) => caller,
            Err(refused) => return refused,
        };
        let body = match read_body(&state, body, ErrorShape::OpenAi).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        chat::completions(
            State(state.clone()),
            Extension(caller),
            parts.headers,
            Ok(body),
        )
        .await
        .into_response()
    }
    .instrument(observed.span.clone())
    .await;
    Ok(observed.finish(&state, answer))
}
