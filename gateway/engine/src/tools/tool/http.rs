//! HTTP tools: a templated request to an HTTP API, sent through the shared
//! connection pool, with the response read under a size cap and shaped for
//! the model.
//!
//! Argument values cannot reshape the request: in the URL they are
//! percent-encoded (and may not form a `.`/`..` segment), query values are
//! form-encoded by the URL library, header values holding CR or LF are
//! refused, and JSON bodies are built as JSON values, never by pasting text.
//! Values of `env` (secrets) are scrubbed from every error message.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use toolgate::truncate_chars;

use minijinja::Environment;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use serde_json::Value;

use super::ToolError;
use crate::identity::credentials::{Connections, CredentialsDecl, Store};
use crate::support::secrets::Scrubber;
use crate::support::template::{self, JSON_SUFFIX};

/// A compiled HTTP tool. Templates are referred to by their name in the
/// catalog's template environment.
#[derive(Debug)]
pub struct HttpTool {
    pub method: reqwest::Method,
    pub templates: Arc<Environment<'static>>,
    pub url: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(HeaderName, String)>,
    pub body: Option<Body>,
    /// JSON pointer into the response.
    pub select: Option<String>,
    /// Template over `response` and `args` that replaces the response.
    pub output: Option<String>,
    /// Values of the environment variables this tool reads. Secret.
    pub env: BTreeMap<String, String>,
    /// Templates that read `env`: what they render is a secret too (a
    /// header `Basic <base64 of user:pass>`), scrubbed from errors.
    pub secret_templates: BTreeSet<String>,
    /// A template reads who calls (`request.*`): its answers may differ
    /// per caller, and cached results must too.
    pub reads_caller: bool,
    /// Whose token it sends as `Authorization: Bearer` (its file's
    /// `credentials`); `None`: what its headers say, for every caller.
    pub credentials: Option<CredentialsDecl>,
    pub max_response_bytes: usize,
    /// Redirects followed; `None`: a 3xx answer is an error.
    pub redirects: Option<Redirects>,
}

/// Which redirects a tool follows.
#[derive(Debug)]
pub struct Redirects {
    pub max: usize,
    /// Origins other than the request's own that it may be sent to.
    pub origins: Vec<url::Origin>,
}

/// A compiled request body.
#[derive(Debug)]
pub enum Body {
    Json(JsonBody),
    Text {
        template: String,
        content_type: String,
    },
}

/// A JSON body whose leaves may be templates.
#[derive(Debug)]
pub enum JsonBody {
    Literal(Value),
    /// A template that is one expression, rendered as JSON (keeps its type).
    Value(String),
    /// A template mixing text and expressions: always a JSON string.
    Text(String),
    Array(Vec<JsonBody>),
    Object(Vec<(String, JsonBody)>),
}

/// Bytes of an error response kept in the error message.
const ERROR_BODY_CHARS: usize = 500;

impl HttpTool {
    /// What the tool sends and keeps, as text: its templates, never the
    /// values of the environment variables they read.
    pub fn definition(&self) -> String {
        format!(
            "{} {} {:?} {:?} {:?} {:?} {:?}",
            self.method, self.url, self.query, self.headers, self.body, self.select, self.output
        )
    }

    /// Runs one call with validated `args`, for no one in particular.
    pub async fn call(&self, client: &reqwest::Client, args: &Value) -> Result<Value, ToolError> {
        let caller = crate::support::template::caller(&toolgate::CallContext::default());
        let mut refused = false;
        self.call_inner_scrubbed(client, args, None, &caller, None, &mut refused)
            .await
    }

    /// Runs one call with validated `args` for the caller of `ctx` (what
    /// templates read as `request`), sending its request id as
    /// `X-Request-Id` (unless the tool declares that header itself). A tool
    /// with `credentials` sends the caller's token from `connections`; when
    /// the upstream refuses it (401), once more with a renewed one.
    pub async fn call_traced(
        &self,
        client: &reqwest::Client,
        args: &Value,
        ctx: &toolgate::CallContext,
        connections: Option<(&Connections, &Store)>,
    ) -> Result<Value, ToolError> {
        let caller = crate::support::template::caller(ctx);
        let id = Some(ctx.request_id.as_str());
        let mut refused = false;
        let Some(how) = &self.credentials else {
            return self
                .call_inner_scrubbed(client, args, id, &caller, None, &mut refused)
                .await;
        };
        let Some((connections, store)) = connections else {
            return Err(ToolError::Failed(
                "this tool acts as the calling user, and the gateway has no `connections`".into(),
            ));
        };
        let caller = &caller;
        connections
            .with_token(store, how, ctx, |token| async move {
                let mut refused = false;
                let result = self
                    .call_inner_scrubbed(client, args, id, caller, Some(&token), &mut refused)
                    .await;
                (result, refused)
            })
            .await
    }

    /// One request; `refused` is set when it carried `bearer` and the
    /// upstream answered 401.
    async fn call_inner_scrubbed(
        &self,
        client: &reqwest::Client,
        args: &Value,
        request_id: Option<&str>,
        caller: &Value,
        bearer: Option<&str>,
        refused: &mut bool,
    ) -> Result<Value, ToolError> {
        // What secret-reading templates rendered this call; the scrubber
        // is built only when there is an error to scrub.
        let mut rendered = Vec::new();
        self.call_inner(
            client,
            args,
            request_id,
            caller,
            bearer,
            refused,
            &mut rendered,
        )
        .await
        .map_err(|e| {
            let mut secrets = Scrubber::new(self.env.values().map(String::as_str));
            for r in rendered.iter().map(String::as_str).chain(bearer) {
                secrets.add(r);
            }
            redact_error(e, &secrets)
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn call_inner(
        &self,
        client: &reqwest::Client,
        args: &Value,
        request_id: Option<&str>,
        caller: &Value,
        bearer: Option<&str>,
        refused: &mut bool,
        secrets: &mut Vec<String>,
    ) -> Result<Value, ToolError> {
        let env = minijinja::Value::from_serialize(&self.env);
        let request = minijinja::Value::from_serialize(caller);
        let ctx = minijinja::context! {
            args => minijinja::Value::from_serialize(args),
            env => env.clone(),
            request => request,
        };
        // Values in a URL are encoded, so no argument (or claim) can add a
        // path segment, a query parameter or a fragment.
        let url_ctx = minijinja::context! {
            args => minijinja::Value::from_serialize(template::url_encode_strings(args)),
            env => env,
            request => minijinja::Value::from_serialize(template::url_encode_strings(caller)),
        };

        let raw_url = self.render(&self.url, url_ctx, "http.url")?;
        if template::has_dot_segment(&raw_url) {
            return Err(ToolError::Refused(
                "an argument would add a `.` or `..` segment to the URL path; refusing to send the request".into(),
            ));
        }
        let mut url = url::Url::parse(&raw_url)
            .map_err(|e| ToolError::Failed(format!("the rendered URL is invalid: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::Failed("the rendered URL is not http(s)".into()));
        }
        if !self.query.is_empty() {
            let mut rendered = Vec::with_capacity(self.query.len());
            for (key, tmpl) in &self.query {
                let value = self.render(tmpl, ctx.clone(), &format!("http.query.{key}"))?;
                self.note_secret(tmpl, &value, secrets);
                if !value.is_empty() {
                    rendered.push((key, value));
                }
            }
            // No `?` at all when every value rendered empty.
            if !rendered.is_empty() {
                let mut pairs = url.query_pairs_mut();
                for (key, value) in rendered {
                    pairs.append_pair(key, &value);
                }
            }
        }

        let mut request = client.request(self.method.clone(), url);
        if let Some(id) = request_id
            && !self.headers.iter().any(|(name, _)| *name == "x-request-id")
            && let Ok(value) = HeaderValue::from_str(id)
        {
            request = request.header("x-request-id", value);
        }
        // A tool that sets trace headers itself keeps its own.
        if crate::support::telemetry::enabled()
            && !self
                .headers
                .iter()
                .any(|(name, _)| *name == "traceparent" || *name == "tracestate")
        {
            let mut trace = http::HeaderMap::new();
            crate::support::telemetry::inject(&mut trace);
            request = request.headers(trace);
        }
        for (name, tmpl) in &self.headers {
            let value = self.render(tmpl, ctx.clone(), &format!("http.headers.{name}"))?;
            self.note_secret(tmpl, &value, secrets);
            if value.is_empty() {
                continue;
            }
            if value.contains(['\r', '\n']) {
                return Err(ToolError::Refused(format!(
                    "header `{name}` would contain a line break; refusing to send the request"
                )));
            }
            let value = HeaderValue::from_str(&value).map_err(|_| {
                ToolError::Refused(format!("header `{name}` would contain invalid characters"))
            })?;
            request = request.header(name.clone(), value);
        }
        match &self.body {
            None => {}
            Some(Body::Json(body)) => {
                let value = self.render_json(body, &ctx)?;
                request = request.json(&value);
            }
            Some(Body::Text {
                template,
                content_type,
            }) => {
                // A form body gets its argument values form-encoded, so a
                // value cannot add a field.
                let text = if is_form(content_type) {
                    let form_ctx = minijinja::context! {
                        args => minijinja::Value::from_serialize(template::form_encode_strings(args)),
                        env => minijinja::Value::from_serialize(&self.env),
                        request => minijinja::Value::from_serialize(template::form_encode_strings(caller)),
                    };
                    self.render(template, form_ctx, "http.body")?
                } else {
                    self.render(template, ctx.clone(), "http.body")?
                };
                self.note_secret(template, &text, secrets);
                request = request
                    .header(CONTENT_TYPE, content_type.as_str())
                    .body(text);
            }
        }

        let mut request = request.build().map_err(|e| {
            ToolError::Failed(format!("cannot build the request: {}", describe_reqwest(e)))
        })?;
        if let Some(token) = bearer {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                ToolError::Failed("the caller's token holds characters a header cannot".into())
            })?;
            value.set_sensitive(true);
            request
                .headers_mut()
                .insert(reqwest::header::AUTHORIZATION, value);
        }
        let response = self.send(client, request).await?;
        let status = response.status();
        *refused = bearer.is_some() && status == reqwest::StatusCode::UNAUTHORIZED;
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.contains("json"));
        let body = read_capped(response, self.max_response_bytes).await?;

        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            return Err(ToolError::Backend(format!(
                "backend answered HTTP {status}: {}",
                truncate_chars(text.trim(), ERROR_BODY_CHARS)
            )));
        }

        let mut data = if is_json {
            serde_json::from_slice(&body)
                .map_err(|e| ToolError::Failed(format!("backend sent invalid JSON: {e}")))?
        } else {
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) => v,
                Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
            }
        };
        if let Some(pointer) = &self.select {
            data = data.pointer(pointer).cloned().ok_or_else(|| {
                ToolError::Failed(format!(
                    "the response has nothing at `{pointer}` (response.select)"
                ))
            })?;
        }
        if let Some(output) = &self.output {
            let ctx = minijinja::context! {
                response => minijinja::Value::from_serialize(&data),
                args => minijinja::Value::from_serialize(args),
                request => minijinja::Value::from_serialize(caller),
            };
            data = Value::String(self.render(output, ctx, "response.template")?);
        }
        Ok(data)
    }

    /// Sends `request`, following redirects only as the tool declares: up
    /// to `max`, to its own origin (with every header) or to a listed
    /// origin (without the tool's declared headers). The shared client
    /// follows none by itself and sends no `Referer`.
    async fn send(
        &self,
        client: &reqwest::Client,
        mut request: reqwest::Request,
    ) -> Result<reqwest::Response, ToolError> {
        let origin = request.url().origin();
        let mut hops = 0;
        loop {
            let retry = request.try_clone();
            let response = client.execute(request).await.map_err(|e| {
                ToolError::Backend(format!("request failed: {}", describe_reqwest(e)))
            })?;
            let status = response.status();
            if !status.is_redirection() || status == reqwest::StatusCode::NOT_MODIFIED {
                return Ok(response);
            }
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let Some(location) = location else {
                return Ok(response);
            };
            let Some(policy) = &self.redirects else {
                return Err(ToolError::Backend(format!(
                    "backend answered HTTP {status} (a redirect to {location}); redirects are not followed unless the tool declares `http.redirects`"
                )));
            };
            let Some(mut next) = retry else {
                return Err(ToolError::Backend(format!(
                    "backend answered HTTP {status}; the request cannot be sent again"
                )));
            };
            hops += 1;
            if hops > policy.max {
                return Err(ToolError::Backend(format!(
                    "more than {} redirects (http.redirects.max)",
                    policy.max
                )));
            }
            let target = next
                .url()
                .join(&location)
                .map_err(|e| ToolError::Backend(format!("the redirect target is invalid: {e}")))?;
            if !matches!(target.scheme(), "http" | "https") {
                return Err(ToolError::Backend("a redirect left http(s)".into()));
            }
            let to = target.origin();
            if to != origin {
                if !policy.origins.contains(&to) {
                    return Err(ToolError::Backend(format!(
                        "backend redirected to {}, another origin not listed in http.redirects.origins",
                        to.ascii_serialization()
                    )));
                }
                // Another origin never gets the tool's headers: they may
                // carry its credentials.
                for (name, _) in &self.headers {
                    next.headers_mut().remove(name);
                }
                next.headers_mut().remove(reqwest::header::AUTHORIZATION);
                next.headers_mut().remove(reqwest::header::COOKIE);
            }
            // 303, and 301/302 after anything but GET/HEAD: GET, no body
            // (what every client does).
            let downgrade = status == reqwest::StatusCode::SEE_OTHER
                || (matches!(status.as_u16(), 301 | 302)
                    && !matches!(*next.method(), reqwest::Method::GET | reqwest::Method::HEAD));
            if downgrade {
                *next.method_mut() = reqwest::Method::GET;
                *next.body_mut() = None;
                next.headers_mut().remove(CONTENT_TYPE);
            }
            *next.url_mut() = target;
            request = next;
        }
    }

    /// Remembers what a template reading `env` rendered: a secret.
    fn note_secret(&self, template: &str, rendered: &str, secrets: &mut Vec<String>) {
        if self.secret_templates.contains(template) {
            secrets.push(rendered.to_owned());
        }
    }

    fn render(&self, name: &str, ctx: minijinja::Value, what: &str) -> Result<String, ToolError> {
        template::render(&self.templates, name, ctx)
            .map_err(|e| ToolError::Failed(format!("cannot render {what}: {e}")))
    }

    /// A single-expression template's value, `None` when it renders
    /// nothing (an absent argument).
    fn render_value(&self, name: &str, ctx: &minijinja::Value) -> Result<Option<Value>, ToolError> {
        let text = self.render(name, ctx.clone(), "http.body")?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ToolError::Failed(format!("http.body rendered invalid JSON: {e}")))
    }

    fn render_json(&self, body: &JsonBody, ctx: &minijinja::Value) -> Result<Value, ToolError> {
        Ok(match body {
            JsonBody::Literal(v) => v.clone(),
            JsonBody::Text(name) => Value::String(self.render(name, ctx.clone(), "http.body")?),
            JsonBody::Value(name) => self.render_value(name, ctx)?.unwrap_or(Value::Null),
            JsonBody::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|b| self.render_json(b, ctx))
                    .collect::<Result<_, _>>()?,
            ),
            JsonBody::Object(fields) => {
                let mut out = serde_json::Map::with_capacity(fields.len());
                for (k, b) in fields {
                    // A field that is one `{{ expression }}` of an absent
                    // argument is left out (an explicit null stays null).
                    if let JsonBody::Value(name) = b {
                        if let Some(value) = self.render_value(name, ctx)? {
                            out.insert(k.clone(), value);
                        }
                        continue;
                    }
                    out.insert(k.clone(), self.render_json(b, ctx)?);
                }
                Value::Object(out)
            }
        })
    }
}

/// Replaces every secret, in every encoding, in an error message.
fn redact_error(e: ToolError, secrets: &Scrubber) -> ToolError {
    match e {
        ToolError::Backend(m) => ToolError::Backend(secrets.scrub(&m)),
        ToolError::Failed(m) => ToolError::Failed(secrets.scrub(&m)),
        ToolError::Refused(m) => ToolError::Refused(secrets.scrub(&m)),
        other => other,
    }
}

/// `true` for `application/x-www-form-urlencoded` (with or without
/// parameters).
pub fn is_form(content_type: &str) -> bool {
    content_type.split(';').next().is_some_and(|t| {
        t.trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    })
}

/// The name under which a JSON body leaf template is stored.
pub fn json_leaf_name(tool: &str, pointer: &str, single_expression: bool) -> String {
    if single_expression {
        format!("{tool}/http.body{pointer}{JSON_SUFFIX}")
    } else {
        format!("{tool}/http.body{pointer}")
    }
}

/// A reqwest error without the URL (which may hold secrets in its query).
fn describe_reqwest(e: reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "error"
    };
    let mut msg = kind.to_owned();
    let e = e.without_url();
    let mut source = std::error::Error::source(&e);
    // Walk to the innermost cause: it says what actually happened.
    let mut last = None;
    while let Some(s) = source {
        last = Some(s.to_string());
        source = s.source();
    }
    if let Some(cause) = last {
        msg.push_str(": ");
        msg.push_str(&cause);
    }
    msg
}

/// Reads the body, stopping as soon as it exceeds `cap` bytes.
async fn read_capped(mut response: reqwest::Response, cap: usize) -> Result<Vec<u8>, ToolError> {
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        ToolError::Backend(format!(
            "reading the response failed: {}",
            describe_reqwest(e)
        ))
    })? {
        if body.len() + chunk.len() > cap {
            return Err(too_large(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn too_large(cap: usize) -> ToolError {
    ToolError::Backend(format!(
        "the response is larger than {cap} bytes (limits.max_response_bytes); ask for less"
    ))
}
/// Builds the shared HTTP client used by HTTP tools.
///
/// It follows no redirect by itself (HTTP tools follow theirs as they
/// declare, see this module) and never sends `Referer`. A client
/// that cannot be built is an error, never a default client without these
/// settings.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .build()
}
