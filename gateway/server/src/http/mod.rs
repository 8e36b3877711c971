//! The HTTP floor every face stands on: the state handlers share
//! ([`AppState`]), the error body ([`ApiError`]), and the layers around
//! every handler (request id and span, metrics, the browser rule, API keys
//! and rates, the body within its deadline and size). It knows no face and
//! no route: the router tells it which paths are open.

mod error;
mod layers;
mod state;

pub use error::{ApiError, ErrorShape, body_error};
pub use layers::{
    Caller, ForwardCredential, GoogleKey, Observed, Paths, REQUEST_ID_HEADER, RequestId, Route,
    authenticate, body_deadline, identify, metadata_url, observe, public_base, read_body,
    spend_request,
};
pub use state::{AppState, Draining, Shared};
