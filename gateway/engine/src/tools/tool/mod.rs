//! A tool, whatever its kind: its public face (name, description, schema)
//! and how one call of it runs. The kinds live in submodules.

pub mod http;
pub mod mcp;

pub use toolgate::{
    ArgError, Progress, ProgressSink, ToolError, context, is_valid_name, native, strict,
};

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::conversation::Schema;

/// A tool in the catalog.
#[derive(Debug)]
pub struct Tool {
    pub name: String,
    /// Shared with the spec each loop that offers the tool copies.
    pub description: Arc<str>,
    pub category: Option<String>,
    /// The canonical JSON Schema of the arguments (`type: object`).
    pub parameters: Schema,
    /// OpenAI's strict rendering of `parameters`, or why there is none.
    pub strict: Result<Schema, strict::NotStrict>,
    /// The arguments' validator, compiled on the tool's first call (the
    /// schema was compiled once as the tool was loaded, to refuse an
    /// unusable one; most tools of a large catalog are never called).
    validator: std::sync::OnceLock<Result<jsonschema::Validator, String>>,
    /// Per-tool timeout; `None` uses the configured default.
    pub timeout: Option<Duration>,
    /// Results cache, for tools that declare one.
    pub cache: Option<ResultCache>,
    pub kind: ToolKind,
    /// Hints about the tool's behaviour, for clients that show or gate tools
    /// by them (MCP clients).
    pub annotations: Annotations,
    /// JSON Schema of the tool's structured result, where it is known (MCP
    /// tools that declare one).
    pub output_schema: Option<Value>,
    /// Where it was declared, e.g. `tools.d/weather.yaml:3`.
    pub origin: String,
    /// The tool as a model is offered it, built once: every loop that
    /// offers the tool holds it by a count (its JSON in each model
    /// protocol, once written, kept with it).
    offered: Arc<crate::conversation::ToolDef>,
}

/// Hints about what a tool does, in MCP's terms (`readOnlyHint`...). Hints,
/// not guarantees: the gateway enforces none of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// A human-readable name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// It changes nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// It may destroy or overwrite something (meaningful when not read-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// It reaches the world outside the gateway (an API, the web).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// What a successful call produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The result as a model reads it: structured data or text.
    pub data: Value,
    /// An MCP server's result as it sent it (`content` blocks with images,
    /// audio and resources, `structuredContent` with its binary data), for
    /// clients that read them (the MCP face). Models read `data`.
    pub mcp_result: Option<Arc<Value>>,
}

impl From<Value> for Output {
    fn from(data: Value) -> Self {
        Output {
            data,
            mcp_result: None,
        }
    }
}

/// Cached successful results of one tool, keyed by canonical arguments.
/// The underlying cache is created on the first insert: a moka cache costs
/// tens of KiB even empty, and most declared tools are never called.
#[derive(Debug)]
pub struct ResultCache {
    ttl: Duration,
    cache: std::sync::OnceLock<moka::sync::Cache<String, Output>>,
    /// The tool's definition hashed, computed once (see [`ResultCache::shared_key`]).
    fingerprint: std::sync::OnceLock<String>,
}

impl ResultCache {
    pub fn new(ttl: Duration) -> Self {
        ResultCache {
            ttl,
            cache: std::sync::OnceLock::new(),
            fingerprint: std::sync::OnceLock::new(),
        }
    }

    /// How long an entry lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The key of `key`'s entry in the shared state: the tool's name, a
    /// hash of its definition (what it calls and how, never its secrets:
    /// replicas with the same configuration agree, and an edited tool does
    /// not read its old entries) and a hash of the call's key.
    pub fn shared_key(&self, tool: &Tool, key: &str) -> String {
        use sha2::{Digest, Sha256};
        let fingerprint = self.fingerprint.get_or_init(|| {
            let mut h = Sha256::new();
            for part in [
                tool.name.as_str(),
                &tool.description,
                &toolgate::canonical_json(&tool.parameters),
                tool.kind.label(),
            ] {
                h.update(part.as_bytes());
                h.update([0]);
            }
            match &tool.kind {
                ToolKind::Http(http) => h.update(http.definition().as_bytes()),
                ToolKind::Mcp(mcp) => h.update(format!("{mcp:?}").as_bytes()),
                ToolKind::Native(_) | ToolKind::Search | ToolKind::Code => {}
            }
            hex(&h.finalize()[..8])
        });
        let call = hex(&Sha256::digest(key.as_bytes())[..16]);
        format!("{}:{fingerprint}:{call}", tool.name)
    }

    pub fn get(&self, key: &str) -> Option<Output> {
        self.cache.get().and_then(|c| c.get(key))
    }

    pub fn insert(&self, key: String, value: Output) {
        self.cache
            .get_or_init(|| {
                moka::sync::Cache::builder()
                    .max_capacity(10_000)
                    .time_to_live(self.ttl)
                    .build()
            })
            .insert(key, value);
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// What runs when the tool is called.
#[derive(Debug)]
pub enum ToolKind {
    /// A templated request to an HTTP API.
    Http(Box<http::HttpTool>),
    /// A Rust function annotated with `#[tool]` (a builtin or the user's).
    Native(std::sync::Arc<native::NativeTool>),
    /// A tool of an MCP server, called over the server's session.
    Mcp(mcp::McpTool),
    /// `find_tools`: a search of the calling request's tool set.
    Search,
    /// `run_code`: a program over the calling request's tool set (code
    /// mode).
    Code,
}

impl ToolKind {
    pub fn label(&self) -> &'static str {
        match self {
            ToolKind::Http(_) => "http",
            ToolKind::Native(n) if n.builtin => "builtin",
            ToolKind::Native(_) => "native",
            ToolKind::Mcp(_) => "mcp",
            ToolKind::Search => "search",
            ToolKind::Code => "code",
        }
    }
}

/// The common parts of a tool, used to build one.
#[derive(Debug)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub category: Option<String>,
    pub parameters: Value,
    pub timeout: Option<Duration>,
    pub cache_ttl: Option<Duration>,
    pub annotations: Annotations,
    pub output_schema: Option<Value>,
    pub origin: String,
}

impl Tool {
    /// Builds a tool; fails when `parameters` is not a usable JSON Schema.
    pub fn new(spec: ToolSpec, kind: ToolKind) -> Result<Tool, String> {
        compile_schema(&spec.parameters)?;
        Ok(Tool::checked(spec, kind))
    }

    /// Builds a tool whose `parameters` the caller has compiled (and
    /// checked to be of `type: object`).
    pub fn checked(spec: ToolSpec, kind: ToolKind) -> Tool {
        let cache = spec.cache_ttl.map(ResultCache::new);
        let description: Arc<str> = spec.description.into();
        let parameters: Schema = spec.parameters.into();
        let strict = strict::to_strict(&parameters).map(Schema::from);
        let offered = Arc::new(crate::conversation::ToolDef {
            name: spec.name.clone(),
            description: Some(Arc::clone(&description)),
            parameters: match &strict {
                Ok(strict) => strict.clone(),
                Err(_) => parameters.clone(),
            },
            strict: strict.is_ok().then_some(true),
            native: None,
            json: crate::conversation::ToolJson::shared(),
        });
        Tool {
            name: spec.name,
            description,
            category: spec.category,
            strict,
            parameters,
            validator: std::sync::OnceLock::new(),
            timeout: spec.timeout,
            cache,
            kind,
            annotations: spec.annotations,
            output_schema: spec.output_schema,
            origin: spec.origin,
            offered,
        }
    }

    /// Checks `args` against the schema; every violation is reported.
    pub fn validate(&self, args: &Value) -> Result<(), Vec<ArgError>> {
        let validator = match self
            .validator
            .get_or_init(|| compile_schema(&self.parameters))
        {
            Ok(validator) => validator,
            // It compiled as the tool was loaded; were it ever not to,
            // the call is refused, not run unchecked.
            Err(e) => {
                return Err(vec![ArgError {
                    path: "/".to_owned(),
                    rule: "schema".to_owned(),
                    message: format!("the tool's schema cannot be compiled: {e}"),
                }]);
            }
        };
        let errors: Vec<ArgError> = validator
            .iter_errors(args)
            .map(|e| {
                let rule = e
                    .schema_path()
                    .as_str()
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let path = e.instance_path().as_str();
                ArgError {
                    path: if path.is_empty() {
                        "/".to_owned()
                    } else {
                        path.to_owned()
                    },
                    rule,
                    message: e.to_string(),
                }
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The tool as a model is offered it: its strict schema when it has
    /// one (then marked `strict`), else its own. Shared by every loop that
    /// offers the tool.
    pub fn spec(&self) -> Arc<crate::conversation::ToolDef> {
        Arc::clone(&self.offered)
    }

    pub fn to_openai(&self) -> Value {
        // Built by hand: `json!` would copy the schema by serializing it.
        let mut function = serde_json::Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        function.insert(
            "description".into(),
            Value::String(self.description.to_string()),
        );
        match &self.strict {
            Ok(strict) => {
                function.insert("parameters".into(), Value::clone(strict));
                function.insert("strict".into(), Value::Bool(true));
            }
            Err(_) => {
                function.insert("parameters".into(), Value::clone(&self.parameters));
            }
        }
        let mut tool = serde_json::Map::new();
        tool.insert("type".into(), Value::String("function".into()));
        tool.insert("function".into(), Value::Object(function));
        Value::Object(tool)
    }

    /// The arguments as the canonical schema expects them: a model that
    /// answered the strict schema sends `null` for the optional properties
    /// it leaves out, which are removed here.
    pub fn normalize_arguments(&self, args: &Value) -> Value {
        let mut args = args.clone();
        if self.strict.is_ok() {
            strict::drop_optional_nulls(&self.parameters, &mut args);
        }
        args
    }
}

/// Compiles a tool's argument schema, which must be a valid JSON Schema of
/// `type: object`.
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("the schema's `type` must be `object`".to_owned());
    }
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

/// A tool of the tests (of kind `Search`: it runs nothing).
#[cfg(test)]
pub(crate) fn test_tool(name: &str, description: &str, parameters: Value) -> Tool {
    Tool::new(
        ToolSpec {
            name: name.into(),
            description: description.into(),
            category: None,
            parameters,
            timeout: None,
            cache_ttl: None,
            annotations: Annotations::default(),
            output_schema: None,
            origin: "test".into(),
        },
        ToolKind::Search,
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::any_json::any_json;
    use proptest::prelude::*;

    fn tool(parameters: Value) -> Tool {
        test_tool("lookup", "Looks \"it\" up.", parameters)
    }

    /// Every loop that offers a tool holds its spec by a count, not a copy
    /// (a tool set of 50 tools cost each stream 23 KB when each loop copied
    /// its specs), and the spec shares the tool's description and schema.
    #[test]
    fn a_tool_s_spec_is_shared_not_copied() {
        let t = tool(serde_json::json!({
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"],
            "additionalProperties": false
        }));
        let (a, b) = (t.spec(), t.spec());
        assert!(Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(a.description.as_ref().unwrap(), &t.description));
        let strict = t.strict.as_ref().unwrap_or_else(|e| panic!("{e:?}"));
        assert!(std::ptr::eq::<Value>(&*a.parameters, &**strict));
        assert_eq!(a.strict, Some(true));
    }

    proptest! {
        /// Any arguments a model sends are judged without a panic: valid
        /// ones hold what the schema asks, and each error names its place.
        #[test]
        fn any_arguments_are_judged_and_each_error_names_its_place(args in any_json()) {
            let t = tool(serde_json::json!({"type": "object",
                "properties": {"q": {"type": "string", "maxLength": 5},
                    "n": {"type": "integer", "minimum": 0},
                    "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["q"], "additionalProperties": false}));
            match t.validate(&args) {
                Ok(()) => {
                    let q = args.get("q").and_then(Value::as_str);
                    prop_assert!(q.is_some_and(|q| q.chars().count() <= 5), "{}", args);
                    prop_assert!(args.as_object().is_some_and(|o| o.keys().all(|k| ["q", "n", "tags"].contains(&k.as_str()))));
                }
                Err(errors) => {
                    prop_assert!(!errors.is_empty());
                    for e in &errors {
                        prop_assert!(e.path.starts_with('/') && !e.message.is_empty(), "{:?}", e);
                    }
                }
            }
            let normalized = t.normalize_arguments(&args);
            prop_assert_eq!(normalized.is_object(), args.is_object());
        }
    }

    #[test]
    fn a_tool_in_openai_s_format_has_its_strict_schema_when_it_has_one() {
        let strict = tool(serde_json::json!({"type": "object",
            "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}));
        let rendered = strict.strict.clone().unwrap();
        assert_eq!(
            strict.to_openai(),
            serde_json::json!({"type": "function", "function": {"name": "lookup",
                "description": "Looks \"it\" up.", "parameters": rendered, "strict": true}})
        );
        // `not` has no strict rendering: the canonical schema, no `strict`.
        let loose = tool(serde_json::json!({"type": "object",
            "properties": {"q": {"not": {"type": "null"}}}}));
        assert!(loose.strict.is_err());
        assert_eq!(
            loose.to_openai(),
            serde_json::json!({"type": "function", "function": {"name": "lookup",
                "description": "Looks \"it\" up.", "parameters": loose.parameters}})
        );
    }
}
