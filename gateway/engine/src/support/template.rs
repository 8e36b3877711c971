//! minijinja templates: one environment per catalog holding every compiled
//! template, the variable check that keeps templates to `args.<declared>` and
//! `env.<declared>`, and the encodings that keep argument values from
//! reshaping a request.

use std::collections::BTreeSet;
use std::sync::Arc;

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// Templates whose name ends with this render every `{{ value }}` as JSON.
pub const JSON_SUFFIX: &str = "#json";

/// Collects templates while a catalog is built: each is compiled once to
/// check it (its syntax, the variables it reads) and kept as source; the
/// catalog's environment compiles it again on its first render and keeps
/// that. A template's compiled form is kilobytes (minijinja sizes its
/// instruction buffers for a page, not a URL), so a catalog of thousands of
/// tools holds only what its calls have used.
#[derive(Debug)]
pub struct TemplateSet {
    env: Environment<'static>,
    sources: std::collections::HashMap<String, String>,
}

impl Default for TemplateSet {
    fn default() -> Self {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        // A boolean prints as JSON spells it (`true`), not as Jinja does
        // (`True`): a URL, header or form value is read by an API, which
        // expects the former.
        env.set_formatter(|out, state, value| {
            if value.kind() == minijinja::value::ValueKind::Bool {
                out.write_str(if value.is_true() { "true" } else { "false" })?;
                Ok(())
            } else {
                minijinja::escape_formatter(out, state, value)
            }
        });
        env.set_auto_escape_callback(|name| {
            if name.ends_with(JSON_SUFFIX) {
                AutoEscape::Json
            } else {
                AutoEscape::None
            }
        });
        TemplateSet {
            env,
            sources: std::collections::HashMap::new(),
        }
    }
}

impl TemplateSet {
    /// Compiles `source` under `name` and returns the variables it reads,
    /// with attribute access spelled out (`args.city`).
    pub fn add(&mut self, name: String, source: String) -> Result<BTreeSet<String>, String> {
        self.env
            .add_template_owned(name.clone(), source.clone())
            .map_err(|e| describe(&e))?;
        let vars = self
            .env
            .get_template(&name)
            .map_err(|e| describe(&e))?
            .undeclared_variables(true)
            .into_iter()
            .collect();
        self.env.remove_template(&name);
        self.sources.insert(name, source);
        Ok(vars)
    }

    /// The environment that renders the templates, each compiled on its
    /// first use.
    pub fn finish(self) -> Arc<Environment<'static>> {
        let TemplateSet { mut env, sources } = self;
        env.set_loader(move |name| Ok(sources.get(name).cloned()));
        Arc::new(env)
    }
}

/// Renders the template `name` with `ctx`.
pub fn render(env: &Environment<'_>, name: &str, ctx: minijinja::Value) -> Result<String, String> {
    env.get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|e| describe(&e))
}

/// A template error as one line, without the template's file name (which is
/// an internal key).
pub fn describe(e: &minijinja::Error) -> String {
    let mut msg = e.kind().to_string();
    if let Some(detail) = e.detail() {
        msg.push_str(": ");
        msg.push_str(detail);
    }
    if let Some(line) = e.line() {
        msg.push_str(&format!(" (template line {line})"));
    }
    msg
}

/// `true` for the names a template may read of who calls:
/// `request.key` (the API key's name), `request.project`,
/// `request.subject` (a verified token's `sub`, else the key's name) and
/// `request.claims` or `request.claims.<claim>` (the token's claims).
pub fn reads_caller(var: &str) -> bool {
    matches!(
        var,
        "request.key" | "request.project" | "request.subject" | "request.claims"
    ) || var.starts_with("request.claims.")
}

/// Who calls, as templates read it (`request`): each part empty when there
/// is none.
pub fn caller(ctx: &toolgate::CallContext) -> Value {
    serde_json::json!({
        "key": ctx.key.as_deref().unwrap_or_default(),
        "project": ctx.project().unwrap_or_default(),
        "subject": ctx.subject.as_deref().unwrap_or_default(),
        "claims": ctx.claims.as_deref().cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

/// `true` when the template source uses template syntax at all.
pub fn is_template(source: &str) -> bool {
    source.contains("{{") || source.contains("{%")
}

/// `true` when the source is exactly one `{{ expression }}`, whose value then
/// keeps its JSON type in a JSON body.
pub fn is_single_expression(source: &str) -> bool {
    let s = source.trim();
    s.starts_with("{{") && s.ends_with("}}") && s.matches("{{").count() == 1 && !s.contains("{%")
}

/// A single-expression template that renders nothing when its value is
/// undefined (an argument the call left out), instead of JSON's `null`: a
/// JSON body leaves such a field out.
pub fn empty_when_undefined(source: &str) -> String {
    let s = source.trim();
    let inner = s
        .strip_prefix("{{")
        .and_then(|s| s.strip_suffix("}}"))
        .map(|s| s.trim_start_matches('-').trim_end_matches('-').trim())
        .unwrap_or(s);
    format!("{{% if ({inner}) is defined %}}{{{{ {inner} }}}}{{% endif %}}")
}

/// Everything but RFC 3986's unreserved characters is encoded, so a value
/// cannot add a path segment, a query parameter or a fragment.
const URL_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes every string inside `value`, object keys included, for
/// rendering into a URL: whatever part of an argument a template prints,
/// it cannot add a path segment, a query parameter or a fragment.
pub fn url_encode_strings(value: &Value) -> Value {
    encode_strings(value, &|s| utf8_percent_encode(s, URL_VALUE).to_string())
}

/// Form-encodes (`application/x-www-form-urlencoded`) every string inside
/// `value`, object keys included, for a form body.
pub fn form_encode_strings(value: &Value) -> Value {
    encode_strings(value, &|s| {
        url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
    })
}

/// The top-level keys are the declared parameter names (templates name
/// them), so they stay as they are; every value and nested key is encoded.
fn encode_strings(value: &Value, encode: &dyn Fn(&str) -> String) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), encode_nested(v, encode)))
                .collect(),
        ),
        other => encode_nested(other, encode),
    }
}

fn encode_nested(value: &Value, encode: &dyn Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(encode(s)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| encode_nested(v, encode)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (encode(k), encode_nested(v, encode)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `true` when a rendered URL's path holds a `.` or `..` segment (also
/// percent-encoded), which URL parsers resolve and so would move the request
/// to another path.
pub fn has_dot_segment(url: &str) -> bool {
    let after_scheme = url.find("://").map_or(url, |i| &url[i + 3..]);
    let Some(path_start) = after_scheme.find('/') else {
        return false;
    };
    let path = &after_scheme[path_start..];
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split('/').any(|seg| {
        let seg = seg.to_ascii_lowercase().replace("%2e", ".");
        seg == "." || seg == ".."
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::any_json::any_json;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_template_is_checked_when_added_and_compiled_when_first_rendered() {
        let mut set = TemplateSet::default();
        let vars = set
            .add("u".into(), "/items/{{ args.id }}?x={{ env.X }}".into())
            .unwrap();
        assert_eq!(vars, BTreeSet::from(["args.id".into(), "env.X".into()]));
        assert!(set.add("bad".into(), "{{ args.id ".into()).is_err());
        assert!(set.env.templates().next().is_none(), "kept as source only");
        let env = set.finish();
        let ctx = || minijinja::context! { args => minijinja::context! { id => 7 }, env => minijinja::context! { X => "y" } };
        assert_eq!(render(&env, "u", ctx()).unwrap(), "/items/7?x=y");
        assert_eq!(render(&env, "u", ctx()).unwrap(), "/items/7?x=y");
        assert!(
            render(&env, "bad", ctx()).is_err(),
            "a refused template is not there"
        );
        assert!(render(&env, "other", ctx()).is_err());
    }

    proptest! {
        /// An argument, whatever it holds, renders into a JSON body as one
        /// JSON value equal to itself: it cannot add fields or end the body.
        #[test]
        fn an_argument_never_reshapes_a_json_body(q in any_json()) {
            let mut set = TemplateSet::default();
            let name = format!("b{JSON_SUFFIX}");
            set.add(name.clone(), r#"{"q": {{ args.q }}, "fixed": 1}"#.into()).unwrap();
            let env = set.finish();
            let out = render(
                &env,
                &name,
                minijinja::context! { args => minijinja::Value::from_serialize(json!({"q": q.clone()})) },
            )
            .unwrap();
            let body: Value = serde_json::from_str(&out).unwrap();
            prop_assert_eq!(body.as_object().map(|o| o.len()), Some(2));
            prop_assert_eq!(&body["fixed"], &json!(1));
            // Numbers may print in another spelling; they stay numbers.
            if !q.is_number() {
                prop_assert_eq!(&body["q"], &q);
            }
        }

        /// A string argument in a URL path, encoded, adds no path, query or
        /// fragment of its own.
        #[test]
        fn an_encoded_argument_never_reshapes_a_url(q in ".*") {
            let mut set = TemplateSet::default();
            set.add("u".into(), "https://api.example/items/{{ args.q }}?fixed=1".into()).unwrap();
            let env = set.finish();
            let args = url_encode_strings(&json!({"q": q}));
            let out = render(&env, "u", minijinja::context! { args => minijinja::Value::from_serialize(&args) }).unwrap();
            let tail = out.strip_prefix("https://api.example/items/").unwrap();
            let (item, query) = tail.split_once('?').unwrap();
            prop_assert!(!item.contains(['/', '?', '#']), "{}", out);
            prop_assert_eq!(query, "fixed=1");
            prop_assert!(!has_dot_segment(&out) || q == "." || q == "..", "{}", out);
        }
    }

    #[test]
    fn an_undefined_single_expression_renders_nothing() {
        let mut set = TemplateSet::default();
        let source = empty_when_undefined("{{- args.n -}}");
        set.add(format!("t{JSON_SUFFIX}"), source).unwrap();
        let env = set.finish();
        let render = |args: Value| {
            render(
                &env,
                &format!("t{JSON_SUFFIX}"),
                minijinja::context! { args => minijinja::Value::from_serialize(&args) },
            )
            .unwrap()
        };
        assert_eq!(render(json!({})), "");
        assert_eq!(render(json!({"n": null})), "null");
        assert_eq!(render(json!({"n": [1, "a"]})), r#"[1,"a"]"#);
    }

    #[test]
    fn booleans_print_as_json_spells_them() {
        let mut set = TemplateSet::default();
        set.add(
            "q".into(),
            "{{ args.b }},{{ args.c }},{{ args.b and 1 }}".into(),
        )
        .unwrap();
        set.add(format!("j{JSON_SUFFIX}"), "{{ args.b }}".into())
            .unwrap();
        let env = set.finish();
        let args = || minijinja::context! { args => minijinja::Value::from_serialize(json!({"b": true, "c": false})) };
        assert_eq!(render(&env, "q", args()).unwrap(), "true,false,1");
        assert_eq!(
            render(&env, &format!("j{JSON_SUFFIX}"), args()).unwrap(),
            "true"
        );
    }

    #[test]
    fn reports_variables_with_attributes() {
        let mut t = TemplateSet::default();
        let vars = t
            .add(
                "x".into(),
                "{{ args.city }}/{{ env.KEY }}{% for i in args.list %}{{ i }}{% endfor %}".into(),
            )
            .unwrap();
        assert_eq!(
            vars.into_iter().collect::<Vec<_>>(),
            vec!["args.city", "args.list", "env.KEY"]
        );
    }

    #[test]
    fn syntax_errors_are_reported() {
        let mut t = TemplateSet::default();
        let err = t.add("x".into(), "{{ args.city ".into()).unwrap_err();
        assert!(err.contains("syntax error"), "{err}");
    }

    #[test]
    fn json_suffix_renders_values_as_json() {
        let mut t = TemplateSet::default();
        t.add(format!("a{JSON_SUFFIX}"), "{{ args.v }}".into())
            .unwrap();
        let env = t.finish();
        let out = render(
            &env,
            &format!("a{JSON_SUFFIX}"),
            minijinja::context! { args => minijinja::Value::from_serialize(json!({"v": "a\"b"})) },
        )
        .unwrap();
        assert_eq!(out, r#""a\"b""#);
    }

    #[test]
    fn url_encoding_keeps_values_in_their_segment() {
        let v = url_encode_strings(
            &json!({"a": "../admin", "b": "a?b=c", "c": "x#y", "d": "%2F", "n": 5}),
        );
        assert_eq!(
            v,
            json!({"a": "..%2Fadmin", "b": "a%3Fb%3Dc", "c": "x%23y", "d": "%252F", "n": 5})
        );
        // Keys of object-typed arguments are encoded too.
        assert_eq!(
            url_encode_strings(&json!({"o": {"?injected=1&x": [1, "a/b"]}})),
            json!({"o": {"%3Finjected%3D1%26x": [1, "a%2Fb"]}})
        );
        assert_eq!(
            form_encode_strings(&json!({"t": "x&role=admin"})),
            json!({"t": "x%26role%3Dadmin"})
        );
    }

    #[test]
    fn dot_segments_are_detected() {
        assert!(has_dot_segment("http://h/a/../b"));
        assert!(has_dot_segment("http://h/a/%2E%2e/b"));
        assert!(has_dot_segment("http://h/a/."));
        assert!(!has_dot_segment("http://h/a/..%2Fb?x=..#.."));
        assert!(!has_dot_segment("http://h"));
        assert!(!has_dot_segment("http://h/a.json/...b"));
    }

    #[test]
    fn single_expression() {
        assert!(is_single_expression(" {{ args.x }} "));
        assert!(!is_single_expression("a {{ args.x }}"));
        assert!(!is_single_expression("{{ a }}{{ b }}"));
    }
}
