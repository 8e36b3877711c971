//! A call's outcome as a result: its data cut to the output cap with a
//! visible marker, checked by the guards, its time; and the one check every
//! result goes through on its way out (`checked`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::catalog::Catalog;
use crate::tools::tool::{Output, ToolError};

use super::{CallError, Executor, ToolResult, elapsed_ms};

impl Executor {
    /// The result of an outcome: output capped, checked, duration
    /// measured. Public for tools run outside the executor (sub-agents,
    /// the search of a client's deferred tools).
    pub async fn finish(
        &self,
        tool: &str,
        outcome: Result<Value, CallError>,
        catalog: &Catalog,
        started: Instant,
    ) -> ToolResult {
        self.finish_output(tool, outcome.map(Output::from), catalog, started)
            .await
    }

    /// The result of `tool`'s outcome: output capped, then
    /// [`checked`](Self::checked), duration measured.
    pub(super) async fn finish_output(
        &self,
        tool: &str,
        outcome: Result<Output, CallError>,
        catalog: &Catalog,
        started: Instant,
    ) -> ToolResult {
        match outcome {
            Ok(Output {
                data,
                mut mcp_result,
            }) => {
                let (mut data, truncated) =
                    cap_output(data, catalog.settings.defaults.max_output_chars);
                let notes = match self
                    .checked(catalog, tool, &mut data, &mut mcp_result, Some(as_text))
                    .await
                {
                    Ok(notes) => notes,
                    Err(e) => return ToolResult::failure(e, started),
                };
                ToolResult {
                    success: true,
                    data: Some(data),
                    error: None,
                    duration_ms: elapsed_ms(started),
                    skipped: false,
                    cached: false,
                    truncated,
                    mcp_result,
                    notes,
                }
            }
            Err(e) => ToolResult::failure(e, started),
        }
    }

    /// What comes back from a tool or an MCP server, on its way to a model
    /// or a client — a tool's result (and an MCP tool's raw one), a prompt,
    /// a resource, a completion, a task's result: the guards
    /// (`guards.secrets`, `guards.injection`), then `guards.classifier` on
    /// the text `readable` gives (not classified without it). Redacted in
    /// place; the notes the reader reads first; `Err` when a guard blocks
    /// it. Every path a result takes goes through here.
    pub(super) async fn checked(
        &self,
        catalog: &Catalog,
        what: &str,
        data: &mut Value,
        raw: &mut Option<Arc<Value>>,
        readable: Option<fn(&Value) -> Cow<'_, str>>,
    ) -> Result<Vec<String>, ToolError> {
        let guards = &catalog.settings.guards;
        let size = json_len_upto(data, CHECKED_INLINE)
            + raw
                .as_deref()
                .map_or(0, |r| json_len_upto(r, CHECKED_INLINE));
        let mut notes = if size > CHECKED_INLINE {
            // A large result is read on a blocking thread, not the one
            // serving requests (the injection model reads ~40 MB a second).
            let (guards, what) = (guards.clone(), what.to_owned());
            let (mut d, mut r) = (std::mem::take(data), raw.take());
            // Should the check panic, the result is lost with it, and the
            // call fails: every caller drops the result on `Err`.
            let (notes, d, r) = tokio::task::spawn_blocking(move || {
                let notes = crate::governance::guards::check_result(&guards, &what, &mut d, &mut r);
                (notes, d, r)
            })
            .await
            .map_err(|e| {
                ToolError::Failed(format!("the guards' check of the result failed: {e}"))
            })?;
            (*data, *raw) = (d, r);
            notes?
        } else {
            crate::governance::guards::check_result(guards, what, data, raw)?
        };
        if let (Some(classifier), Some(readable)) = (&guards.classifier, readable) {
            let text = readable(data);
            if let Some(note) = crate::governance::guards::check_with_classifier(
                &self.http, classifier, what, &text,
            )
            .await?
            {
                notes.push(note);
            }
        }
        Ok(notes)
    }
}

/// The largest result (its data and raw JSON together, in bytes) the
/// guards check on the thread serving the request.
const CHECKED_INLINE: usize = 64 * 1024;

/// A tool's result as the classifier reads it: its text, or its JSON.
fn as_text(data: &Value) -> Cow<'_, str> {
    match data {
        Value::String(s) => Cow::Borrowed(s.as_str()),
        v => Cow::Owned(v.to_string()),
    }
}

/// The length of a value's JSON text, without building it.
pub(super) fn json_len(v: &Value) -> usize {
    json_len_upto(v, usize::MAX)
}

/// The length of a value's JSON text, counted no further than `limit + 1`
/// bytes: enough to tell whether it is larger than `limit` without writing
/// all of a large value.
pub(super) fn json_len_upto(v: &Value, limit: usize) -> usize {
    struct Count(usize, usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(buf.len());
            if self.0 > self.1 {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0, limit);
    let _ = serde_json::to_writer(&mut c, v);
    c.0.min(limit.saturating_add(1))
}

/// Cuts output longer than `max` characters. Strings are cut in place;
/// other values become their JSON text, cut.
pub(super) fn cap_output(data: Value, max: usize) -> (Value, bool) {
    match data {
        Value::String(s) if s.chars().count() > max => (Value::String(cut(&s, max)), true),
        Value::String(s) => (Value::String(s), false),
        other => {
            let text = other.to_string();
            if text.chars().count() > max {
                (Value::String(cut(&text, max)), true)
            } else {
                (other, false)
            }
        }
    }
}

pub(super) fn cut(s: &str, max: usize) -> String {
    let end = s.char_indices().nth(max).map_or(s.len(), |(i, _)| i);
    let rest = s[end..].chars().count();
    format!("{}\n[output truncated: {rest} more characters]", &s[..end])
}

pub(super) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn output_is_cut_with_a_marker() {
        let (v, t) = cap_output(json!("héllo world"), 5);
        assert!(t);
        assert_eq!(v, json!("héllo\n[output truncated: 6 more characters]"));
        let (v, t) = cap_output(json!({"a": 1}), 100);
        assert!(!t);
        assert_eq!(v, json!({"a": 1}));
    }

    #[test]
    fn a_json_length_is_counted_up_to_one_past_its_limit() {
        let v = json!({"a": "x".repeat(1000)});
        assert_eq!(json_len(&v), v.to_string().len());
        assert_eq!(json_len_upto(&v, 10_000), v.to_string().len());
        assert_eq!(json_len_upto(&v, 100), 101);
    }
}
