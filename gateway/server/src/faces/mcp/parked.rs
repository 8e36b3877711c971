//! Calls parked for a 2026-07-28 client's answer: a server of an older
//! revision asks (elicitation, sampling, roots) in the middle of a call,
//! and waits for the answer in that call; a 2026-07-28 client can only
//! answer in a request of its own.
//!
//! The call runs on in a task of its own. The server's question ends the
//! client's `tools/call` with an `input_required` result (the gateway's
//! key for the question, and a `requestState` that names the parked call,
//! sealed like every state: see `input`). The client sends the call again
//! with its answer; the server gets it, and the call goes on to its result
//! or its next question. A parked call waits at most [`PARKED_FOR`], and
//! at most [`MAX_PARKED`] wait at once (beyond, the gateway answers alone,
//! as for a client that cannot answer). A parked call lives in the memory
//! of the replica that runs it: an answer that reaches another replica is
//! forwarded to it when it gave its URL (`mcp.replica_url_env`, see
//! `forward`), and refused (-32602) otherwise, so the client calls again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{InputRequest, InputResponses};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use toolgate_engine::executor::ToolResult;
use toolgate_engine::tools::tool::mcp::relay::{HandBack, Relay, Reply};

/// How long a parked call waits for the client's answer.
pub const PARKED_FOR: Duration = Duration::from_secs(10 * 60);

/// At most this many calls wait for an answer at once.
pub const MAX_PARKED: usize = 1024;

/// A question of the server's, and where its answer goes.
pub struct Ask {
    request: InputRequest,
    reply: oneshot::Sender<Value>,
}

/// A call that runs on while its client is asked.
pub struct Running {
    run: JoinHandle<ToolResult>,
    asks: mpsc::Receiver<Ask>,
    hand_back: Option<HandBack>,
}

/// Where a running call is now.
pub enum Now {
    /// It ended.
    Done(ToolResult),
    /// Its server asks: the question under its key, and the call, parked.
    Asks {
        key: String,
        request: Box<InputRequest>,
        parked: Box<Parked>,
    },
}

/// A call waiting for the answer to its question `key`.
pub struct Parked {
    running: Running,
    key: String,
    reply: oneshot::Sender<Value>,
}

/// The parked calls of this process, by the id their state names.
#[derive(Debug, Default)]
pub struct Calls {
    waiting: Mutex<HashMap<String, Box<Parked>>>,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Parked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parked").field("key", &self.key).finish()
    }
}

impl Calls {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Box<Parked>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `true` when another call may be parked.
    pub fn has_room(&self) -> bool {
        self.waiting().len() < MAX_PARKED
    }

    /// Parks `parked` under a new id, for [`PARKED_FOR`]; `None` when
    /// [`MAX_PARKED`] wait already (the call is then dropped, which ends
    /// it: its server's question fails).
    pub fn park(self: &Arc<Self>, parked: Box<Parked>) -> Option<String> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        {
            let mut waiting = self.waiting();
            if waiting.len() >= MAX_PARKED {
                return None;
            }
            waiting.insert(id.clone(), parked);
        }
        let calls = Arc::downgrade(self);
        let expiring = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARKED_FOR).await;
            if let Some(calls) = calls.upgrade() {
                // Dropped: the call is aborted, its question unanswered.
                drop(calls.waiting().remove(&expiring));
            }
        });
        Some(id)
    }

    /// The parked call `id`, given the client's answers: its question's
    /// answer sent to its server; the call runs on.
    pub fn resume(&self, id: &str, mut answers: InputResponses) -> Result<Running, McpError> {
        let Some(parked) = self.waiting().remove(id) else {
            return Err(McpError::invalid_params(
                "the call these answers belong to no longer waits for them (it was answered, expired, or runs on another replica of the gateway): call the tool again",
                None,
            ));
        };
        match answers.remove(&parked.key) {
            Some(answer) => {
                // A call that ended meanwhile takes no answer; its result
                // comes next.
                let _ = parked.reply.send(answer);
            }
            // Unanswered: the server's question fails.
            None => drop(parked.reply),
        }
        Ok(parked.running)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.run.abort();
    }
}

impl Running {
    /// Runs `call` in a task of its own; its server's questions come to
    /// `asks` (through the relay [`questions`] makes), and what its
    /// servers of the 2026-07-28 revision hand back to `hand_back`.
    pub fn start(
        call: impl std::future::Future<Output = ToolResult> + Send + 'static,
        asks: mpsc::Receiver<Ask>,
        hand_back: Option<HandBack>,
    ) -> Running {
        Running {
            run: tokio::spawn(call),
            asks,
            hand_back,
        }
    }

    /// Waits for the call's result or its server's next question.
    pub async fn next(mut self) -> Now {
        tokio::select! {
            result = &mut self.run => Now::Done(result.unwrap_or_else(|e| {
                ToolResult::failure(
                    toolgate_engine::executor::CallError::Panicked(e.to_string()),
                    std::time::Instant::now(),
                )
            })),
            Some(ask) = self.asks.recv() => {
                let key = kind(&ask.request).to_owned();
                Now::Asks {
                    key: key.clone(),
                    request: Box::new(ask.request),
                    parked: Box::new(Parked { running: self, key, reply: ask.reply }),
                }
            }
        }
    }

    /// The hand-back of the request that started the call: what its
    /// servers of the 2026-07-28 revision handed back.
    pub fn hand_back(&self) -> Option<&HandBack> {
        self.hand_back.as_ref()
    }
}

/// A short name for a question, its key in the client's `inputRequests`.
fn kind(request: &InputRequest) -> &'static str {
    match request {
        InputRequest::Elicitation(_) => "elicitation",
        InputRequest::CreateMessage(_) => "sampling",
        InputRequest::ListRoots(_) => "roots",
        _ => "input",
    }
}

/// `relay` with the questions the client declared it can answer sent to
/// `asks` (and their answers awaited), for a call run by [`Running`].
#[allow(deprecated)] // sampling and roots (SEP-2577), still carried
pub fn questions(mut relay: Relay, asks: &mpsc::Sender<Ask>) -> Relay {
    let Some(hand_back) = relay.hand_back.clone() else {
        return relay;
    };
    fn ask<T: serde::de::DeserializeOwned + Send + 'static>(
        asks: mpsc::Sender<Ask>,
        request: Value,
    ) -> Reply<T> {
        Box::pin(async move {
            let request: InputRequest = serde_json::from_value(request).map_err(|e| {
                McpError::internal_error(format!("the question cannot be handed on: {e}"), None)
            })?;
            let (reply, answer) = oneshot::channel();
            asks.send(Ask { request, reply })
                .await
                .map_err(|_| McpError::internal_error("the client's request is gone", None))?;
            let answer = answer
                .await
                .map_err(|_| McpError::internal_error("the client did not answer", None))?;
            serde_json::from_value(answer).map_err(|e| {
                McpError::invalid_params(format!("the client's answer is not one: {e}"), None)
            })
        })
    }
    if hand_back.elicit {
        let asks = asks.clone();
        relay.elicit = Some(Arc::new(move |params| {
            ask(
                asks.clone(),
                serde_json::json!({"method": "elicitation/create", "params": params}),
            )
        }));
    }
    if hand_back.sample {
        let asks = asks.clone();
        relay.sample = Some(Arc::new(move |params| {
            ask(
                asks.clone(),
                serde_json::json!({"method": "sampling/createMessage", "params": params}),
            )
        }));
    }
    if hand_back.roots {
        let asks = asks.clone();
        relay.roots = Some(Arc::new(move |()| {
            ask(asks.clone(), serde_json::json!({"method": "roots/list"}))
        }));
    }
    relay
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> InputRequest {
        serde_json::from_value(serde_json::json!({
            "method": "elicitation/create",
            "params": {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}
        }))
        .unwrap()
    }

    /// A call that asks once and answers with what it was told.
    async fn asking(asks: mpsc::Sender<Ask>) -> ToolResult {
        let (reply, answer) = oneshot::channel();
        let _ = asks
            .send(Ask {
                request: question(),
                reply,
            })
            .await;
        let told = answer.await.unwrap_or(Value::Null);
        let mut result = ToolResult::failure(
            toolgate_engine::tools::tool::ToolError::Failed(String::new()),
            std::time::Instant::now(),
        );
        result.error = None;
        result.success = true;
        result.data = Some(told);
        result
    }

    #[tokio::test]
    async fn a_parked_call_goes_on_with_its_client_s_answer() {
        let calls = Arc::new(Calls::default());
        let (tx, rx) = mpsc::channel(1);
        let running = Running::start(asking(tx), rx, None);
        let Now::Asks { key, parked, .. } = running.next().await else {
            panic!("the call asked nothing");
        };
        assert_eq!(key, "elicitation");
        let id = calls.park(parked).unwrap();
        let answers = [(key, serde_json::json!({"action": "accept"}))].into();
        let running = calls.resume(&id, answers).unwrap();
        let Now::Done(result) = running.next().await else {
            panic!("the call asked again");
        };
        assert_eq!(result.data, Some(serde_json::json!({"action": "accept"})));
        // Answered once: the id is gone.
        let e = calls.resume(&id, InputResponses::new()).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    }

    #[tokio::test]
    async fn an_unknown_or_foreign_id_is_refused() {
        let e = Calls::default()
            .resume("not-parked-here", InputResponses::new())
            .unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("another replica"), "{}", e.message);
    }

    #[tokio::test]
    async fn a_dropped_call_is_aborted() {
        let (tx, rx) = mpsc::channel(1);
        let (ended_tx, ended) = oneshot::channel::<()>();
        let call = async move {
            // Held until the task is dropped.
            let _ended = ended_tx;
            asking(tx).await
        };
        let running = Running::start(call, rx, None);
        let Now::Asks { parked, .. } = running.next().await else {
            panic!("the call asked nothing");
        };
        drop(parked);
        // The task was aborted: its future, and the sender it held, dropped.
        assert!(ended.await.is_err());
    }
}
