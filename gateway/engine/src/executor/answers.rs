//! What MCP servers answer besides a tool's result — a prompt, a resource,
//! a completion, a finished task's result — on its way to the client:
//! checked like a tool's result (`output::checked`), counted in the
//! metrics and written to the audit log; what each kind of request costs
//! the caller's key (`Method::spends_a_tool_call`). Nothing of them is
//! cached (a server's prompt or resource may change at any time, and has no
//! declaration that says how long it holds).

use std::borrow::Cow;
use std::time::Instant;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::governance::audit::AuditEntry;
use crate::tools::tool::context::CallContext;

use super::output::json_len;
use super::{CallError, Executor};

/// The longest `about` written to the audit log and the logs, in
/// characters (a URI is the client's own text, of any length).
const MAX_ABOUT_CHARS: usize = 512;

/// A request to an MCP server whose answer is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    PromptsGet,
    ResourcesRead,
    /// Suggestions for a person typing: redacted, never classified or
    /// audited (one per keystroke), counted in the metrics.
    Completion,
    /// A finished task's result (polls of a running task are not checked).
    TasksGet,
}

impl Method {
    /// The request's name in MCP.
    pub fn name(self) -> &'static str {
        match self {
            Method::PromptsGet => "prompts/get",
            Method::ResourcesRead => "resources/read",
            Method::Completion => "completion/complete",
            Method::TasksGet => "tasks/get",
        }
    }

    /// `true` when the request spends one of the key's tool calls per
    /// minute, as a call does: a prompt and a resource bring text for a
    /// model. A completion is a keystroke (the key's requests per minute
    /// bound it), and a task's poll follows a call that spent one.
    pub fn spends_a_tool_call(self) -> bool {
        matches!(self, Method::PromptsGet | Method::ResourcesRead)
    }

    /// `true` when the answer is read by the classifier and written to
    /// the audit log.
    fn audited(self) -> bool {
        self != Method::Completion
    }
}

/// What was asked of an MCP server, for the checks and the audit log.
#[derive(Debug, Clone, Copy)]
pub struct Answered<'a> {
    pub method: Method,
    /// What it was about: the prompt's name, the resource's URI (or
    /// template), the task's id.
    pub about: &'a str,
    /// Its arguments (a prompt's), written to the audit log as a call's.
    pub arguments: &'a Value,
}

impl Answered<'_> {
    /// `<method> <about>`, as the audit log and the logs write it: a URI
    /// read percent-decoded (as its server reads it), cut to
    /// [`MAX_ABOUT_CHARS`], any secret in it redacted.
    fn label(&self) -> String {
        let about = match self.method {
            Method::ResourcesRead => {
                percent_encoding::percent_decode_str(self.about).decode_utf8_lossy()
            }
            _ => Cow::Borrowed(self.about),
        };
        let about = toolgate::truncate_chars(&about, MAX_ABOUT_CHARS);
        let about: String = about.chars().filter(|c| !c.is_control()).collect();
        crate::governance::guards::without_secrets(&format!("{} {about}", self.method.name()))
    }
}

/// The text of an answer a classifier reads: its strings, one per line,
/// without the base64 of blobs, images and audio.
fn readable(answer: &Value) -> Cow<'_, str> {
    fn collect(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
            Value::Object(fields) => fields
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "blob" | "data" | "_meta"))
                .for_each(|(_, v)| collect(v, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    collect(answer, &mut out);
    Cow::Owned(out)
}

impl Executor {
    /// `answer`, the answer to `asked` for the caller of `ctx` asked at
    /// `started`, checked by the guards and (but a completion) the
    /// classifier, redacted in place; counted, and audited (as the tool
    /// `<method> <about>`). Returns the notes the reader reads first, or
    /// the error that blocks the answer.
    pub async fn answered(
        &self,
        catalog: &Catalog,
        ctx: &CallContext,
        asked: Answered<'_>,
        answer: &mut Value,
        started: Instant,
    ) -> Result<Vec<String>, CallError> {
        let what = asked.label();
        let classified: Option<fn(&Value) -> Cow<'_, str>> =
            asked.method.audited().then_some(readable);
        let checked = self
            .checked(catalog, &what, answer, &mut None, classified)
            .await
            .map_err(CallError::from);
        let outcome = checked.as_ref().err().map_or("ok", CallError::code);
        let duration = started.elapsed();
        // By method, not by what it was about: a label per prompt or URI
        // would grow the metrics without bound.
        crate::support::metrics::record(|m| {
            m.tool_call(asked.method.name(), outcome, duration, false);
        });
        if asked.method.audited() && self.keeps_calls() {
            let (arguments, arguments_sha256) = crate::governance::audit::render_arguments(
                self.arguments_mode(),
                None,
                asked.arguments,
            );
            let bytes = match &checked {
                Ok(_) => json_len(answer),
                Err(e) => e.to_string().len(),
            };
            self.keep(AuditEntry {
                ts: crate::governance::audit::now_rfc3339(),
                request_id: ctx.request_id.clone(),
                key: ctx.key.clone(),
                subject: ctx.subject.clone(),
                tool_set: ctx.tool_set.clone(),
                tool: what,
                call_id: String::new(),
                arguments,
                arguments_sha256,
                outcome,
                duration_ms: duration.as_secs_f64() * 1000.0,
                bytes,
                cached: false,
                truncated: false,
            })
            .await;
        }
        checked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_label_is_bounded_decoded_and_holds_no_secret() {
        let long = "x".repeat(10_000);
        for (method, about, want) in [
            (
                Method::ResourcesRead,
                "echo://key%20AKIAIOSFODNN7EXAMPLE",
                "resources/read echo://key [redacted: AWS access key id]",
            ),
            (Method::PromptsGet, "a%20b", "prompts/get a%20b"),
            (Method::ResourcesRead, "a%0Ab", "resources/read ab"),
        ] {
            let asked = Answered {
                method,
                about,
                arguments: &Value::Null,
            };
            assert_eq!(asked.label(), want);
        }
        let asked = Answered {
            method: Method::ResourcesRead,
            about: &long,
            arguments: &Value::Null,
        };
        assert!(asked.label().chars().count() <= MAX_ABOUT_CHARS + 50);
    }

    #[test]
    fn a_classifier_reads_the_text_not_the_base64() {
        let answer = json!({"contents": [
            {"uri": "a://b", "blob": "QUFBQUFB"},
            {"uri": "a://c", "text": "hello"},
        ], "_meta": {"x": "y"}});
        let text = readable(&answer);
        assert!(text.contains("hello") && !text.contains("QUFB") && !text.contains('y'));
    }
}
