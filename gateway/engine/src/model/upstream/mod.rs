//! Upstream model servers: an [`Upstream`] is a model server of one
//! protocol with its own connection pool, API key, timeouts and retry
//! policy (routes to upstreams are `model::routing`).
//! Requests are retried on 429, 5xx and connection errors, with exponential
//! backoff that honours `Retry-After`, and only while no byte of a response
//! has been used.
//!
//! The request URIs and the authorization header are built once per
//! upstream, so a call does no URL parsing and no per-request client-side
//! work beyond the request itself. The HTTP client is chosen by the
//! upstream's scheme (`Transport`): a cleartext upstream gets the
//! gateway's own HTTP/1.1 keep-alive pool (`pool`), an `https://` one
//! hyper-util's pooled client (HTTP/2 when the server offers it).
//! [`Bounded`] is an answer's body under the call's deadlines and size cap,
//! passed through as an `http_body::Body` (a `Content-Length` answer keeps
//! its length) or read as a stream; it gives a pooled connection back once
//! it has been read to its end.

mod pool;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::conversation::Protocol;
use toolgate_config::format::RetryDecl;

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// One upstream: a model server of one protocol.
#[derive(Debug)]
pub struct Upstream {
    pub name: String,
    /// The protocol the model speaks.
    pub protocol: Protocol,
    /// Base URL without a trailing slash, the API's version included, e.g.
    /// `https://api.openai.com/v1`; `{model}` in it stands for the model
    /// name (Azure's deployments).
    pub base_url: String,
    /// The model call's URI when it does not depend on the model.
    call_uri: Option<Uri>,
    models_uri: Uri,
    /// The query every call carries (Azure's `api-version=…`).
    query: Option<String>,
    api_key: Option<String>,
    /// The headers that carry the key (and the protocol's version), the
    /// key's marked sensitive.
    auth: Vec<(HeaderName, HeaderValue)>,
    transport: Transport,
    retry: RetryDecl,
    /// Longest wait for the response head and between two reads of a body.
    read_timeout: Duration,
    /// Longest time one model call may take in all (retries and body).
    timeout: Duration,
}

/// How an upstream's requests are sent, by its URL's scheme.
#[derive(Debug)]
enum Transport {
    /// `http://`: HTTP/1.1 on the gateway's own keep-alive pool.
    Cleartext(Arc<pool::Pool>),
    /// `https://`: hyper-util's pooled client, HTTP/1.1 or HTTP/2 as the
    /// server's TLS handshake chooses.
    Tls(Box<Client<Connector, Full<Bytes>>>),
}

/// How long an upstream's calls may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To open a connection.
    pub connect: Duration,
    /// To the response head, and between two reads of a response body.
    pub read: Duration,
    /// One model call in all, from the first attempt to the last byte.
    pub total: Duration,
}

/// A successful answer whose body is not read yet, and the deadline its
/// body must arrive by.
#[derive(Debug)]
pub struct Reply {
    pub response: http::Response<Incoming>,
    pub deadline: tokio::time::Instant,
    /// The pooled connection the answer arrives on, given back when its
    /// body is read to the end.
    lease: Option<pool::Lease>,
}

/// Why an upstream request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream answered with an error status (after retries).
    #[error("upstream `{upstream}` answered HTTP {status}: {message}")]
    Status {
        upstream: String,
        status: StatusCode,
        message: String,
        retry_after: Option<Duration>,
    },
    #[error("upstream `{upstream}` did not answer in time")]
    Timeout { upstream: String },
    #[error("upstream `{upstream}` cannot be reached: {message}")]
    Unreachable { upstream: String, message: String },
    /// The upstream answered 2xx with something that is not a chat completion.
    #[error("upstream `{upstream}` sent an invalid response: {message}")]
    Invalid { upstream: String, message: String },
    /// The answer is larger than `limits.max_upstream_response_bytes`.
    #[error(
        "upstream `{upstream}` sent more than {limit} bytes (limits.max_upstream_response_bytes)"
    )]
    TooLarge { upstream: String, limit: usize },
}

impl UpstreamError {
    /// `true` when the error says the model does not take tools (the
    /// signal for the `auto` formatter to fall back to the structured
    /// prompt).
    pub fn rejects_tools(&self) -> bool {
        match self {
            UpstreamError::Status {
                status, message, ..
            } if matches!(status.as_u16(), 400 | 422) => {
                let m = message.to_ascii_lowercase();
                m.contains("tool") || m.contains("function")
            }
            _ => false,
        }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::Status { status, .. } => match status.as_u16() {
                400 | 404 | 413 | 422 => "upstream_rejected_request",
                401 | 403 => "upstream_auth_failed",
                429 => "upstream_rate_limited",
                503 => "upstream_unavailable",
                _ => "upstream_error",
            },
            UpstreamError::Timeout { .. } => "upstream_timeout",
            UpstreamError::Unreachable { .. } => "upstream_unreachable",
            UpstreamError::Invalid { .. } => "upstream_invalid_response",
            UpstreamError::TooLarge { .. } => "upstream_response_too_large",
        }
    }
}

/// The TLS setup of every upstream: rustls with the platform's trust store
/// (the same verifier the gateway's other HTTP clients use).
fn tls_config() -> Result<rustls::ClientConfig, rustls::Error> {
    use rustls_platform_verifier::BuilderVerifierExt;
    Ok(rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_platform_verifier()?
    .with_no_client_auth())
}

/// The path of a model call under the base URL (Gemini's depends on the
/// model: see `Upstream::call_uri`).
fn call_path(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::OpenaiChat => "/chat/completions",
        Protocol::OpenaiResponses => "/responses",
        Protocol::Anthropic => "/messages",
        Protocol::Gemini => "/models",
    }
}

fn with_query(path: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    }
}

/// What a model name keeps escaped in a URL path (`/` and `?` among them).
const MODEL_IN_PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `base` (no trailing slash) joined with `path`, as a request URI. The
/// URL is parsed once here (IDNA host names become ASCII), never per call.
fn endpoint(base: &str, path: &str) -> Result<Uri, String> {
    let url = url::Url::parse(&format!("{base}{path}")).map_err(|e| e.to_string())?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme `{}` is not http or https",
            url.scheme()
        ));
    }
    Uri::try_from(url.as_str()).map_err(|e| e.to_string())
}

/// How an upstream is reached beyond its URL and key.
#[derive(Debug, Clone, Default)]
pub struct Flavor {
    pub protocol: Protocol,
    /// Azure OpenAI: the `api-version` of every call, and the key in an
    /// `api-key` header.
    pub azure_api_version: Option<String>,
}

/// The version header Anthropic's API requires.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// One model call: its body and what its URI and headers depend on.
#[derive(Debug)]
pub struct ModelCall<'a> {
    pub body: Bytes,
    /// The model name the upstream knows.
    pub model: &'a str,
    pub stream: bool,
    /// Sent as `X-Request-Id`.
    pub request_id: Option<&'a str>,
    /// Headers of the client's protocol it sent (`anthropic-beta`…), for an
    /// upstream of the same protocol.
    pub headers: &'a [(HeaderName, HeaderValue)],
    /// Tried once whatever the upstream's `retries`: the caller tries
    /// again itself with a body it makes again (see
    /// [`Upstream::next_attempt`]), or a route of several targets tries the
    /// next instead. Otherwise each attempt but the last keeps the body for
    /// the next while the model answers.
    pub single_attempt: bool,
    /// The call's deadline, when the caller's attempts share one (else
    /// the upstream's total deadline from now).
    pub deadline: Option<tokio::time::Instant>,
}

impl Upstream {
    /// An OpenAI chat-completions upstream; fails only when its HTTP client
    /// cannot be built (no silent fallback to a client without the
    /// timeouts).
    pub fn new(
        name: String,
        base_url: &str,
        api_key: Option<String>,
        timeouts: Timeouts,
        retry: RetryDecl,
    ) -> Result<Upstream, String> {
        Upstream::of(name, base_url, api_key, timeouts, retry, Flavor::default())
    }

    /// An upstream of any protocol.
    pub fn of(
        name: String,
        base_url: &str,
        api_key: Option<String>,
        timeouts: Timeouts,
        retry: RetryDecl,
        flavor: Flavor,
    ) -> Result<Upstream, String> {
        let cannot = |e: &dyn std::fmt::Display| {
            format!("the HTTP client of upstream `{name}` cannot be built: {e}")
        };
        let base = base_url.trim_end_matches('/').to_owned();
        let query = flavor.azure_api_version.as_ref().map(|v| {
            format!(
                "api-version={}",
                percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
            )
        });
        // The origin, for the pool (a `{model}` in the path is not part of it).
        let origin = endpoint(&base.replace("{model}", "m"), "").map_err(|e| cannot(&e))?;
        let call_uri = match (flavor.protocol, base.contains("{model}")) {
            (Protocol::Gemini, _) | (_, true) => None,
            (protocol, false) => Some(
                endpoint(&base, &with_query(call_path(protocol), query.as_deref()))
                    .map_err(|e| cannot(&e))?,
            ),
        };
        let models_uri =
            endpoint(&base.replace("/{model}", ""), "/models").map_err(|e| cannot(&e))?;
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeouts.connect));
        http.set_nodelay(true);
        http.enforce_http(false);
        let transport = if origin.scheme() == Some(&http::uri::Scheme::HTTP) {
            Transport::Cleartext(Arc::new(
                pool::Pool::new(http, &origin).map_err(|e| cannot(&e))?,
            ))
        } else {
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls_config().map_err(|e| cannot(&e))?)
                .https_only()
                .enable_http1()
                .enable_http2()
                .wrap_connector(http);
            Transport::Tls(Box::new(
                Client::builder(TokioExecutor::new())
                    .pool_idle_timeout(pool::IDLE_TIMEOUT)
                    .pool_timer(TokioTimer::new())
                    .build(connector),
            ))
        };
        let sensitive = |v: String| -> Result<HeaderValue, String> {
            let mut v = HeaderValue::try_from(v)
                .map_err(|_| cannot(&"the API key is not a valid header value"))?;
            v.set_sensitive(true);
            Ok(v)
        };
        let mut auth = Vec::new();
        if let Some(key) = &api_key {
            auth.push(match (flavor.protocol, &flavor.azure_api_version) {
                (Protocol::Anthropic, _) => (
                    HeaderName::from_static("x-api-key"),
                    sensitive(key.clone())?,
                ),
                (Protocol::Gemini, _) => (
                    HeaderName::from_static("x-goog-api-key"),
                    sensitive(key.clone())?,
                ),
                (_, Some(_)) => (HeaderName::from_static("api-key"), sensitive(key.clone())?),
                _ => (AUTHORIZATION, sensitive(format!("Bearer {key}"))?),
            });
        }
        if flavor.protocol == Protocol::Anthropic {
            auth.push((
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(ANTHROPIC_VERSION),
            ));
        }
        Ok(Upstream {
            name,
            protocol: flavor.protocol,
            base_url: base,
            call_uri,
            models_uri,
            query,
            api_key,
            auth,
            transport,
            retry,
            read_timeout: timeouts.read,
            timeout: timeouts.total,
        })
    }

    /// The URI of a model call of `model`.
    fn call_uri(&self, model: &str, stream: bool) -> Result<Uri, UpstreamError> {
        if let Some(uri) = &self.call_uri {
            return Ok(uri.clone());
        }
        let model = percent_encoding::utf8_percent_encode(model, MODEL_IN_PATH).to_string();
        let base = self.base_url.replace("{model}", &model);
        let path = match self.protocol {
            Protocol::Gemini if stream => format!("/models/{model}:streamGenerateContent?alt=sse"),
            Protocol::Gemini => format!("/models/{model}:generateContent"),
            p => with_query(call_path(p), self.query.as_deref()),
        };
        endpoint(&base, &path).map_err(|message| UpstreamError::Invalid {
            upstream: self.name.clone(),
            message: format!("the model name makes no URL: {message}"),
        })
    }

    /// `POST` a chat-completions `body`, retried per the policy. Returns a
    /// response with a success status whose body is unread.
    pub async fn chat(&self, body: Bytes) -> Result<Reply, UpstreamError> {
        self.chat_with(body, None).await
    }

    /// [`chat`](Self::chat), sending `request_id` as `X-Request-Id`.
    pub async fn chat_with(
        &self,
        body: Bytes,
        request_id: Option<&str>,
    ) -> Result<Reply, UpstreamError> {
        self.call(ModelCall {
            body,
            model: "",
            stream: false,
            request_id,
            headers: &[],
            single_attempt: false,
            deadline: None,
        })
        .await
    }

    /// One model call, retried per the policy, recording each attempt's
    /// time to the response head in the metrics. The whole call, retries
    /// included, has the upstream's total deadline (or the caller's); the
    /// [`Reply`] carries what is left of it for the body.
    ///
    /// Not an `async fn`, whose argument would take a second slot in the
    /// future beside the one the future is made with.
    #[allow(clippy::manual_async_fn)]
    pub fn call<'a>(
        &'a self,
        mut call: ModelCall<'a>,
    ) -> impl Future<Output = Result<Reply, UpstreamError>> + Send + 'a {
        async move {
            let deadline = call.deadline.unwrap_or_else(|| self.deadline());
            // Every wait inside is bounded by the deadline (one timer at a time).
            self.call_attempts(&mut call, deadline)
                .await
                .map(|(response, lease)| Reply {
                    response,
                    deadline,
                    lease,
                })
        }
    }

    /// Records one attempt's outcome and its time to the response head (or
    /// the failure) in the metrics.
    fn record_attempt(&self, error: Option<&UpstreamError>, began: std::time::Instant) {
        let outcome = match error {
            None => "ok",
            Some(UpstreamError::Status { status, .. }) if status.is_client_error() => {
                "client_error"
            }
            Some(UpstreamError::Status { .. }) => "server_error",
            Some(UpstreamError::Timeout { .. }) => "timeout",
            Some(UpstreamError::Unreachable { .. }) => "unreachable",
            Some(UpstreamError::Invalid { .. } | UpstreamError::TooLarge { .. }) => "invalid",
        };
        crate::support::metrics::record(|m| m.upstream_call(&self.name, outcome, began.elapsed()));
    }

    /// A request to `uri` with the gateway's headers and, when it has one,
    /// the upstream's key.
    fn request(&self, method: Method, uri: &Uri, body: Bytes) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        *req.uri_mut() = uri.clone();
        let headers = req.headers_mut();
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("toolgate/", env!("CARGO_PKG_VERSION"))),
        );
        for (name, value) in &self.auth {
            headers.insert(name, value.clone());
        }
        req
    }

    /// The read timeout from now, never past `deadline`.
    fn read_by(&self, deadline: tokio::time::Instant) -> tokio::time::Instant {
        deadline.min(tokio::time::Instant::now() + self.read_timeout)
    }

    /// One exchange: the response head within the read timeout (and by
    /// `deadline`). No `async` block: a model call's future lives as long
    /// as the model takes to answer, and a block holds what it awaits
    /// twice (the request as its capture and inside the exchange, the
    /// timed exchange as its capture and as what it awaits); the
    /// combinators hold each once.
    fn send(
        &self,
        req: Request<Full<Bytes>>,
        deadline: tokio::time::Instant,
    ) -> impl Future<Output = Result<(http::Response<Incoming>, Option<pool::Lease>), UpstreamError>> + '_
    {
        use futures::FutureExt;
        use futures::future::Either;
        let exchange = match &self.transport {
            Transport::Cleartext(pool) => Either::Left(pool.send(req).map(|sent| {
                sent.map(|(resp, lease)| (resp, Some(lease)))
                    .map_err(|e| describe(&e))
            })),
            // Boxed: the TLS client's exchange is large, and every
            // cleartext call's future would carry (and copy) its size.
            Transport::Tls(client) => Either::Right(
                Box::pin(client.request(req))
                    .map(|sent| sent.map(|resp| (resp, None)).map_err(|e| describe(&e))),
            ),
        };
        tokio::time::timeout_at(self.read_by(deadline), exchange).map(move |timed| match timed {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(message)) => Err(UpstreamError::Unreachable {
                upstream: self.name.clone(),
                message,
            }),
            // A timed-out request may have been processed: retrying could
            // run it twice, and would double the wait.
            Err(_) => Err(UpstreamError::Timeout {
                upstream: self.name.clone(),
            }),
        })
    }

    /// A model call's request of `body`, as each attempt sends it (made
    /// whole each time: nothing of it is kept while the model answers).
    fn call_request(
        &self,
        call: &ModelCall<'_>,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, UpstreamError> {
        let uri = self.call_uri(call.model, call.stream)?;
        let mut req = self.request(Method::POST, &uri, body);
        req.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in call.headers {
            req.headers_mut().insert(name, value.clone());
        }
        if let Some(id) = call
            .request_id
            .and_then(|id| HeaderValue::from_str(id).ok())
        {
            req.headers_mut().insert("x-request-id", id);
        }
        crate::support::telemetry::inject(req.headers_mut());
        Ok(req)
    }

    async fn call_attempts(
        &self,
        call: &mut ModelCall<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<(http::Response<Incoming>, Option<pool::Lease>), UpstreamError> {
        let mut attempt = 1;
        loop {
            // The last attempt takes the body: none is kept while the model
            // answers. The exchange takes the request before the wait: the
            // wait's state holds no slot of a request's size.
            let last = call.single_attempt || attempt >= self.retry.max_attempts;
            let body = if last {
                std::mem::take(&mut call.body)
            } else {
                call.body.clone()
            };
            let began = std::time::Instant::now();
            let request = self.call_request(call, body).inspect_err(|e| {
                self.record_attempt(Some(e), began);
            })?;
            let sending = self.send(request, deadline);
            let error = match sending.await {
                Ok((resp, lease)) if resp.status().is_success() => {
                    self.record_attempt(None, began);
                    return Ok((resp, lease));
                }
                // The connection closes with the error body (not worth
                // reading to its end to keep it).
                Ok((resp, _)) => {
                    let status = resp.status();
                    let retry_after = parse_retry_after(resp.headers().get(RETRY_AFTER));
                    // Boxed: the call's future is not sized for a failure.
                    let text = Box::pin(tokio::time::timeout_at(
                        self.read_by(deadline),
                        read_error_body(resp),
                    ))
                    .await
                    .unwrap_or_default();
                    UpstreamError::Status {
                        upstream: self.name.clone(),
                        status,
                        message: self
                            .scrub(&crate::model::protocol::error_message(self.protocol, &text)),
                        retry_after,
                    }
                }
                Err(e) => e,
            };
            self.record_attempt(Some(&error), began);
            if call.single_attempt {
                return Err(error);
            }
            let resume = self.next_attempt(attempt, error, deadline)?;
            tokio::time::sleep_until(resume).await;
            attempt += 1;
        }
    }

    /// A call's total deadline (its attempts included), from now.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.timeout
    }

    /// After attempt number `attempt` of a call failed with `error`: when
    /// to try again, per the upstream's `retries`; or the error to give
    /// the caller, when it is not worth another attempt (a client error,
    /// a timeout: the request may have been processed), the attempts are
    /// spent, or the wait would pass `deadline`.
    pub fn next_attempt(
        &self,
        attempt: u32,
        error: UpstreamError,
        deadline: tokio::time::Instant,
    ) -> Result<tokio::time::Instant, UpstreamError> {
        let retry_after = match &error {
            UpstreamError::Status {
                status,
                retry_after,
                ..
            } if *status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() => {
                *retry_after
            }
            UpstreamError::Unreachable { .. } => None,
            _ => return Err(error),
        };
        if attempt >= self.retry.max_attempts {
            return Err(error);
        }
        let backoff = self
            .retry
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(attempt - 1))
            .min(self.retry.max_backoff);
        let wait = match retry_after {
            // The upstream asks for longer than we are willing to wait:
            // give the client its answer instead.
            Some(ra) if ra > self.retry.max_backoff => return Err(error),
            Some(ra) => ra.max(backoff),
            None => backoff,
        };
        tracing::warn!(upstream = %self.name, attempt, wait_ms = wait.as_millis() as u64, "retrying: {error}");
        let resume = tokio::time::Instant::now() + wait;
        if resume >= deadline {
            return Err(UpstreamError::Timeout {
                upstream: self.name.clone(),
            });
        }
        Ok(resume)
    }

    /// `text` with the upstream's API key removed in every form the gateway
    /// sends it (an upstream echoing the request's headers must not hand the
    /// key to the client).
    fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) => crate::support::secrets::Scrubber::new([key.as_str()]).scrub(text),
            None => text.to_owned(),
        }
    }

    /// The whole body of `reply`, under `limit` bytes and the reply's
    /// deadline.
    pub async fn read_body(&self, reply: Reply, limit: usize) -> Result<Vec<u8>, UpstreamError> {
        let mut body = self.body(reply, limit);
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                out.extend_from_slice(&data);
            }
        }
        Ok(out)
    }

    /// The body of `reply` as chunks; the stream ends with an error once
    /// more than `limit` bytes came or the reply's deadline passed.
    pub fn body_stream(
        &self,
        reply: Reply,
        limit: usize,
    ) -> impl futures::Stream<Item = Result<Bytes, UpstreamError>> + Send + 'static + use<> {
        self.body(reply, limit).into_data_stream()
    }

    /// The body of `reply` under `limit` bytes, the read timeout between
    /// two reads and the reply's deadline.
    pub fn body(&self, reply: Reply, limit: usize) -> Bounded {
        let Reply {
            response,
            deadline,
            lease,
        } = reply;
        let too_large = http_body::Body::size_hint(response.body())
            .exact()
            .is_some_and(|n| n > limit as u64);
        let next = deadline.min(tokio::time::Instant::now() + self.read_timeout);
        let inner = response.into_body();
        // An empty answer is read already; one over the cap closes.
        let lease = match lease {
            Some(lease) if inner.is_end_stream() => {
                lease.release();
                None
            }
            _ if too_large => None,
            lease => lease,
        };
        Bounded {
            inner,
            upstream: self.name.clone(),
            limit,
            seen: 0,
            read: self.read_timeout,
            deadline,
            next,
            timer: None,
            lease,
            state: if too_large {
                BodyState::TooLarge
            } else {
                BodyState::Reading
            },
        }
    }

    /// `GET {base}/models`: the model ids the upstream lists.
    pub async fn list_models(&self) -> Result<Vec<String>, UpstreamError> {
        // The list is read under a cap and a deadline, like every upstream
        // answer.
        const MAX_MODELS_BYTES: usize = 4 * 1024 * 1024;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let fetch = async {
            let (response, lease) = self
                .send(
                    self.request(Method::GET, &self.models_uri, Bytes::new()),
                    deadline,
                )
                .await?;
            let reply = Reply {
                response,
                deadline,
                lease,
            };
            self.read_body(reply, MAX_MODELS_BYTES).await
        };
        let body = match tokio::time::timeout_at(deadline, fetch).await {
            Ok(Ok(body)) => body,
            Ok(Err(UpstreamError::TooLarge { .. })) => {
                return Err(UpstreamError::Invalid {
                    upstream: self.name.clone(),
                    message: format!("its model list is larger than {MAX_MODELS_BYTES} bytes"),
                });
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(UpstreamError::Timeout {
                    upstream: self.name.clone(),
                });
            }
        };
        let v: serde_json::Value =
            serde_json::from_slice(&body).map_err(|e| UpstreamError::Invalid {
                upstream: self.name.clone(),
                message: e.to_string(),
            })?;
        // OpenAI's and Anthropic's `data[].id`, Gemini's `models[].name`.
        if let Some(models) = v["models"].as_array() {
            return Ok(models
                .iter()
                .filter_map(|m| m["name"].as_str())
                .map(|n| n.strip_prefix("models/").unwrap_or(n).to_owned())
                .collect());
        }
        Ok(v["data"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyState {
    Reading,
    /// The declared length is over the cap: the first poll says so.
    TooLarge,
    Done,
}

/// An upstream answer's body under the call's bounds: at most `limit`
/// bytes, the read timeout between two reads, and the call's total
/// deadline. It ends with an [`UpstreamError`] when one is crossed. Its size
/// hint is the upstream's, so a `Content-Length` answer passed through
/// keeps its length.
#[derive(Debug)]
pub struct Bounded {
    inner: Incoming,
    upstream: String,
    limit: usize,
    seen: usize,
    read: Duration,
    deadline: tokio::time::Instant,
    /// When the body fails unless more arrives: the read timeout after the
    /// last data, never past the deadline.
    next: tokio::time::Instant,
    /// Made, and armed for `next`, only when a read has to wait (a body
    /// whose frames are ready never creates or registers a timer).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The pooled connection, given back at the body's clean end (and
    /// closed with the body otherwise).
    lease: Option<pool::Lease>,
    state: BodyState,
}

impl Bounded {
    fn fail(&mut self, e: UpstreamError) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        self.state = BodyState::Done;
        self.lease = None;
        Poll::Ready(Some(Err(e)))
    }

    /// The body was read to its end: its connection can take another
    /// request.
    fn ended(&mut self) {
        self.state = BodyState::Done;
        if let Some(lease) = self.lease.take() {
            lease.release();
        }
    }
}

impl Drop for Bounded {
    /// A body dropped before its end was polled (a stream left after its
    /// `[DONE]`) gives its connection back if hyper read that end.
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.release_when_ready();
        }
    }
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = UpstreamError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, UpstreamError>>> {
        let this = &mut *self;
        match this.state {
            BodyState::Done => return Poll::Ready(None),
            BodyState::TooLarge => {
                let e = UpstreamError::TooLarge {
                    upstream: this.upstream.clone(),
                    limit: this.limit,
                };
                return this.fail(e);
            }
            BodyState::Reading => {}
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let next = this.next;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next)));
                if timer.deadline() != next {
                    timer.as_mut().reset(next);
                }
                ready!(timer.as_mut().poll(cx));
                let e = UpstreamError::Timeout {
                    upstream: this.upstream.clone(),
                };
                this.fail(e)
            }
            Poll::Ready(None) => {
                this.ended();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                let e = UpstreamError::Unreachable {
                    upstream: this.upstream.clone(),
                    message: describe(&e),
                };
                this.fail(e)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len());
                    if this.seen > this.limit {
                        let e = UpstreamError::TooLarge {
                            upstream: this.upstream.clone(),
                            limit: this.limit,
                        };
                        return this.fail(e);
                    }
                    this.next = this.deadline.min(tokio::time::Instant::now() + this.read);
                }
                // A body of known length is not polled past its last byte.
                if this.inner.is_end_stream() {
                    this.ended();
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state == BodyState::Done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An HTTP client error as text, the innermost cause (no URL, no type
/// names).
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg = s.to_string();
        source = s.source();
    }
    msg
}

async fn read_error_body(resp: http::Response<Incoming>) -> Vec<u8> {
    // Error bodies are small; cap what is read anyway.
    let mut out = Vec::new();
    let mut body = resp.into_body();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            out.extend_from_slice(&data);
        }
        if out.len() > 64 * 1024 {
            break;
        }
    }
    out
}

fn parse_retry_after(v: Option<&HeaderValue>) -> Option<Duration> {
    let s = v?.to_str().ok()?.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs.min(86_400.0)));
        }
        return None;
    }
    let when = httpdate::parse_http_date(s).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// The span of one model call, in OpenTelemetry's GenAI terms (the
/// proxy's and the tool loop's); usage and the loop's iteration are
/// recorded on it when known.
pub fn chat_span(upstream: &Upstream, model: &str) -> tracing::Span {
    tracing::info_span!(
        "chat",
        "otel.name" = %format_args!("chat {model}"),
        "otel.kind" = "client",
        "gen_ai.operation.name" = "chat",
        "gen_ai.request.model" = %model,
        "server.address" = upstream.models_uri.host().unwrap_or_default(),
        "toolgate.upstream" = %upstream.name,
        "toolgate.attempts" = tracing::field::Empty,
        iteration = tracing::field::Empty,
        "gen_ai.usage.input_tokens" = tracing::field::Empty,
        "gen_ai.usage.output_tokens" = tracing::field::Empty,
        "gen_ai.usage.cache_read.input_tokens" = tracing::field::Empty,
        "gen_ai.usage.cache_creation.input_tokens" = tracing::field::Empty,
        "gen_ai.usage.reasoning.output_tokens" = tracing::field::Empty,
        "toolgate.cost_usd" = tracing::field::Empty,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_rejections_are_recognised() {
        let status = |code: u16, message: &str| UpstreamError::Status {
            upstream: "u".into(),
            status: StatusCode::from_u16(code).unwrap(),
            message: message.into(),
            retry_after: None,
        };
        assert!(
            status(
                400,
                "\"auto\" tool choice requires --enable-auto-tool-choice"
            )
            .rejects_tools()
        );
        assert!(status(422, "This model does not support function calling").rejects_tools());
        assert!(!status(400, "context length exceeded").rejects_tools());
        assert!(!status(500, "tool crashed").rejects_tools());
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let v = HeaderValue::from_static("2");
        assert_eq!(parse_retry_after(Some(&v)), Some(Duration::from_secs(2)));
        let v = HeaderValue::from_static("0.5");
        assert_eq!(
            parse_retry_after(Some(&v)),
            Some(Duration::from_millis(500))
        );
        let v = HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(parse_retry_after(Some(&v)), Some(Duration::ZERO));
        let v = HeaderValue::from_static("soon");
        assert_eq!(parse_retry_after(Some(&v)), None);
        assert_eq!(parse_retry_after(None), None);
    }
}
