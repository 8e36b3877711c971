//! Validating the HTTP tools of `tools.d` files: env needs, schemas,
//! templates and the variables they read, and the shape of the request.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use reqwest::header::HeaderName;
use serde_json::Value;

use crate::support::template::{self, TemplateSet};
use crate::tools::tool::http::{Body, JsonBody, json_leaf_name};
use toolgate_config::Diagnostic;
use toolgate_config::format::{BodyDecl, EnvNeed, HttpDecl, Method, ToolDecl};
use toolgate_config::load::{Loaded, RawToolFile};

/// Checks the file's `env` declarations and reads the set variables.
pub(super) fn check_env(
    file: &Loaded<RawToolFile>,
    env: &dyn Fn(&str) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    for (name, need) in &file.value.env {
        let valid = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !valid {
            diags.push(Diagnostic::error(
                &file.file,
                file.pos(&format!("env.{name}")),
                format!("{name:?} is not a valid environment variable name"),
                "use letters, digits and `_`, not starting with a digit",
            ));
            continue;
        }
        match env(name) {
            Some(v) => {
                values.insert(name.clone(), v);
            }
            None if *need == EnvNeed::Required => diags.push(Diagnostic::error(
                &file.file,
                file.pos(&format!("env.{name}")),
                format!("required environment variable {name} is not set"),
                "set it, or mark it `optional` to disable the tools that use it instead",
            )),
            None => {}
        }
    }
    values
}

/// An HTTP tool that passed validation, before the template environment is
/// finished.
pub(super) struct PendingHttp {
    pub(super) method: reqwest::Method,
    pub(super) url: String,
    pub(super) query: Vec<(String, String)>,
    pub(super) headers: Vec<(HeaderName, String)>,
    pub(super) body: Option<Body>,
    pub(super) select: Option<String>,
    pub(super) output: Option<String>,
    pub(super) env_used: BTreeSet<String>,
    pub(super) env: BTreeMap<String, String>,
    /// Templates that read `env` (what they render is secret).
    pub(super) secret_templates: BTreeSet<String>,
    /// A template reads who calls (`request.*`).
    pub(super) reads_caller: bool,
    /// Whose token it sends (its file's `credentials`).
    pub(super) credentials: Option<toolgate_config::format::CredentialsDecl>,
    pub(super) redirects: Option<crate::tools::tool::http::Redirects>,
}

/// What names a template may read.
struct Scope<'a> {
    args: &'a BTreeSet<String>,
    env: &'a IndexMap<String, EnvNeed>,
    response: bool,
}

/// Checks one tool declaration, compiling its schema and templates.
pub(super) fn check_tool(
    file: &Loaded<RawToolFile>,
    i: usize,
    decl: &ToolDecl,
    templates: &mut TemplateSet,
    diags: &mut Vec<Diagnostic>,
) -> Option<PendingHttp> {
    let mut c = ToolCheck {
        file,
        index: i,
        name: &decl.name,
        templates,
        diags,
        params: BTreeSet::new(),
        env_used: BTreeSet::new(),
        secret_templates: BTreeSet::new(),
        args_templates: BTreeSet::new(),
        reads_caller: false,
    };
    if decl.description.trim().is_empty() {
        c.err(
            ".description",
            "the description is empty".into(),
            "say what the tool does: the model reads it to decide when to call it",
        );
    }
    // Parameters: a JSON Schema of type object whose `required` names
    // declared properties.
    let (params, validator) = check_parameters(&decl.parameters, &mut |p, msg, hint| {
        c.err(&format!(".parameters{p}"), msg, hint)
    });
    c.params = params;
    let http = &decl.http;
    let url = c.check_url(&http.url);
    let query = c.check_query(http);
    let headers = c.check_headers(http);
    let body = c.check_body(http);
    let output = c.check_response(decl);
    c.check_durations(decl);
    c.warn_raw_text_body(body.as_ref());
    let redirects = c.check_redirects(http);
    // Compiled only to refuse an unusable schema here: the tool compiles
    // it again on its first call (most tools of a large catalog are never
    // called, and a validator costs more than its schema).
    drop(validator?);
    Some(PendingHttp {
        method: match http.method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
            Method::Delete => reqwest::Method::DELETE,
        },
        url: url?,
        query,
        headers,
        body,
        select: decl.response.select.clone().filter(|s| !s.is_empty()),
        output,
        env_used: c.env_used,
        env: BTreeMap::new(),
        secret_templates: c.secret_templates,
        reads_caller: c.reads_caller,
        credentials: None,
        redirects,
    })
}

/// One HTTP tool declaration being checked: where it is, the templates it
/// compiled so far and what they read, and the diagnostics.
struct ToolCheck<'a> {
    file: &'a Loaded<RawToolFile>,
    /// Its index in the file's `tools`.
    index: usize,
    name: &'a str,
    templates: &'a mut TemplateSet,
    diags: &'a mut Vec<Diagnostic>,
    /// The declared argument names.
    params: BTreeSet<String>,
    /// The `env` variables its templates read.
    env_used: BTreeSet<String>,
    /// Templates that read `env` (their output is a secret to scrub).
    secret_templates: BTreeSet<String>,
    /// Templates that read `args`.
    args_templates: BTreeSet<String>,
    /// A template reads who calls (`request.*`).
    reads_caller: bool,
}

impl ToolCheck<'_> {
    fn at(&self, p: &str) -> toolgate_config::Pos {
        self.file.pos(&format!("tools[{}]{p}", self.index))
    }

    fn err(&mut self, p: &str, message: String, hint: &str) {
        let at = self.at(p);
        self.diags
            .push(Diagnostic::error(&self.file.file, at, message, hint));
    }

    /// Compiles the template `source` under `key`, checking the variables
    /// it reads (`response` is in scope for the response template only).
    fn add(&mut self, key: String, source: &str, at: &str, response: bool) -> Option<String> {
        let pos = self.at(at);
        let scope = Scope {
            args: &self.params,
            env: &self.file.value.env,
            response,
        };
        match self.templates.add(key.clone(), source.to_owned()) {
            Ok(vars) => {
                for var in vars {
                    if let Err((msg, hint)) = check_variable(&var, &scope) {
                        self.diags
                            .push(Diagnostic::error(&self.file.file, pos, msg, &hint));
                    } else if let Some(v) = var.strip_prefix("env.") {
                        self.env_used
                            .insert(v.split('.').next().unwrap_or(v).to_owned());
                        self.secret_templates.insert(key.clone());
                    } else if var == "args" || var.starts_with("args.") {
                        self.args_templates.insert(key.clone());
                    } else if var.starts_with("request.") {
                        self.reads_caller = true;
                    }
                }
                Some(key)
            }
            Err(e) => {
                self.diags.push(Diagnostic::error(
                    &self.file.file,
                    pos,
                    format!("the template does not compile: {e}"),
                    "fix the minijinja syntax",
                ));
                None
            }
        }
    }

    /// An absolute http(s) URL whose arguments fill only path and query.
    fn check_url(&mut self, url: &str) -> Option<String> {
        let key = self.add(format!("{}/http.url", self.name), url, ".http.url", false);
        let starts_ok = ["http://", "https://", "{{ env.", "{{env."]
            .iter()
            .any(|p| url.trim_start().starts_with(p));
        if !starts_ok {
            self.err(
                ".http.url",
                format!("the URL {url:?} does not start with http:// or https://"),
                "write an absolute http(s) URL; arguments may only fill in its path and query",
            );
        } else if !template::is_template(url)
            && let Err(e) = url::Url::parse(url)
        {
            self.err(
                ".http.url",
                format!("the URL is invalid: {e}"),
                "write an absolute http(s) URL",
            );
        }
        key
    }

    fn check_query(&mut self, http: &HttpDecl) -> Vec<(String, String)> {
        let mut query = Vec::new();
        for (k, v) in &http.query {
            let key = format!("{}/http.query.{k}", self.name);
            if let Some(t) = self.add(key, v, &format!(".http.query.{k}"), false) {
                query.push((k.clone(), t));
            }
        }
        query
    }

    fn check_headers(&mut self, http: &HttpDecl) -> Vec<(HeaderName, String)> {
        let mut headers = Vec::new();
        for (k, v) in &http.headers {
            let at = format!(".http.headers.{k}");
            let Ok(header) = HeaderName::from_bytes(k.as_bytes()) else {
                self.err(
                    &at,
                    format!("{k:?} is not a valid header name"),
                    "use letters, digits and `-`",
                );
                continue;
            };
            let key = format!("{}/http.headers.{k}", self.name);
            if let Some(t) = self.add(key, v, &at, false) {
                headers.push((header, t));
            }
        }
        headers
    }

    /// Exactly one of `json` and `text`; never with GET.
    fn check_body(&mut self, http: &HttpDecl) -> Option<Body> {
        let body = match &http.body {
            None => None,
            Some(BodyDecl {
                json: Some(_),
                text: Some(_),
                ..
            })
            | Some(BodyDecl {
                json: None,
                text: None,
                ..
            }) => {
                self.err(
                    ".http.body",
                    "a body needs exactly one of `json` and `text`".into(),
                    "keep one of the two",
                );
                None
            }
            Some(BodyDecl {
                json: Some(_),
                content_type: Some(_),
                ..
            }) => {
                self.err(
                    ".http.body.content_type",
                    "a `json` body is always sent as application/json".into(),
                    "remove `content_type`",
                );
                None
            }
            Some(BodyDecl {
                text: Some(template),
                content_type,
                ..
            }) => {
                let key = format!("{}/http.body", self.name);
                self.add(key, template, ".http.body.text", false)
                    .map(|t| Body::Text {
                        template: t,
                        content_type: content_type
                            .clone()
                            .unwrap_or_else(|| "text/plain; charset=utf-8".to_owned()),
                    })
            }
            Some(BodyDecl {
                json: Some(value), ..
            }) => {
                let name = self.name;
                let mut compile = |pointer: &str, source: &str| {
                    let single = template::is_single_expression(source);
                    let key = json_leaf_name(name, pointer, single);
                    let at = format!(".http.body.json{}", pointer.replace('/', "."));
                    let source = if single {
                        std::borrow::Cow::Owned(template::empty_when_undefined(source))
                    } else {
                        std::borrow::Cow::Borrowed(source)
                    };
                    self.add(key, &source, &at, false).map(|k| {
                        if single {
                            JsonBody::Value(k)
                        } else {
                            JsonBody::Text(k)
                        }
                    })
                };
                compile_json_body(value, "", &mut compile).map(Body::Json)
            }
        };
        if matches!(http.method, Method::Get) && body.is_some() {
            self.err(
                ".http.body",
                "a GET request cannot have a body".into(),
                "use POST, PUT or PATCH, or move the values to `query`",
            );
        }
        body
    }

    /// `response.select` is a JSON pointer; returns the compiled
    /// `response.template`, if any.
    fn check_response(&mut self, decl: &ToolDecl) -> Option<String> {
        if let Some(select) = &decl.response.select
            && !select.is_empty()
            && !select.starts_with('/')
        {
            self.err(
                ".response.select",
                format!("{select:?} is not a JSON pointer"),
                "write it as `/field/0/name`, starting with `/`",
            );
        }
        let t = decl.response.template.as_ref()?;
        let key = format!("{}/response.template", self.name);
        self.add(key, t, ".response.template", true)
    }

    fn check_durations(&mut self, decl: &ToolDecl) {
        if let Some(cache) = &decl.cache
            && cache.ttl.is_zero()
        {
            self.err(
                ".cache.ttl",
                "the cache TTL is zero".into(),
                "give a duration such as `5m`, or remove `cache`",
            );
        }
        if let Some(t) = decl.http.timeout
            && t.is_zero()
        {
            self.err(
                ".http.timeout",
                "the timeout is zero".into(),
                "give a duration such as `10s`, or remove it to use the default",
            );
        }
    }

    /// A warning for a text body that inserts arguments raw (neither JSON
    /// nor form-encoded), where a value can change the body's structure.
    fn warn_raw_text_body(&mut self, body: Option<&Body>) {
        if let Some(Body::Text {
            template,
            content_type,
        }) = body
            && self.args_templates.contains(template)
            && !crate::tools::tool::http::is_form(content_type)
        {
            let at = self.at(".http.body.text");
            self.diags.push(Diagnostic::warning(
                &self.file.file,
                at,
                format!(
                    "the text body inserts arguments as they are (content type {content_type}), so a value can change the body's structure"
                ),
                "use a `json` body (values stay JSON values) or content_type application/x-www-form-urlencoded (values are form-encoded)",
            ));
        }
    }

    /// The declared redirects: 1 to 10, to origins only.
    fn check_redirects(&mut self, http: &HttpDecl) -> Option<crate::tools::tool::http::Redirects> {
        let r = http.redirects.as_ref()?;
        let mut ok = true;
        if !(1..=10).contains(&r.max) {
            self.err(
                ".http.redirects.max",
                format!("{} redirects is outside 1 to 10", r.max),
                "give a number from 1 to 10, or remove `redirects` to follow none",
            );
            ok = false;
        }
        let mut origins = Vec::new();
        for (j, o) in r.origins.iter().enumerate() {
            match url::Url::parse(o) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.path() == "/" => {
                    origins.push(u.origin());
                }
                _ => {
                    self.err(
                        &format!(".http.redirects.origins[{j}]"),
                        format!("{o:?} is not an origin"),
                        "write scheme and host (and port), e.g. https://cdn.example.com",
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(crate::tools::tool::http::Redirects {
            max: usize::from(r.max),
            origins,
        })
    }
}

/// Checks a parameters schema; returns the declared property names and
/// the compiled schema (compiled once, here: compiling checks it against
/// the meta-schema too).
pub(super) fn check_parameters(
    schema: &Value,
    err: &mut dyn FnMut(&str, String, &str),
) -> (BTreeSet<String>, Option<jsonschema::Validator>) {
    let Some(obj) = schema.as_object() else {
        err(
            "",
            "parameters must be a JSON Schema object".into(),
            "write `type: object` with `properties`",
        );
        return (BTreeSet::new(), None);
    };
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        err(
            ".type",
            "the parameters schema must have `type: object`".into(),
            "tool arguments are always an object: add `type: object`",
        );
    }
    // Compiling checks the schema against its meta-schema first.
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => Some(v),
        Err(e) => {
            err(
                "",
                format!("parameters is not a valid JSON Schema: {e}"),
                "fix the schema (see json-schema.org)",
            );
            None
        }
    };
    let props: BTreeSet<String> = obj
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    if let Some(required) = obj.get("required").and_then(Value::as_array) {
        for (j, r) in required.iter().enumerate() {
            if let Some(r) = r.as_str()
                && !props.contains(r)
            {
                err(
                    &format!(".required[{j}]"),
                    format!("`{r}` is required but not declared in `properties`"),
                    "declare it under `properties` or remove it from `required`",
                );
            }
        }
    }
    (props, validator)
}

/// Minijinja's global functions, which templates may call.
const TEMPLATE_FUNCTIONS: &[&str] = &["range", "dict", "namespace", "debug"];

fn check_variable(var: &str, scope: &Scope<'_>) -> Result<(), (String, String)> {
    let mut parts = var.splitn(3, '.');
    let root = parts.next().unwrap_or_default();
    let field = parts.next();
    match (root, field) {
        ("args", None) => Ok(()),
        ("args", Some(f)) if scope.args.contains(f) => Ok(()),
        ("args", Some(f)) => Err((
            format!("the template reads `args.{f}`, which is not a declared parameter"),
            if scope.args.is_empty() {
                "declare it under `parameters.properties`".to_owned()
            } else {
                format!(
                    "declare it under `parameters.properties` or use one of: {}",
                    scope.args.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            },
        )),
        ("env", Some(v)) if scope.env.contains_key(v) => Ok(()),
        ("env", Some(v)) => Err((
            format!("the template reads `env.{v}`, which the file does not declare"),
            format!("add `{v}: optional` (or `required`) under the file's top-level `env`"),
        )),
        ("env", None) => Err((
            "the template reads all of `env`".to_owned(),
            "read single variables as `env.NAME`".to_owned(),
        )),
        ("response", _) if scope.response => Ok(()),
        ("request", _) if crate::support::template::reads_caller(var) => Ok(()),
        ("request", _) => Err((
            format!("the template reads `{var}`, which does not exist"),
            "who calls is `request.key`, `request.project`, `request.subject` or `request.claims.<claim>`".to_owned(),
        )),
        (f, _) if TEMPLATE_FUNCTIONS.contains(&f) => Ok(()),
        (other, _) => Err((
            format!("the template reads `{other}`, which does not exist"),
            if scope.response {
                "use `response`, `args.<parameter>`, `env.<variable>` or `request.<key|project|subject|claims.NAME>`".to_owned()
            } else {
                "use `args.<parameter>`, `env.<variable>` or `request.<key|project|subject|claims.NAME>`".to_owned()
            },
        )),
    }
}

/// Compiles one templated leaf of a JSON body: (diagnostics, JSON pointer,
/// template source).
type LeafCompiler<'a> = dyn FnMut(&str, &str) -> Option<JsonBody> + 'a;

/// Compiles a JSON body: string leaves holding template syntax become
/// templates, everything else stays literal.
fn compile_json_body(
    value: &Value,
    pointer: &str,
    compile: &mut LeafCompiler<'_>,
) -> Option<JsonBody> {
    Some(match value {
        Value::String(s) if template::is_template(s) => compile(pointer, s)?,
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                out.push(compile_json_body(v, &format!("{pointer}/{i}"), compile)?);
            }
            JsonBody::Array(out)
        }
        Value::Object(map) => {
            let mut out = Vec::with_capacity(map.len());
            for (k, v) in map {
                out.push((
                    k.clone(),
                    compile_json_body(v, &format!("{pointer}/{k}"), compile)?,
                ));
            }
            JsonBody::Object(out)
        }
        other => JsonBody::Literal(other.clone()),
    })
}
