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
            Some(face) => Box::pin(serve(self.state.clone(), req, face)),
            None => Box::pin(hyper::service::Service::call(&self.router, req)),
        }
    }
}

/// A request to a face served directly: observed, admitted and read as
/// the layers do, then the router's own handler.
async fn serve<B>(state: AppState, req: Request<B>, face: Direct) -> Result<Response, Infallible>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::fmt::Display,
{
    let (mut parts, body) = req.into_parts();
    let (path, shape) = match face {
        Direct::Chat => (CHAT, ErrorShape::OpenAi),
        Direct::Messages => (MESSAGES, ErrorShape::Anthropic),
    };
    let observed = Observed::begin(&parts, Route::Direct(path));
    let request_id = observed.id.clone();
    let answer = async {
        let caller = match identify(&state, &mut parts, request_id, PATHS).await {
            Ok(caller) => caller,
            Err(refused) => return refused,
        };
        let body = match read_body(&state, body, shape).await {
            Ok(body) => body,
            Err(refused) => return refused,
        };
        match face {
            Direct::Chat => {
                // The rest of the request's head is not needed, and holds
                // slices of the connection's read buffer (see
                // `chat::completions`).
                let headers = parts.headers;
                drop((parts.uri, parts.extensions));
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
                    parts.uri,
                    parts.headers,
                    Ok(body),
                ))
                .await
            }
        }
    }
    .instrument(observed.span.clone())
    .await;
    Ok(observed.finish(&state, answer))
}
