//! Error responses with a truthful HTTP status, in the shape of the face
//! that answers: OpenAI's `{"error": {"message", "type", "code"}}` (every
//! endpoint but Anthropic's), or Anthropic's `{"type": "error", "error":
//! {"type", "message"}}` ([`ErrorShape`]).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub code: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<String>,
    /// Extra structured detail (e.g. argument validation errors).
    pub details: Option<Value>,
    /// Seconds the client should wait before retrying (429).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            code,
            param: None,
            details: None,
            retry_after: None,
        }
    }

    pub fn param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// OpenAI's `type` for the status.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "api_error",
        }
    }
}

/// Whose error body an answer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// OpenAI's (and the gateway's own endpoints').
    OpenAi,
    /// Anthropic's, on `/v1/messages` and below.
    Anthropic,
    /// Google's (`{"error": {"code", "message", "status"}}`), on the
    /// Gemini API's paths.
    Google,
}

impl ApiError {
    /// The error as an answer in `shape`.
    pub fn into_shaped(self, shape: ErrorShape) -> Response {
        match shape {
            ErrorShape::OpenAi => self.into_response(),
            ErrorShape::Anthropic => self.into_anthropic(),
            ErrorShape::Google => self.into_google(),
        }
    }

    /// Google's error body (its canonical status name for the HTTP
    /// status), with the same status (and `Retry-After`).
    fn into_google(mut self) -> Response {
        // Google's own answers to a missing or wrong key, which its
        // clients know.
        match self.code {
            "missing_api_key" => self.status = StatusCode::FORBIDDEN,
            "invalid_api_key" => self.status = StatusCode::BAD_REQUEST,
            _ => {}
        }
        let mut body = self.google_error();
        if self.code == "invalid_api_key" {
            body["error"]["details"] = json!([{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "toolgate",
            }]);
        }
        let mut resp = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }

    /// Google's error body.
    pub fn google_error(&self) -> Value {
        let status = match self.status.as_u16() {
            400 | 405 | 411 | 413 | 415 | 422 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            403 => "PERMISSION_DENIED",
            404 => "NOT_FOUND",
            408 | 504 => "DEADLINE_EXCEEDED",
            409 => "ABORTED",
            429 => "RESOURCE_EXHAUSTED",
            499 => "CANCELLED",
            501 => "UNIMPLEMENTED",
            502 | 503 => "UNAVAILABLE",
            _ => "INTERNAL",
        };
        json!({"error": {"code": self.status.as_u16(), "message": self.message, "status": status}})
    }

    /// Anthropic's error body, with the same status (and `Retry-After`).
    fn into_anthropic(self) -> Response {
        let kind = match self.status.as_u16() {
            400 | 405 | 408 | 415 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            504 => "timeout_error",
            _ => "api_error",
        };
        let mut resp = (
            self.status,
            Json(json!({"type": "error", "error": {"type": kind, "message": self.message}})),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

impl ApiError {
    /// OpenAI's error object (the `error` of its error body).
    pub fn openai_error(&self) -> Value {
        let mut error = json!({
            "message": self.message,
            "type": self.kind(),
            "code": self.code,
            "param": self.param,
        });
        if let (Some(details), Some(obj)) = (&self.details, error.as_object_mut()) {
            obj.insert("details".into(), details.clone());
        }
        error
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let error = self.openai_error();
        let mut resp = (self.status, Json(json!({ "error": error }))).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        resp
    }
}

impl From<toolgate_engine::model::upstream::UpstreamError> for ApiError {
    /// Upstream failures, with truthful statuses: the client's own mistakes
    /// (400, 404, 422) keep their status; the gateway's credentials being
    /// refused (401, 403) is a bad gateway; 429 stays 429 with
    /// `Retry-After`; other upstream errors are 502 (503 stays 503); a
    /// timeout is 504.
    fn from(e: toolgate_engine::model::upstream::UpstreamError) -> Self {
        use toolgate_engine::model::upstream::UpstreamError as U;
        let code = e.code();
        let message = e.to_string();
        let status = match &e {
            U::Status { status, .. } => match status.as_u16() {
                400 | 404 | 413 | 422 => {
                    StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_REQUEST)
                }
                429 => StatusCode::TOO_MANY_REQUESTS,
                503 => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_GATEWAY,
            },
            U::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            U::Unreachable { .. } | U::Invalid { .. } | U::TooLarge { .. } => {
                StatusCode::BAD_GATEWAY
            }
        };
        let mut err = ApiError::new(status, code, message);
        if let U::Status {
            retry_after,
            status,
            ..
        } = e
            && status.as_u16() == 429
        {
            err.retry_after = Some(retry_after.map_or(1, |d| d.as_secs_f64().ceil() as u64));
        }
        err
    }
}

impl From<toolgate_engine::chat::ChatError> for ApiError {
    fn from(e: toolgate_engine::chat::ChatError) -> Self {
        use toolgate_engine::chat::ChatError;
        match e {
            ChatError::Upstream(e) => e.into(),
            ChatError::Internal(message) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", message)
            }
            ChatError::Spend(e) => e.into(),
        }
    }
}

impl From<toolgate_engine::governance::spend::SpendError> for ApiError {
    /// A budget spent: 429 `budget_exceeded` with the limit, what is
    /// spent and when it resets (and `Retry-After` until then).
    fn from(e: toolgate_engine::governance::spend::SpendError) -> Self {
        use toolgate_engine::governance::spend::SpendError;
        let message = e.to_string();
        match e {
            SpendError::Exceeded(exceeded) => {
                let mut err =
                    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "budget_exceeded", message)
                        .with_details(exceeded.details());
                err.retry_after = exceeded.retry_after(chrono::Utc::now());
                err
            }
            SpendError::Unavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "budget_unavailable",
                message,
            ),
        }
    }
}

impl From<toolgate_engine::conversation::RequestError> for ApiError {
    fn from(e: toolgate_engine::conversation::RequestError) -> Self {
        let mut err = ApiError::bad_request(e.message);
        err.param = e.param;
        err
    }
}

impl From<toolgate_engine::catalog::SetError> for ApiError {
    /// The one answer for a tool set that cannot be used, on every
    /// endpoint: 404 for an unknown set (like an unknown model), 403 for a
    /// set the caller's key may not use.
    fn from(e: toolgate_engine::catalog::SetError) -> Self {
        use toolgate_engine::catalog::SetError;
        let message = e.to_string();
        match e {
            SetError::Unknown { .. } => ApiError::not_found("unknown_tool_set", message),
            SetError::Forbidden { .. } => {
                toolgate_engine::support::metrics::record(|m| m.reject("forbidden"));
                ApiError::new(StatusCode::FORBIDDEN, "tool_set_not_allowed", message)
            }
        }
        .param("tool_set")
    }
}

impl From<toolgate_engine::chat::PlanError> for ApiError {
    fn from(e: toolgate_engine::chat::PlanError) -> Self {
        use toolgate_engine::chat::PlanError;
        let param = e.param();
        let message = e.to_string();
        let err = match e {
            PlanError::Set(e) => return e.into(),
            PlanError::TooManyMessages { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_many_messages", message)
            }
            PlanError::NoUpstream => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no_upstream", message)
            }
            PlanError::UnknownModel(_) => ApiError::not_found("model_not_found", message),
            PlanError::ClientToolClash { .. } | PlanError::ManyChoices => {
                ApiError::bad_request(message)
            }
            PlanError::Request(e) => e.into(),
        };
        match param {
            Some(p) => err.param(p),
            None => err,
        }
    }
}

/// The error for a request body that could not be read.
pub fn body_error(e: axum::extract::rejection::BytesRejection) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            "the request body is larger than limits.max_request_bytes",
        )
    } else {
        ApiError::bad_request(format!("cannot read the request body: {e}"))
    }
}
