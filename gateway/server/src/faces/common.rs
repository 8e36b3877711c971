//! What every face does between parsing its request and encoding the
//! answer: the tool set from the `X-Tool-Set` header, the call context
//! (one builder for every face), the engine's plan, the request's places
//! under the caps, and running the loop to a whole answer or to a stream of
//! server-sent events.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use toolgate_engine::chat::{self, Answer, Event, Loop, Passthrough, Plan, Summary};
pub use toolgate_engine::conversation::Notices;
use toolgate_engine::conversation::Request;
use toolgate_engine::governance::limits::Permit;

use crate::http::{ApiError, AppState, Caller};
use toolgate_engine::catalog::Catalog;
use toolgate_engine::tools::tool::context::CallContext;

/// The header naming the project (or workspace) a request works for; it
/// reaches native tools through their context, never the model.
pub const PROJECT_HEADER: HeaderName = HeaderName::from_static("x-toolgate-project");

/// The context of a request's tool calls: the request's id, the caller's
/// key and the project from `X-Toolgate-Project` (400 when it is not a safe
/// folder name).
pub fn call_context(headers: &HeaderMap, caller: &Caller) -> Result<CallContext, ApiError> {
    let project = match headers.get(PROJECT_HEADER) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::bad_request("the X-Toolgate-Project header is not valid text")
                })?
                .to_owned(),
        ),
    };
    // A key with projects is pinned to them.
    let project = match &caller.key {
        Some(key) => key.project(project).map_err(|message| {
            toolgate_engine::support::metrics::record(|m| m.reject("forbidden"));
            ApiError::new(StatusCode::FORBIDDEN, "project_not_allowed", message)
        })?,
        None => project,
    };
    CallContext::for_request(caller.request_id.clone())
        .with_key(caller.key_name())
        .with_subject(caller.subject(), caller.claims())
        .with_token(caller.bearer())
        .with_project(project)
        .map_err(|e| ApiError::bad_request(format!("X-Toolgate-Project: {e}")))
}

/// Has each MCP server called as each caller list its tools to `caller`
/// (`Executor::list_as_caller`): a face calls it before it lists a set's
/// tools or plans a request, so what the caller is offered from such a
/// server is what it lists to them.
pub async fn list_as(state: &AppState, catalog: &Catalog, caller: &Caller) {
    let Some(subject) = caller.subject() else {
        return;
    };
    if catalog.connections.is_none() || !catalog.mcp().has_per_caller() {
        return;
    }
    let context = CallContext::for_request(caller.request_id.clone())
        .with_key(caller.key_name())
        .with_subject(Some(subject), caller.claims())
        .with_token(caller.bearer());
    state.executor.list_as_caller(catalog, &context).await;
}

/// The header that picks a tool set when the body does not.
pub const TOOL_SET_HEADER: HeaderName = HeaderName::from_static("x-tool-set");

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
pub async fn plan_request(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request: Request,
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
    let context = call_context(headers, caller)?;
    let catalog = state.catalog();
    list_as(state, &catalog, caller).await;
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

/// A request of another protocol decoded by its face: the engine's
/// request, and what the face left out (said back to the client).
#[derive(Debug)]
pub struct Translated {
    pub request: Request,
    pub notices: Notices,
}

/// The header that carries a response's notices.
pub const NOTICE_HEADER: &str = "x-toolgate-notice";

/// `response` with `notices` in its header (and the log).
pub fn attach(notices: &Notices, mut response: Response) -> Response {
    if notices.is_empty() {
        return response;
    }
    let joined = notices.iter().collect::<Vec<_>>().join("; ");
    tracing::info!(notices = %joined, "left out of the model's request");
    // Header values are visible ASCII: anything else is replaced.
    let text: String = joined
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .collect();
    if let Ok(v) = axum::http::HeaderValue::from_str(&text) {
        response.headers_mut().insert(NOTICE_HEADER, v);
    }
    response
}

/// The header that names the targets a request on a route of several
/// tried, in order, with each outcome (a stream's: those of its first
/// model call).
pub const ATTEMPTS_HEADER: &str = "x-toolgate-attempts";

/// `response` with the targets tried in its header.
pub fn with_attempts(
    attempts: &[toolgate_engine::model::routing::Attempt],
    mut response: Response,
) -> Response {
    if let Some(v) = toolgate_engine::model::routing::attempts_header(attempts)
        .and_then(|v| axum::http::HeaderValue::from_str(&v).ok())
    {
        response.headers_mut().insert(ATTEMPTS_HEADER, v);
    }
    response
}

/// What a decoded request became: a tool loop to run, or a request to
/// pass to an upstream of the face's own protocol, untouched.
#[derive(Debug)]
pub enum Planned {
    Loop {
        the_loop: Box<Loop>,
        places: Places,
        notices: Notices,
    },
    /// Passed through: the response is the upstream's.
    Proxied(Response),
}

/// For a face of another protocol than chat completions: the request body
/// as JSON and what its decoding (`decode`) plans to, admitted — a loop
/// with what the decoding left out, or (`passthrough` allowing, no tools,
/// an upstream of the face's protocol) the body passed through.
pub async fn plan_decoded(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &Bytes,
    passthrough: Passthrough,
    decode: impl FnOnce(&Value) -> Result<Translated, ApiError>,
) -> Result<(Value, Planned), ApiError> {
    let original: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))?;
    let translated = decode(&original)?;
    let planned = plan_translated(state, caller, headers, body, passthrough, translated).await?;
    Ok((original, planned))
}

/// [`plan_decoded`] for a request its face decoded from `body` itself.
pub async fn plan_translated(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &Bytes,
    passthrough: Passthrough,
    translated: Translated,
) -> Result<Planned, ApiError> {
    let Translated { request, notices } = translated;
    let Admitted { plan, places } =
        plan_request(state, caller, headers, request, passthrough).await?;
    let planned = match plan {
        Plan::Loop(mut the_loop) => {
            let mut notices = notices;
            // What the face's deferred decoding left out.
            notices.extend(std::mem::take(&mut the_loop.request.notices));
            // A hosted tool is served by the set's tool of its name, or
            // by a model of the face's protocol (which runs it itself).
            let runs_hosted = the_loop.resolved.upstream.protocol == the_loop.request.face;
            notices.settle(|tool| {
                the_loop.gateway_tools.contains(tool)
                    || (runs_hosted && the_loop.request.hosted.iter().any(|h| h.name == tool))
            });
            Planned::Loop {
                the_loop,
                places,
                notices,
            }
        }
        Plan::Proxy {
            upstream,
            model,
            request,
            who,
            price,
        } => {
            let passed = Passed {
                upstream,
                model,
                request,
                who,
                price,
            };
            // Boxed, as the chat face's: its state is large.
            let response =
                Box::pin(passed.send(state, caller, body.clone(), places.stream)).await?;
            Planned::Proxied(attach(&notices, response))
        }
    };
    Ok(planned)
}

/// A request passed to an upstream of its face's protocol (a planned
/// [`Plan::Proxy`]).
#[derive(Debug)]
pub struct Passed {
    pub upstream: std::sync::Arc<toolgate_engine::model::upstream::Upstream>,
    pub model: String,
    pub request: Box<Request>,
    pub who: toolgate_engine::governance::spend::Who,
    pub price: Option<toolgate_config::format::PriceDecl>,
}

impl Passed {
    /// Admits the call by the caller's budgets, forwards `body` (the
    /// client's, with the model name the route sends) and passes the
    /// upstream's answer back unchanged: status, content type and body,
    /// with its length when it has one (a stream stays a stream). The
    /// answer's usage is read as it passes and counted once it ends.
    /// `guard` (a stream's place under the cap) is held until then.
    pub async fn send(
        self,
        state: &AppState,
        caller: &Caller,
        body: Bytes,
        guard: Option<Permit>,
    ) -> Result<Response, ApiError> {
        use toolgate_engine::governance::spend::prices::Price;
        let catalog = state.catalog();
        let rules = &catalog.spend;
        let price = rules.price(self.price.map(Price::from), &self.model);
        let admission = match rules.budgets.is_empty() {
            true => None,
            false => {
                // Its input, guessed at a token per four bytes.
                let guess = toolgate_engine::conversation::Usage {
                    input: (body.len() / 4) as u64,
                    calls: 1,
                    ..Default::default()
                };
                Some(
                    state
                        .spend
                        .admit(rules, &self.who, &guess, price)
                        .await
                        .map_err(ApiError::from)?,
                )
            }
        };
        let warnings = admission
            .as_ref()
            .map(|a| a.warnings.clone())
            .unwrap_or_default();
        let meter = super::metered::Meter {
            spend: std::sync::Arc::clone(&state.spend),
            admission,
            who: self.who,
            price,
            reader: toolgate_engine::model::protocol::metered::UsageReader::new(
                self.upstream.protocol,
                self.request.stream,
            ),
            model: self.model.clone(),
            began: std::time::Instant::now(),
        };
        let span = toolgate_engine::model::upstream::chat_span(&self.upstream, &self.model);
        let call = toolgate_engine::model::upstream::ModelCall {
            body: self.request.proxy_body(body, &self.model),
            model: &self.model,
            stream: self.request.stream,
            request_id: Some(&caller.request_id),
            headers: &self.request.headers,
            single_attempt: false,
            deadline: None,
        };
        let reply = tracing::Instrument::instrument(self.upstream.call(call), span.clone()).await?;
        let status = reply.response.status();
        let content_type = reply
            .response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .cloned();
        // Not size-capped (nothing is buffered but what the meter reads,
        // itself bounded); the upstream's read timeout and total deadline
        // still end a trickling answer.
        let body = self.upstream.body(reply, usize::MAX);
        let meter = status.is_success().then_some(meter);
        let mut out = Response::new(axum::body::Body::new(Held {
            body: super::metered::Metered::new(body, meter, span),
            _guard: guard,
        }));
        *out.status_mut() = status;
        if let Some(ct) = content_type {
            out.headers_mut()
                .insert(axum::http::header::CONTENT_TYPE, ct);
        }
        Ok(with_budget_warnings(&warnings, out))
    }
}

/// The header that says which budgets of the caller are past their
/// warning share.
pub const BUDGET_WARNING_HEADER: &str = "x-toolgate-budget-warning";

/// The header that says what a whole answer's model calls cost, in US
/// dollars (`unknown` when a price is not known).
pub const COST_HEADER: &str = "x-toolgate-cost";

/// `response` with budget warnings in its header.
pub fn with_budget_warnings(warnings: &[String], mut response: Response) -> Response {
    if warnings.is_empty() {
        return response;
    }
    let mut unique: Vec<&str> = Vec::new();
    for w in warnings {
        if !unique.contains(&w.as_str()) {
            unique.push(w);
        }
    }
    if let Ok(v) = axum::http::HeaderValue::from_str(&unique.join("; ")) {
        response.headers_mut().insert(BUDGET_WARNING_HEADER, v);
    }
    response
}

/// `response` with what the answer cost, and budget warnings.
pub fn with_cost(cost: &chat::Cost, mut response: Response) -> Response {
    if let Ok(v) = axum::http::HeaderValue::from_str(&cost.header()) {
        response.headers_mut().insert(COST_HEADER, v);
    }
    with_budget_warnings(&cost.budget_warnings, response)
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

/// Runs a planned loop and answers: `whole` encodes an answer, `events` a
/// stream's events (as SSE, kept alive while tools run). The places are
/// held until the answer is sent or the stream ends (or the client leaves).
/// `notices` (what the face left out) and what the model protocol could
/// not carry are said in the response's header.
pub async fn respond(
    the_loop: Box<Loop>,
    places: Places,
    notices: Notices,
    whole: impl FnOnce(Answer) -> Response,
    mut events: impl FnMut(Event) -> Vec<SseEvent> + Send + 'static,
) -> Result<Response, ApiError> {
    respond_with(the_loop, places, notices, whole, move |stream, places| {
        let sse = futures::StreamExt::flat_map(stream, move |e| {
            let _held = &places;
            futures::stream::iter(events(e).into_iter().map(Ok::<_, Infallible>))
        });
        Sse::new(sse)
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
            .into_response()
    })
    .await
}

/// A loop's events, boxed.
pub type Events = std::pin::Pin<Box<dyn futures::Stream<Item = Event> + Send>>;

/// [`respond`] with the face's own framing: `whole` answers a whole
/// answer, `stream` a stream of events (holding the places it is given
/// until it ends).
pub async fn respond_with(
    the_loop: Box<Loop>,
    places: Places,
    mut notices: Notices,
    whole: impl FnOnce(Answer) -> Response,
    stream: impl FnOnce(Events, Places) -> Response,
) -> Result<Response, ApiError> {
    if places.stream.is_none() {
        let mut answer = the_loop.run().await?;
        drop(places);
        notices.extend(std::mem::take(&mut answer.notices));
        let attempts = answer.summary.report.attempts.clone();
        let cost = answer.summary.report.cost.clone();
        let response = with_cost(&cost, attach(&notices, whole(answer)));
        return Ok(with_attempts(&attempts, response));
    }
    // Boxed: the run is large, and a whole answer's loop (the common case)
    // should not carry it.
    let (started, events) = Box::pin(the_loop.start_stream()).await?;
    notices.extend(started.notices);
    let response = stream(Box::pin(in_request_span(events)), places);
    let response = with_budget_warnings(&started.budget_warnings, response);
    Ok(with_attempts(&started.attempts, attach(&notices, response)))
}

/// A loop's events, each polled in the current (the request's) span. The
/// stream is polled by the connection after the handler returned: entering
/// the span on each poll keeps the model and tool calls it makes in the
/// request (in logs and traces).
pub fn in_request_span(
    events: impl futures::Stream<Item = Event> + Send + 'static,
) -> impl futures::Stream<Item = Event> + Send + 'static {
    let span = tracing::Span::current();
    let mut events = Box::pin(events);
    futures::stream::poll_fn(move |cx| {
        let _entered = span.enter();
        futures::Stream::poll_next(events.as_mut(), cx)
    })
}

/// 503 with `Retry-After` for a request over a concurrency cap.
fn overloaded(full: toolgate_engine::governance::limits::Full) -> ApiError {
    toolgate_engine::support::metrics::record(|m| m.reject(full.code));
    let mut err = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        full.code,
        full.message,
    );
    err.retry_after = Some(1);
    err
}

/// A request's input tokens, estimated without asking a model: its
/// conversation and tools as a chat-completions body, one token per four
/// bytes (rounded up), the rule of thumb for English text and code.
pub fn estimate_tokens(request: &Request) -> usize {
    use toolgate_engine::conversation::Protocol;
    use toolgate_engine::model::protocol::{self, Outgoing, Tools};
    let tools: Vec<std::sync::Arc<_>> = request.tools.iter().cloned().map(Into::into).collect();
    let call = Outgoing {
        request,
        model: &request.model,
        turns: request.turns(),
        tools: Tools(&tools),
        tool_choice: None,
        stream: false,
    };
    let body = protocol::encode(Protocol::OpenaiChat, &call, &mut Notices::default());
    let written: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let bytes: usize = ["messages", "tools"]
        .iter()
        .filter_map(|f| written.get(*f))
        .map(|v| v.to_string().len())
        .sum();
    bytes.div_ceil(4)
}

/// Seconds since the Unix epoch (`created` fields).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// The `toolgate` extension field every face adds: the loop's report and
/// its precise finish reason.
pub fn report(summary: &Summary) -> Value {
    let mut report = json!(summary.report);
    report["finish_reason"] = json!(summary.finish.as_str());
    report
}

/// [`report`] written as JSON text straight from the summary, without
/// building it as a value first (its fields in the report's order).
pub fn report_raw(summary: &Summary) -> Box<serde_json::value::RawValue> {
    #[derive(serde::Serialize)]
    struct Written<'a> {
        #[serde(flatten)]
        report: &'a chat::Report,
        finish_reason: &'a str,
    }
    toolgate_engine::conversation::raw(&Written {
        report: &summary.report,
        finish_reason: summary.finish.as_str(),
    })
}

/// The start of a request of `face`: its body as an object and the
/// engine's request for its `model`, with the fields every face shares.
pub fn request_of(
    req: &Value,
    face: toolgate_engine::conversation::Protocol,
) -> Result<(&Map<String, Value>, Request), ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("`model` is required").param("model"))?;
    let mut request = Request::new(face, model);
    shared_fields(obj, &mut request)?;
    Ok((obj, request))
}

/// The gateway's own request fields (every face but chat's): read by the
/// gateway, never sent upstream.
pub const EXTENSIONS: [&str; 3] = ["tool_set", "max_tool_iterations", "tool_mode"];

/// The request fields every face's API shares, read into `request`:
/// sampling (`temperature`, `top_p`), `stream`, the gateway's own fields
/// (`tool_set`, `max_tool_iterations`, `tool_mode`), and `fields` (the
/// face's top-level fields, raw, for a model of its protocol) without the
/// gateway's.
pub fn shared_fields(from: &Map<String, Value>, request: &mut Request) -> Result<(), ApiError> {
    request.modified = EXTENSIONS.iter().any(|k| from.contains_key(*k));
    request.params.temperature = from.get("temperature").and_then(Value::as_f64);
    request.params.top_p = from.get("top_p").and_then(Value::as_f64);
    request.stream = from.get("stream") == Some(&json!(true));
    request.include_usage = request.stream;
    request.tool_set = tool_set_field(from.get("tool_set"))?;
    request.max_tool_iterations = max_tool_iterations_field(from.get("max_tool_iterations"))?;
    request.fields = from
        .iter()
        .filter(|(k, _)| !EXTENSIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), toolgate_engine::conversation::raw(v)))
        .collect();
    Ok(())
}

/// The `tool_set` extension field, as every face but chat's reads it.
pub fn tool_set_field(value: Option<&Value>) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(
            ApiError::bad_request("`tool_set` must be the name of a tool set").param("tool_set"),
        ),
    }
}

/// The `max_tool_iterations` extension field, as every face but chat's
/// reads it.
pub fn max_tool_iterations_field(value: Option<&Value>) -> Result<Option<u32>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n >= 1) => Ok(Some(
            u32::try_from(n.as_u64().unwrap_or(1)).unwrap_or(u32::MAX),
        )),
        Some(_) => Err(ApiError::bad_request(
            "`max_tool_iterations` must be a whole number of at least 1",
        )
        .param("max_tool_iterations")),
    }
}

/// Whether a request asks for programmatic tool calling: a tool whose
/// `allowed_callers` names a program caller (`is_program`). Programs here
/// are the gateway's code mode (`run_code` over the request's tool set, on
/// its own interpreter, for any model): they call the set's tools, not the
/// client's, so each such client tool stays a tool the model calls
/// directly, said in a notice.
pub fn asks_for_programs(
    tools: Option<&Value>,
    is_program: impl Fn(&str) -> bool,
    notices: &mut Notices,
) -> bool {
    let mut asked = false;
    for t in tools.and_then(Value::as_array).into_iter().flatten() {
        let callers = t["allowed_callers"].as_array();
        if callers.is_some_and(|c| c.iter().filter_map(Value::as_str).any(&is_program)) {
            asked = true;
            let name = t["name"].as_str().unwrap_or("?");
            notices.add(format!(
                "tool `{name}` may be called from programs (`allowed_callers`): programs here run on the gateway's interpreter over the tool set's tools (`run_code`), so `{name}`, the client's, is offered to the model to call directly"
            ));
        }
    }
    asked
}

/// Structure-aware fuzzing of the faces' request translators (run by
/// `make test` at proptest's default count, and long by `make fuzz`): real
/// request shapes (`tests/fixtures/faces/`, those of Claude Code and Codex)
/// with random parts replaced by random JSON, which a translation must
/// answer or refuse, never panic on.
#[cfg(test)]
pub(crate) mod fuzzing {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    /// Any JSON value, a few levels deep.
    pub fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z_]{0,8}".prop_map(Value::String),
            prop_oneof![
                Just("text"),
                Just("image"),
                Just("tool_use"),
                Just("tool_result"),
                Just("user"),
                Just("assistant"),
                Just("system"),
                Just("function_call"),
                Just("namespace"),
                Just("base64"),
                Just("input_image"),
                Just("message"),
            ]
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-z_]{1,8}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// How many nodes `v` has.
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }

    /// Replaces node number `n` (in pre-order) of `v` with `with`.
    fn replace(v: &mut Value, n: &mut usize, with: &Value) -> bool {
        if *n == 0 {
            *v = with.clone();
            return true;
        }
        *n -= 1;
        match v {
            Value::Array(a) => a.iter_mut().any(|c| replace(c, n, with)),
            Value::Object(o) => o.values_mut().any(|c| replace(c, n, with)),
            _ => false,
        }
    }

    /// `seed` with `edits` applied: each replaces one of its nodes (picked
    /// by the number, modulo the node count) with a value.
    pub fn mutate(seed: &str, edits: &[(usize, Value)]) -> Value {
        let mut v: Value = serde_json::from_str(seed).unwrap_or(Value::Null);
        for (at, with) in edits {
            let mut n = at % count(&v);
            replace(&mut v, &mut n, with);
        }
        v
    }
}
