//! Context injection: facts about the request a tool call belongs to, filled
//! in by the gateway and never seen by the model.
//!
//! A caller (the chat loop, the invoke API, the CLI) describes its request
//! with a [`CallContext`]; the executor turns it into the [`ToolContext`] a
//! native tool receives, adding the call's id and the typed [`Extensions`]
//! the gateway attaches (the builtins find their settings there). A value
//! such as a project id is injected by the gateway and invisible to the
//! model: a `&ToolContext` parameter of a `#[tool]` function is filled by
//! the gateway and kept out of the schema.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// What the caller knows about the request a call belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallContext {
    /// Identifies the request in logs and in tools (a UUID unless the
    /// caller has its own).
    pub request_id: String,
    /// The tool set in force, if any.
    pub tool_set: Option<String>,
    /// The name of the API key the request came with, if keys are
    /// configured (audit log, tool-call rate limits).
    pub key: Option<String>,
    /// The project (or workspace) the request works for; file tools work
    /// under `<workspace>/<project>/` when it is set. Always a valid
    /// [project name](is_valid_project).
    project: Option<String>,
    /// Who calls: the `sub` of a bearer token (JWT), else the API key's
    /// name; `None` on an open gateway.
    pub subject: Option<String>,
    /// The claims of the caller's bearer token (JWT), if it came with one.
    pub claims: Option<Arc<serde_json::Value>>,
    /// The caller's bearer token itself (a verified JWT), for upstreams
    /// that get it forwarded or exchanged; never handed to native tools.
    pub token: Option<BearerToken>,
    /// A way back to the caller's client while the call runs, when it has
    /// one (an MCP client of the gateway, which can answer an upstream
    /// server's questions and receive its log messages).
    pub client: Option<ClientLink>,
}

/// A caller's bearer token: its text never shows in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(Arc<str>);

impl BearerToken {
    pub fn new(token: &str) -> BearerToken {
        BearerToken(Arc::from(token))
    }

    /// The token's text, to send upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

/// A way back to the caller's client, opaque here: the face that made it
/// and the tool kind that uses it agree on the type inside. Two links are
/// equal when they are the same link.
#[derive(Clone)]
pub struct ClientLink(Arc<dyn Any + Send + Sync>);

impl ClientLink {
    pub fn new<T: Any + Send + Sync>(value: T) -> ClientLink {
        ClientLink(Arc::new(value))
    }

    /// The link's value, when it is a `T`.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl PartialEq for ClientLink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ClientLink {}

impl fmt::Debug for ClientLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientLink")
    }
}

/// A project name that is not a safe folder name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "project {0:?} is invalid: use 1-64 letters, digits, `_`, `-` or `.`, starting with a letter or digit"
)]
pub struct InvalidProject(pub String);

impl CallContext {
    /// A context with a fresh request id and nothing else.
    pub fn new() -> CallContext {
        CallContext::for_request(new_request_id())
    }

    /// A context of the request `request_id`, with nothing else.
    pub fn for_request(request_id: String) -> CallContext {
        CallContext {
            request_id,
            tool_set: None,
            key: None,
            project: None,
            subject: None,
            claims: None,
            token: None,
            client: None,
        }
    }

    /// Sets the caller's bearer token.
    pub fn with_token(mut self, token: Option<BearerToken>) -> CallContext {
        self.token = token;
        self
    }

    /// Sets who calls, and the claims of their token.
    pub fn with_subject(
        mut self,
        subject: Option<String>,
        claims: Option<Arc<serde_json::Value>>,
    ) -> CallContext {
        self.subject = subject;
        self.claims = claims;
        self
    }

    /// Sets the request id (e.g. the one the HTTP layer assigned).
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> CallContext {
        self.request_id = request_id.into();
        self
    }

    /// Sets the name of the caller's API key.
    pub fn with_key(mut self, key: Option<String>) -> CallContext {
        self.key = key;
        self
    }

    /// Sets the tool set in force.
    pub fn with_tool_set(mut self, tool_set: Option<String>) -> CallContext {
        self.tool_set = tool_set;
        self
    }

    /// Sets the project; refuses a name that is not a safe folder name.
    pub fn with_project(mut self, project: Option<String>) -> Result<CallContext, InvalidProject> {
        if let Some(p) = &project
            && !is_valid_project(p)
        {
            return Err(InvalidProject(p.clone()));
        }
        self.project = project;
        Ok(self)
    }

    /// The project, if one was given.
    pub fn project(&self) -> Option<&str> {
        self.project.as_deref()
    }
}

/// A fresh request id.
pub fn new_request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// `true` when `name` can name a project folder: 1-64 of `A-Z a-z 0-9 _ - .`,
/// starting with a letter or digit (so never `.`, `..` or hidden).
pub fn is_valid_project(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Values of any type the gateway attaches to every call, at most one per
/// type: the gateway builds them once per catalog, so cloning is cheap.
#[derive(Clone, Default)]
pub struct Extensions(Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Extensions {
    /// Adds (or replaces) the value of type `T`.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: Arc<T>) {
        Arc::make_mut(&mut self.0).insert(TypeId::of::<T>(), value);
    }

    /// The value of type `T`, if one was added.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Extensions({} values)", self.0.len())
    }
}

/// What a native tool receives: the call's context and the extensions the
/// gateway attaches. Declare a `ctx: &ToolContext` parameter to get it.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The request's id.
    pub request_id: String,
    /// The call's id (e.g. the model's `tool_call_id`).
    pub call_id: String,
    /// The name of the tool being called.
    pub tool: String,
    /// The tool set in force, if any.
    pub tool_set: Option<String>,
    /// The project the request works for, if any (a safe folder name).
    pub project: Option<String>,
    /// Who calls (see [`CallContext::subject`]).
    pub subject: Option<String>,
    extensions: Extensions,
}

impl ToolContext {
    /// The context of one call.
    pub fn new(
        call: &CallContext,
        call_id: &str,
        tool: &str,
        extensions: Extensions,
    ) -> ToolContext {
        ToolContext {
            request_id: call.request_id.clone(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            tool_set: call.tool_set.clone(),
            project: call.project.clone(),
            subject: call.subject.clone(),
            extensions,
        }
    }

    /// A context for calling a tool outside the gateway (tests, examples):
    /// a fresh request id, no extensions.
    pub fn detached(tool: &str) -> ToolContext {
        ToolContext::new(&CallContext::new(), "detached", tool, Extensions::default())
    }

    /// The same context with `extensions`.
    pub fn with_extensions(mut self, extensions: Extensions) -> ToolContext {
        self.extensions = extensions;
        self
    }

    /// The extension of type `T` the gateway attached, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.extensions.get()
    }
}

/// One progress report of a running call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far it is; grows with every report.
    pub progress: f64,
    /// The value `progress` will reach, when known.
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Where a call's progress goes: the caller that asked for it (an MCP
/// client). Reports are dropped, never waited for, when it is slow.
pub type ProgressSink = tokio::sync::mpsc::Sender<Progress>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_names() {
        for ok in ["acme", "a", "team-1", "p_2.v3", &"x".repeat(64)] {
            assert!(is_valid_project(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "-x",
            "a b",
            "é",
            &"x".repeat(65),
        ] {
            assert!(!is_valid_project(bad), "{bad}");
        }
        assert!(
            CallContext::new()
                .with_project(Some("../x".into()))
                .is_err()
        );
        let c = CallContext::new()
            .with_project(Some("acme".into()))
            .unwrap();
        assert_eq!(c.project(), Some("acme"));
        assert_eq!(c.request_id.len(), 32);
    }

    #[test]
    fn extensions_are_typed() {
        let mut ext = Extensions::default();
        ext.insert(Arc::new(7u32));
        ext.insert(Arc::new("seven".to_owned()));
        let ctx = ToolContext::detached("t").with_extensions(ext);
        assert_eq!(ctx.get::<u32>(), Some(&7));
        assert_eq!(ctx.get::<String>().map(String::as_str), Some("seven"));
        assert_eq!(ctx.get::<u64>(), None);
    }
}
