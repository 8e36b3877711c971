//! One operation to one HTTP tool: its parameters (path, query, header,
//! cookie and the request body) as one `parameters` object without name
//! clashes, and the templated request that sends them where the spec says.

use indexmap::IndexMap;
use serde_json::{Map, Value, json};
use serde_yaml::Mapping;

use crate::names::{ident, is_cookie_name};
use crate::schema::Converter;
use crate::security::Auth;
use crate::spec::{Dialect, DocId};

/// Where a parameter goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum In {
    Path,
    Query,
    Header,
    Cookie,
}

impl In {
    fn parse(s: &str) -> Option<In> {
        Some(match s {
            "path" => In::Path,
            "query" => In::Query,
            "header" => In::Header,
            "cookie" => In::Cookie,
            _ => return None,
        })
    }
    fn word(self) -> &'static str {
        match self {
            In::Path => "path",
            In::Query => "query",
            In::Header => "header",
            In::Cookie => "cookie",
        }
    }
}

/// One operation of the spec.
pub struct Operation<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub doc: DocId,
    pub item: &'a Value,
    pub op: &'a Value,
    pub server: String,
    pub dialect: Dialect,
    /// Swagger 2.0's `consumes` (the operation's, else the spec's).
    pub consumes: Vec<String>,
}

/// The request body's encoding.
enum BodyKind {
    Json,
    Form,
    Text(String),
}

/// A request body: its document, schema, encoding and whether required.
type Body = (DocId, Value, BodyKind, bool);

/// The tool of `operation`, or why it cannot be one: its parameters (path,
/// query, header and cookie ones, then the body's), then the request that
/// sends them where the spec says, with the API's credentials.
pub fn build(
    conv: &mut Converter<'_>,
    operation: &Operation<'_>,
    name: &str,
    description: String,
    auth: &Auth,
) -> Result<Mapping, String> {
    let mut tool = Tool::default();
    let (form_params, mut body) = tool.parameters(conv, operation)?;
    let path = tool.path(operation.path);
    if let Some(b) = request_body(conv, operation)? {
        body = Some(b);
    }
    if !form_params.is_empty() {
        body = Some(form_body(conv, operation, &form_params)?);
    }
    let body_decl = match body {
        Some(body) => Some(tool.body(conv, body)?),
        None => None,
    };
    tool.credentials(auth);
    Ok(tool.into_mapping(operation, &path, body_decl, name, description))
}

/// A tool being built: its arguments and where each goes.
#[derive(Default)]
struct Tool {
    props: Map<String, Value>,
    required: Vec<String>,
    /// Path template name → argument.
    path_args: IndexMap<String, String>,
    query: IndexMap<String, String>,
    headers: IndexMap<String, String>,
    /// Cookie name → argument.
    cookies: Vec<(String, String)>,
}

/// The operation's parameters as the spec lists them: the path item's,
/// then the operation's (which win), keyed by name and location.
type Params = IndexMap<(String, String), (DocId, Value)>;

/// Swagger 2.0's `formData` parameters.
type FormParams = Vec<(DocId, Value)>;

impl Tool {
    /// The path, query, header and cookie parameters as arguments; returns
    /// Swagger's form parameters and its `body` parameter.
    fn parameters(
        &mut self,
        conv: &mut Converter<'_>,
        operation: &Operation<'_>,
    ) -> Result<(FormParams, Option<Body>), String> {
        let placeholders = placeholders(operation.path);
        let mut params: Params = IndexMap::new();
        let mut form_params: FormParams = Vec::new();
        let mut body = None;
        for list in [
            operation.item.get("parameters"),
            operation.op.get("parameters"),
        ] {
            for p in list.and_then(Value::as_array).into_iter().flatten() {
                let (doc, p) = conv.deref(operation.doc, p);
                let (Some(n), Some(i)) = (
                    p.get("name").and_then(Value::as_str),
                    p.get("in").and_then(Value::as_str),
                ) else {
                    continue;
                };
                params.insert((n.to_string(), i.to_string()), (doc, p.clone()));
            }
        }
        for ((pname, location), (doc, p)) in &params {
            let schema = match operation.dialect {
                Dialect::OpenApi3 => p
                    .get("schema")
                    .or_else(|| {
                        p.get("content")
                            .and_then(Value::as_object)
                            .and_then(|c| c.values().next())
                            .and_then(|m| m.get("schema"))
                    })
                    .cloned()
                    .unwrap_or_else(|| json!({})),
                Dialect::Swagger2 => swagger_param_schema(p),
            };
            match location.as_str() {
                "body" => {
                    let schema = p.get("schema").cloned().unwrap_or_else(|| json!({}));
                    let required = p.get("required") == Some(&Value::Bool(true));
                    body = Some((*doc, schema, BodyKind::Json, required));
                    continue;
                }
                "formData" => {
                    if p.get("type").and_then(Value::as_str) == Some("file") {
                        return Err(format!(
                            "its form parameter `{pname}` is a file upload, which an HTTP tool cannot send"
                        ));
                    }
                    form_params.push((*doc, p.clone()));
                    continue;
                }
                _ => {}
            }
            let Some(at) = In::parse(location) else {
                continue;
            };
            // OpenAPI: these header parameters are ignored.
            if at == In::Header
                && ["accept", "content-type", "authorization"]
                    .contains(&pname.to_ascii_lowercase().as_str())
            {
                continue;
            }
            let mut schema = conv.convert(*doc, &schema);
            annotate(&mut schema, p);
            let arg = unique(&self.props, &ident(pname), at.word());
            let is_required = at == In::Path || p.get("required") == Some(&Value::Bool(true));
            let value = value_template(&arg, &schema);
            match at {
                In::Path => {
                    if !placeholders.contains(pname) {
                        continue;
                    }
                    self.path_args.insert(pname.clone(), arg.clone());
                }
                In::Query => {
                    self.query.insert(pname.clone(), value);
                }
                In::Header => {
                    self.headers.insert(pname.clone(), value);
                }
                In::Cookie if !is_cookie_name(pname) => {
                    return Err(format!(
                        "its cookie parameter {pname:?} is not a valid cookie name"
                    ));
                }
                In::Cookie => self.cookies.push((pname.clone(), arg.clone())),
            }
            if is_required {
                self.required.push(arg.clone());
            }
            self.props.insert(arg, schema);
        }
        Ok((form_params, body))
    }

    /// The URL path as a template, with a required string for a template
    /// the parameters do not declare.
    fn path(&mut self, template: &str) -> String {
        let mut path = String::new();
        let mut rest = template;
        while let Some(start) = rest.find('{') {
            let Some(len) = rest[start..].find('}') else {
                break;
            };
            let pname = &rest[start + 1..start + len];
            let arg = match self.path_args.get(pname) {
                Some(arg) => arg.clone(),
                None => {
                    let arg = unique(&self.props, &ident(pname), "path");
                    self.props.insert(arg.clone(), json!({"type": "string"}));
                    self.required.push(arg.clone());
                    self.path_args.insert(pname.to_string(), arg.clone());
                    arg
                }
            };
            path.push_str(&rest[..start]);
            path.push_str(&format!("{{{{ args.{arg} }}}}"));
            rest = &rest[start + len + 1..];
        }
        path.push_str(rest);
        path
    }

    /// The body's arguments (its properties, when it is an object whose
    /// names are free; else one argument), and how the request sends them.
    fn body(&mut self, conv: &mut Converter<'_>, body: Body) -> Result<Value, String> {
        let (doc, schema, kind, is_required) = body;
        let mut schema = conv.convert(doc, &schema);
        if let BodyKind::Text(content_type) = &kind {
            let arg = unique(&self.props, "body", "body");
            schema = json!({"type": "string", "description": format!("The request body ({content_type}).")});
            if is_required {
                self.required.push(arg.clone());
            }
            self.props.insert(arg.clone(), schema);
            return Ok(
                json!({"text": format!("{{{{ args.{arg} }}}}"), "content_type": content_type}),
            );
        }
        if let Some(fields) = mergeable(&schema, &self.props) {
            // The body's properties become arguments of their own.
            let body_required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut json_body = Map::new();
            let mut form = String::new();
            for (field, s) in fields {
                if is_required && body_required.contains(&field.as_str()) {
                    self.required.push(field.clone());
                }
                json_body.insert(field.clone(), json!(format!("{{{{ args.{field} }}}}")));
                form.push_str(&format!(
                    "{{% if args.{field} is defined %}}{field}={{{{ args.{field} }}}}&{{% endif %}}"
                ));
                self.props.insert(field, s);
            }
            return Ok(match kind {
                BodyKind::Form => {
                    json!({"text": form, "content_type": "application/x-www-form-urlencoded"})
                }
                _ => json!({"json": Value::Object(json_body)}),
            });
        }
        if matches!(kind, BodyKind::Form) {
            return Err("its form body is not a flat object, which a form cannot send".into());
        }
        let arg = unique(&self.props, "body", "request");
        if let Value::Object(m) = &mut schema
            && !m.contains_key("description")
        {
            m.insert("description".into(), json!("The request body."));
        }
        if is_required {
            self.required.push(arg.clone());
        }
        self.props.insert(arg.clone(), schema);
        Ok(json!({"json": format!("{{{{ args.{arg} }}}}")}))
    }

    /// The API's credentials, and the cookie parameters, in the request.
    fn credentials(&mut self, auth: &Auth) {
        for (header, template) in &auth.headers {
            self.headers.insert(header.clone(), template.clone());
        }
        for (key, template) in &auth.query {
            self.query.insert(key.clone(), template.clone());
        }
        let mut cookie = String::new();
        for (cname, template) in &auth.cookies {
            cookie.push_str(&format!("{cname}={template}; "));
        }
        for (cname, arg) in &self.cookies {
            cookie.push_str(&format!(
                "{{% if args.{arg} is defined %}}{cname}={{{{ args.{arg} }}}}; {{% endif %}}"
            ));
        }
        if !cookie.is_empty() {
            self.headers.insert("Cookie".into(), cookie);
        }
    }

    /// The tool's declaration, as `tools.d` holds one.
    fn into_mapping(
        self,
        operation: &Operation<'_>,
        path: &str,
        body: Option<Value>,
        name: &str,
        description: String,
    ) -> Mapping {
        let mut parameters = json!({"type": "object", "properties": Value::Object(self.props)});
        if !self.required.is_empty() {
            parameters["required"] = json!(self.required);
        }
        let mut http = Mapping::new();
        http.insert(
            "method".into(),
            operation.method.to_ascii_uppercase().into(),
        );
        http.insert("url".into(), format!("{}{}", operation.server, path).into());
        if !self.query.is_empty() {
            http.insert("query".into(), to_yaml(&json!(self.query)));
        }
        if !self.headers.is_empty() {
            http.insert("headers".into(), to_yaml(&json!(self.headers)));
        }
        if let Some(b) = body {
            http.insert("body".into(), to_yaml(&b));
        }
        let mut tool = Mapping::new();
        tool.insert("name".into(), name.into());
        tool.insert("description".into(), description.into());
        tool.insert("parameters".into(), to_yaml(&parameters));
        tool.insert("http".into(), serde_yaml::Value::Mapping(http));
        tool
    }
}

/// OpenAPI 3's `requestBody`, in the first media type an HTTP tool can
/// send; an optional body it cannot send is left out (with a note).
fn request_body(
    conv: &mut Converter<'_>,
    operation: &Operation<'_>,
) -> Result<Option<Body>, String> {
    if operation.dialect != Dialect::OpenApi3 {
        return Ok(None);
    }
    let Some(request_body) = operation.op.get("requestBody") else {
        return Ok(None);
    };
    let (doc, rb) = conv.deref(operation.doc, request_body);
    let is_required = rb.get("required") == Some(&Value::Bool(true));
    let content = rb
        .get("content")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    match pick_media(&content) {
        Some((kind, media)) => {
            let schema = media.get("schema").cloned().unwrap_or_else(|| json!({}));
            Ok(Some((doc, schema, kind, is_required)))
        }
        None if content.is_empty() => Ok(None),
        None => {
            let types: Vec<&str> = content.keys().map(String::as_str).collect();
            if is_required {
                return Err(format!(
                    "its request body ({}) cannot be sent by an HTTP tool",
                    types.join(", ")
                ));
            }
            conv.notes.push(format!(
                "its optional request body ({}) is left out",
                types.join(", ")
            ));
            Ok(None)
        }
    }
}

/// Swagger 2.0's `formData` parameters as one form body.
fn form_body(
    conv: &mut Converter<'_>,
    operation: &Operation<'_>,
    form_params: &[(DocId, Value)],
) -> Result<Body, String> {
    if operation
        .consumes
        .iter()
        .any(|c| c.starts_with("multipart/"))
        && !operation
            .consumes
            .iter()
            .any(|c| c == "application/x-www-form-urlencoded")
    {
        return Err("its form body is multipart, which an HTTP tool cannot send".into());
    }
    let mut schema = json!({"type": "object", "properties": {}});
    let mut req = Vec::new();
    for (doc, p) in form_params {
        let Some(n) = p.get("name").and_then(Value::as_str) else {
            continue;
        };
        let mut s = conv.convert(*doc, &swagger_param_schema(p));
        annotate(&mut s, p);
        schema["properties"][n] = s;
        if p.get("required") == Some(&Value::Bool(true)) {
            req.push(json!(n));
        }
    }
    if !req.is_empty() {
        schema["required"] = Value::Array(req);
    }
    Ok((operation.doc, schema, BodyKind::Form, true))
}

/// `value` as YAML, each object's keys in a reading order: `type`,
/// `title`, `description` first; `properties`, `items`, `required` last;
/// the rest between, sorted.
fn to_yaml(value: &Value) -> serde_yaml::Value {
    const FIRST: &[&str] = &["type", "title", "description"];
    const LAST: &[&str] = &["properties", "items", "required"];
    match value {
        Value::Object(map) => {
            let rank = |k: &str| {
                if let Some(i) = FIRST.iter().position(|f| *f == k) {
                    (0, i)
                } else if let Some(i) = LAST.iter().position(|f| *f == k) {
                    (2, i)
                } else {
                    (1, 0)
                }
            };
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
            let mut out = Mapping::new();
            for k in keys {
                out.insert(k.as_str().into(), to_yaml(&map[k]));
            }
            serde_yaml::Value::Mapping(out)
        }
        Value::Array(items) => serde_yaml::Value::Sequence(items.iter().map(to_yaml).collect()),
        other => serde_yaml::to_value(other).unwrap_or(serde_yaml::Value::Null),
    }
}

/// The body schema's properties, when they can be arguments of their own:
/// a closed object whose property names are identifiers no parameter uses.
fn mergeable(schema: &Value, taken: &Map<String, Value>) -> Option<Vec<(String, Value)>> {
    let props = schema.get("properties")?.as_object()?;
    if props.is_empty()
        || schema.get("type").is_some_and(|t| t != "object")
        || schema
            .get("additionalProperties")
            .is_some_and(|a| a != &Value::Bool(false))
        || ["allOf", "anyOf", "oneOf", "patternProperties"]
            .iter()
            .any(|k| schema.get(k).is_some())
    {
        return None;
    }
    if props
        .keys()
        .any(|k| ident(k) != *k || taken.contains_key(k))
    {
        return None;
    }
    Some(props.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// JSON first, then a form, then text; `None` when the body is none of them.
fn pick_media(content: &Map<String, Value>) -> Option<(BodyKind, Value)> {
    let find = |f: &dyn Fn(&str) -> bool| {
        content
            .iter()
            .find(|(k, _)| f(&k.to_ascii_lowercase()))
            .map(|(k, v)| (k.clone(), v.clone()))
    };
    if let Some((_, m)) =
        find(&|k| k == "application/json" || k.ends_with("+json") || k.contains("/json"))
    {
        return Some((BodyKind::Json, m));
    }
    if let Some((_, m)) = find(&|k| k == "application/x-www-form-urlencoded") {
        return Some((BodyKind::Form, m));
    }
    if let Some((k, m)) = find(&|k| k.starts_with("text/")) {
        return Some((BodyKind::Text(k), m));
    }
    None
}

/// A name for an argument no other argument has: `name`, else
/// `name_<where>`, else with a number.
fn unique(props: &Map<String, Value>, name: &str, place: &str) -> String {
    if !props.contains_key(name) {
        return name.to_string();
    }
    let with_place = format!("{name}_{place}");
    if !props.contains_key(&with_place) {
        return with_place;
    }
    (2..)
        .map(|i| format!("{with_place}{i}"))
        .find(|n| !props.contains_key(n))
        .unwrap_or_default()
}

/// The parameter's description and deprecation on its schema.
fn annotate(schema: &mut Value, param: &Value) {
    let Value::Object(m) = schema else { return };
    if let Some(d) = param
        .get("description")
        .and_then(Value::as_str)
        .filter(|d| !d.trim().is_empty())
    {
        m.insert(
            "description".into(),
            json!(crate::names::cap(d.trim(), 500)),
        );
    }
    if param.get("deprecated") == Some(&Value::Bool(true)) {
        m.insert("deprecated".into(), json!(true));
    }
}

/// How an argument is rendered into a query value or a header: arrays as
/// comma-separated values (OpenAPI's `form` style without explode and
/// `simple`), objects as JSON, anything else as is; an absent or null
/// value renders empty, which leaves the query parameter or header out.
fn value_template(arg: &str, schema: &Value) -> String {
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let present = format!("args.{arg} is defined and args.{arg} is not none");
    if types.contains(&"array") {
        format!("{{{{ args.{arg} | join(',') if {present} }}}}")
    } else if types.contains(&"object") {
        format!("{{{{ args.{arg} | tojson if {present} }}}}")
    } else if types.contains(&"null") {
        format!("{{{{ args.{arg} if {present} }}}}")
    } else {
        format!("{{{{ args.{arg} }}}}")
    }
}

/// A Swagger 2.0 parameter's schema, from the keywords on the parameter.
fn swagger_param_schema(p: &Value) -> Value {
    const KEYS: &[&str] = &[
        "type",
        "format",
        "items",
        "enum",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "uniqueItems",
        "multipleOf",
        "x-nullable",
    ];
    let mut out = Map::new();
    if let Value::Object(m) = p {
        for k in KEYS {
            if let Some(v) = m.get(*k) {
                out.insert((*k).to_string(), v.clone());
            }
        }
    }
    Value::Object(out)
}

/// The `{name}` templates of a path.
fn placeholders(path: &str) -> Vec<String> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name.to_string()))
        .collect()
}
