//! What a server asks during a call — a person's input (elicitation), a
//! model's answer (sampling), the client's roots — and the log messages it
//! sends, passed to the client of the call when it has one that can answer
//! (an MCP client of the gateway). Without one, the gateway answers as it
//! can alone: an elicitation is declined, the roots are none, a sampling
//! request fails the call with a sentence the model can read.
//!
//! A face puts a [`Relay`] in the call's context
//! ([`toolgate::ClientLink`]). A server of the 2026-07-28 revision asks in
//! the call's own answer (`input_required`), so the question reaches that
//! call's client; one of an older revision sends its own request (or log
//! message) beside the call, which is passed on only while exactly one call
//! to that server is running — otherwise no one could tell whose it is,
//! and it is answered as without a client.
//!
//! A client of the 2026-07-28 revision cannot be asked in the middle of a
//! call either: it answers in a request of its own. Its relay holds a
//! [`HandBack`]: the questions it declared it can answer are handed back to
//! it (the face returns them as its own `input_required` result), and its
//! answers come back in the next call as a [`Resume`].
//!
//! Sampling, roots and logging are deprecated in the 2026-07-28 revision
//! (SEP-2577) and still carried, for the servers and clients that use them.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ListRootsResult, LoggingMessageNotificationParam,
};

/// An answer from the client, or why there is none.
pub type Reply<T> = BoxFuture<'static, Result<T, rmcp::ErrorData>>;

type Ask<P, R> = Arc<dyn Fn(P) -> Reply<R> + Send + Sync>;

/// The client of a call, as far as it can answer. Each part is `None`
/// when the client cannot do it (it did not declare the capability).
#[derive(Clone, Default)]
pub struct Relay {
    /// Asks the client's person (`elicitation/create`).
    pub elicit: Option<Ask<ElicitRequestParams, ElicitResult>>,
    /// Asks the client's model (`sampling/createMessage`).
    pub sample: Option<Ask<CreateMessageRequestParams, CreateMessageResult>>,
    /// Asks the client's roots (`roots/list`).
    pub roots: Option<Ask<(), ListRootsResult>>,
    /// Hands the client the server's log messages (it filters by the
    /// level it set).
    pub log: Option<LogSink>,
    /// The lowest level of log messages the client wants: a server of the
    /// 2026-07-28 revision is asked for them with the call.
    pub log_level: Option<rmcp::model::LoggingLevel>,
    /// A client that answers in a request of its own (2026-07-28): the
    /// questions it can answer are handed back to it.
    pub hand_back: Option<HandBack>,
}

/// Where a call's log messages go. A server's log messages during a call
/// reach its client before the call's answer: they are handed over in the
/// order the server sent them (see `session`), and the call waits for
/// `flushed` before it answers.
#[derive(Clone)]
pub struct LogSink {
    /// Queues one message for the client.
    pub send: Arc<dyn Fn(LoggingMessageNotificationParam) + Send + Sync>,
    /// Ends when the messages queued so far have been sent on (or could
    /// not be: the client is gone).
    pub flushed: Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>,
}

/// A client that answers a server's questions in a later request of its
/// own (the 2026-07-28 revision's `input_required`).
#[derive(Clone, Debug, Default)]
pub struct HandBack {
    /// It answers elicitation (it declared the capability).
    pub elicit: bool,
    /// It answers sampling.
    pub sample: bool,
    /// It answers `roots/list`.
    pub roots: bool,
    /// It follows tasks (the Tasks extension, SEP-2663): a server may run
    /// its call as one.
    pub tasks: bool,
    /// Its answers to the questions handed back before.
    pub resume: Option<Resume>,
    /// Where the questions handed back are left for the face.
    pub handed: Arc<Mutex<Option<Handed>>>,
}

/// A client's answers to a server's questions, sent with the request again.
#[derive(Clone, Debug, Default)]
pub struct Resume {
    /// The server that asked, when known: the answers go to it only.
    pub server: Option<String>,
    /// The answers, by the server's keys.
    pub responses: rmcp::model::InputResponses,
    /// The server's own state, echoed unchanged.
    pub state: Option<String>,
}

/// What a server handed back to the client instead of a result.
#[derive(Clone, Debug)]
pub enum Handed {
    /// Questions the client answers in its next request.
    Input(Questions),
    /// The server runs the call as a task, which the client follows.
    Task {
        /// The server that runs it.
        server: String,
        /// The task, under the server's id.
        task: rmcp::model::CreateTaskResult,
    },
    /// The server refused the call for a capability the client did not
    /// declare (`-32021`): the client's own error.
    Refused(rmcp::ErrorData),
}

/// The questions of a server handed back to the client.
#[derive(Clone, Debug)]
pub struct Questions {
    /// The server that asked.
    pub server: String,
    /// The questions the client answers, by the server's keys.
    pub requests: rmcp::model::InputRequests,
    /// The server's own state, to echo with the answers.
    pub state: Option<String>,
    /// The gateway's own answers to the questions the client could not
    /// answer, sent with the client's.
    pub answered: rmcp::model::InputResponses,
}

impl HandBack {
    /// `true` when the client answers `request` itself.
    pub fn answers(&self, request: &rmcp::model::InputRequest) -> bool {
        use rmcp::model::InputRequest;
        match request {
            InputRequest::Elicitation(_) => self.elicit,
            InputRequest::CreateMessage(_) => self.sample,
            InputRequest::ListRoots(_) => self.roots,
            _ => false,
        }
    }

    /// The client's answers for `server`, once: answers given for another
    /// server are not sent to this one.
    pub fn resume_for(&self, server: &str) -> Option<&Resume> {
        self.resume
            .as_ref()
            .filter(|r| r.server.as_deref().is_none_or(|s| s == server))
    }

    /// The capabilities the client declared, as a server is told them for
    /// this call.
    #[allow(deprecated)] // roots and sampling (SEP-2577), still carried
    pub fn capabilities(&self) -> rmcp::model::ClientCapabilities {
        let mut capabilities = rmcp::model::ClientCapabilities::default();
        capabilities.elicitation = self.elicit.then(Default::default);
        capabilities.sampling = self.sample.then(Default::default);
        capabilities.roots = self.roots.then(Default::default);
        if self.tasks {
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(
                    rmcp::model::TASKS_EXTENSION_ID.to_owned(),
                    Default::default(),
                );
        }
        capabilities
    }

    /// Leaves `handed` for the face.
    pub fn hand(&self, handed: Handed) {
        *self.handed.lock().unwrap_or_else(|p| p.into_inner()) = Some(handed);
    }

    /// What was handed back during the call, if anything.
    pub fn take(&self) -> Option<Handed> {
        self.handed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("elicit", &self.elicit.is_some())
            .field("sample", &self.sample.is_some())
            .field("roots", &self.roots.is_some())
            .field("log", &self.log.is_some())
            .field("log_level", &self.log_level)
            .field("hand_back", &self.hand_back)
            .finish()
    }
}

impl Relay {
    /// The relay of a call's context, if its face gave one.
    pub fn of(ctx: &toolgate::CallContext) -> Option<&Relay> {
        ctx.client.as_ref().and_then(|link| link.get::<Relay>())
    }

    /// Elicitation: the client's person, or declined. An accepted answer
    /// gets the schema's `default` for each field it leaves out (SEP-1034).
    pub async fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let Some(ask) = &self.elicit else {
            return Ok(ElicitResult::new(rmcp::model::ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(&params)
            .ok()
            .and_then(|p| p.get("requestedSchema").cloned());
        let answer = ask(params).await?;
        Ok(match schema {
            Some(schema) => with_defaults(answer, &schema),
            None => answer,
        })
    }

    /// Sampling: the client's model, or an error saying no one can.
    pub async fn sample(
        &self,
        params: CreateMessageRequestParams,
        server: &str,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        match &self.sample {
            Some(ask) => ask(params).await,
            None => Err(rmcp::ErrorData::invalid_request(
                format!(
                    "MCP server `{server}` asked for a model's answer (sampling), and the caller's client cannot give one"
                ),
                None,
            )),
        }
    }

    /// Roots: the client's, or none.
    pub async fn roots(&self) -> Result<ListRootsResult, rmcp::ErrorData> {
        match &self.roots {
            Some(ask) => ask(()).await,
            None => Ok(ListRootsResult::default()),
        }
    }
}

/// `answer` with `schema`'s defaults for the fields an accepted answer
/// leaves out.
fn with_defaults(answer: ElicitResult, schema: &serde_json::Value) -> ElicitResult {
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return answer;
    };
    let Ok(mut value) = serde_json::to_value(&answer) else {
        return answer;
    };
    if value.get("action").and_then(|a| a.as_str()) != Some("accept") {
        return answer;
    }
    let content = value
        .as_object_mut()
        .map(|v| v.entry("content").or_insert_with(|| serde_json::json!({})));
    let Some(content) = content.and_then(|c| c.as_object_mut()) else {
        return answer;
    };
    for (name, field) in properties {
        if let Some(default) = field.get("default") {
            content
                .entry(name.clone())
                .or_insert_with(|| default.clone());
        }
    }
    serde_json::from_value(value).unwrap_or(answer)
}

/// The calls running on one server, each with its client's relay (or
/// none): who a request or log message sent beside a call belongs to.
#[derive(Debug, Default)]
pub struct Running {
    calls: Mutex<Vec<(u64, Option<Relay>)>>,
    next: std::sync::atomic::AtomicU64,
}

impl Running {
    /// Notes a call until the guard is dropped.
    pub fn enter(self: &Arc<Self>, relay: Option<Relay>) -> RunningCall {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock().push((id, relay));
        RunningCall {
            running: Arc::clone(self),
            id,
        }
    }

    /// The relay of the one call running, when exactly one is and it has
    /// one.
    pub fn only(&self) -> Option<Relay> {
        match self.lock().as_slice() {
            [(_, relay)] => relay.clone(),
            _ => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Option<Relay>)>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running call; dropping it ends it.
#[derive(Debug)]
pub struct RunningCall {
    running: Arc<Running>,
    id: u64,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        self.running.lock().retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_answer_gets_the_defaults_of_the_fields_it_leaves_out() {
        let schema = serde_json::json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"},
        }});
        let accepted: ElicitResult =
            serde_json::from_value(serde_json::json!({"action": "accept", "content": {"age": 41}}))
                .unwrap();
        let filled = serde_json::to_value(with_defaults(accepted, &schema)).unwrap();
        assert_eq!(
            filled["content"],
            serde_json::json!({"name": "John Doe", "age": 41})
        );
        let declined: ElicitResult =
            serde_json::from_value(serde_json::json!({"action": "decline"})).unwrap();
        let kept = serde_json::to_value(with_defaults(declined, &schema)).unwrap();
        assert!(kept.get("content").is_none(), "{kept}");
    }

    #[test]
    fn a_request_beside_calls_belongs_to_the_only_one_running() {
        let running = Arc::new(Running::default());
        assert!(running.only().is_none());
        let first = running.enter(Some(Relay::default()));
        assert!(running.only().is_some(), "one call: its relay");
        let second = running.enter(None);
        assert!(running.only().is_none(), "two calls: no one's");
        drop(first);
        assert!(running.only().is_none(), "the one left has no relay");
        drop(second);
        assert!(running.only().is_none());
    }
}
