//! Validating the HTTP tools of `tools.d` files: env needs, schemas,
//! templates and the variables they read, and the shape of the request.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use reqwest::header::HeaderName;
use serde_json::Value;

use crate::template::{self, TemplateSet};
use crate::tool::http::{Body, JsonBody, json_leaf_name};
use toolgate_config::Diagnostic;
use toolgate_config::format::{BodyDecl, EnvNeed, Method, ToolDecl};
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
    pub(super) redirects: Option<crate::tool::http::Redirects>,
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
    let path = |p: &str| format!("tools[{i}]{p}");
    let err = |diags: &mut Vec<Diagnostic>, p: &str, msg: String, hint: &str| {
        diags.push(Diagnostic::error(&file.file, file.pos(&path(p)), msg, hint));
    };

    if decl.description.trim().is_empty() {
        err(
            diags,
            ".description",
            "the description is empty".into(),
            "say what the tool does: the model reads it to decide when to call it",
        );
    }

    // Parameters: a JSON Schema of type object whose `required` names
    // declared properties.
    let params = check_parameters(&decl.parameters, &mut |p, msg, hint| {
        err(diags, &format!(".parameters{p}"), msg, hint)
    });

    let http = &decl.http;
    let name = &decl.name;
    let mut env_used = BTreeSet::new();
    let mut secret_templates = BTreeSet::new();
    let mut args_templates = BTreeSet::new();
    let plain = Scope {
        args: &params,
        env: &file.value.env,
        response: false,
    };
    let mut add = |diags: &mut Vec<Diagnostic>,
                   key: String,
                   source: &str,
                   at: &str,
                   scope: &Scope<'_>|
     -> Option<String> {
        match templates.add(key.clone(), source.to_owned()) {
            Ok(vars) => {
                for var in vars {
                    if let Err((msg, hint)) = check_variable(&var, scope) {
                        err(diags, at, msg, &hint);
                    } else if let Some(v) = var.strip_prefix("env.") {
                        env_used.insert(v.split('.').next().unwrap_or(v).to_owned());
                        secret_templates.insert(key.clone());
                    } else if var == "args" || var.starts_with("args.") {
                        args_templates.insert(key.clone());
                    }
                }
                Some(key)
            }
            Err(e) => {
                err(
                    diags,
                    at,
                    format!("the template does not compile: {e}"),
                    "fix the minijinja syntax",
                );
                None
            }
        }
    };

    let url = add(
        diags,
        format!("{name}/http.url"),
        &http.url,
        ".http.url",
        &plain,
    );
    let starts_ok = ["http://", "https://", "{{ env.", "{{env."]
        .iter()
        .any(|p| http.url.trim_start().starts_with(p));
    if !starts_ok {
        err(
            diags,
            ".http.url",
            format!(
                "the URL {:?} does not start with http:// or https://",
                http.url
            ),
            "write an absolute http(s) URL; arguments may only fill in its path and query",
        );
    } else if !template::is_template(&http.url)
        && let Err(e) = url::Url::parse(&http.url)
    {
        err(
            diags,
            ".http.url",
            format!("the URL is invalid: {e}"),
            "write an absolute http(s) URL",
        );
    }

    let mut query = Vec::new();
    for (k, v) in &http.query {
        if let Some(t) = add(
            diags,
            format!("{name}/http.query.{k}"),
            v,
            &format!(".http.query.{k}"),
            &plain,
        ) {
            query.push((k.clone(), t));
        }
    }
    let mut headers = Vec::new();
    for (k, v) in &http.headers {
        let at = format!(".http.headers.{k}");
        let Ok(header) = HeaderName::from_bytes(k.as_bytes()) else {
            err(
                diags,
                &at,
                format!("{k:?} is not a valid header name"),
                "use letters, digits and `-`",
            );
            continue;
        };
        if let Some(t) = add(diags, format!("{name}/http.headers.{k}"), v, &at, &plain) {
            headers.push((header, t));
        }
    }
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
            err(
                diags,
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
            err(
                diags,
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
        }) => add(
            diags,
            format!("{name}/http.body"),
            template,
            ".http.body.text",
            &plain,
        )
        .map(|t| Body::Text {
            template: t,
            content_type: content_type
                .clone()
                .unwrap_or_else(|| "text/plain; charset=utf-8".to_owned()),
        }),
        Some(BodyDecl {
            json: Some(value), ..
        }) => {
            let mut compile = |diags: &mut Vec<Diagnostic>, pointer: &str, source: &str| {
                let single = template::is_single_expression(source);
                let key = json_leaf_name(name, pointer, single);
                let at = format!(".http.body.json{}", pointer.replace('/', "."));
                add(diags, key, source, &at, &plain).map(|k| {
                    if single {
                        JsonBody::Value(k)
                    } else {
                        JsonBody::Text(k)
                    }
                })
            };
            compile_json_body(value, "", diags, &mut compile).map(Body::Json)
        }
    };
    if matches!(http.method, Method::Get) && body.is_some() {
        err(
            diags,
            ".http.body",
            "a GET request cannot have a body".into(),
            "use POST, PUT or PATCH, or move the values to `query`",
        );
    }

    if let Some(select) = &decl.response.select
        && !select.is_empty()
        && !select.starts_with('/')
    {
        err(
            diags,
            ".response.select",
            format!("{select:?} is not a JSON pointer"),
            "write it as `/field/0/name`, starting with `/`",
        );
    }
    let output = decl.response.template.as_ref().and_then(|t| {
        let scope = Scope {
            response: true,
            ..plain
        };
        add(
            diags,
            format!("{name}/response.template"),
            t,
            ".response.template",
            &scope,
        )
    });
    if let Some(cache) = &decl.cache
        && cache.ttl.is_zero()
    {
        err(
            diags,
            ".cache.ttl",
            "the cache TTL is zero".into(),
            "give a duration such as `5m`, or remove `cache`",
        );
    }
    if let Some(t) = http.timeout
        && t.is_zero()
    {
        err(
            diags,
            ".http.timeout",
            "the timeout is zero".into(),
            "give a duration such as `10s`, or remove it to use the default",
        );
    }

    if let Some(Body::Text {
        template,
        content_type,
    }) = &body
        && args_templates.contains(template)
        && !crate::tool::http::is_form(content_type)
    {
        diags.push(Diagnostic::warning(
            &file.file,
            file.pos(&path(".http.body.text")),
            format!(
                "the text body inserts arguments as they are (content type {content_type}), so a value can change the body's structure"
            ),
            "use a `json` body (values stay JSON values) or content_type application/x-www-form-urlencoded (values are form-encoded)",
        ));
    }
    let redirects = http.redirects.as_ref().and_then(|r| {
        let mut ok = true;
        if !(1..=10).contains(&r.max) {
            err(
                diags,
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
                    err(
                        diags,
                        &format!(".http.redirects.origins[{j}]"),
                        format!("{o:?} is not an origin"),
                        "write scheme and host (and port), e.g. https://cdn.example.com",
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(crate::tool::http::Redirects {
            max: usize::from(r.max),
            origins,
        })
    });

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
        env_used,
        env: BTreeMap::new(),
        secret_templates,
        redirects,
    })
}

/// Checks a parameters schema; returns the declared property names.
pub(super) fn check_parameters(
    schema: &Value,
    err: &mut dyn FnMut(&str, String, &str),
) -> BTreeSet<String> {
    let Some(obj) = schema.as_object() else {
        err(
            "",
            "parameters must be a JSON Schema object".into(),
            "write `type: object` with `properties`",
        );
        return BTreeSet::new();
    };
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        err(
            ".type",
            "the parameters schema must have `type: object`".into(),
            "tool arguments are always an object: add `type: object`",
        );
    }
    if let Err(e) = jsonschema::meta::validate(schema) {
        err(
            "",
            format!("parameters is not a valid JSON Schema: {e}"),
            "fix the schema (see json-schema.org)",
        );
    } else if let Err(e) = jsonschema::validator_for(schema) {
        err(
            "",
            format!("parameters cannot be compiled: {e}"),
            "fix the schema (see json-schema.org)",
        );
    }
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
    props
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
        (f, _) if TEMPLATE_FUNCTIONS.contains(&f) => Ok(()),
        (other, _) => Err((
            format!("the template reads `{other}`, which does not exist"),
            if scope.response {
                "use `response`, `args.<parameter>` or `env.<variable>`".to_owned()
            } else {
                "use `args.<parameter>` or `env.<variable>`".to_owned()
            },
        )),
    }
}

/// Compiles one templated leaf of a JSON body: (diagnostics, JSON pointer,
/// template source).
type LeafCompiler<'a> = dyn FnMut(&mut Vec<Diagnostic>, &str, &str) -> Option<JsonBody> + 'a;

/// Compiles a JSON body: string leaves holding template syntax become
/// templates, everything else stays literal.
fn compile_json_body(
    value: &Value,
    pointer: &str,
    diags: &mut Vec<Diagnostic>,
    compile: &mut LeafCompiler<'_>,
) -> Option<JsonBody> {
    Some(match value {
        Value::String(s) if template::is_template(s) => compile(diags, pointer, s)?,
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, v) in items.iter().enumerate() {
                out.push(compile_json_body(
                    v,
                    &format!("{pointer}/{i}"),
                    diags,
                    compile,
                )?);
            }
            JsonBody::Array(out)
        }
        Value::Object(map) => {
            let mut out = Vec::with_capacity(map.len());
            for (k, v) in map {
                out.push((
                    k.clone(),
                    compile_json_body(v, &format!("{pointer}/{k}"), diags, compile)?,
                ));
            }
            JsonBody::Object(out)
        }
        other => JsonBody::Literal(other.clone()),
    })
}
