//! What a tool loop produces, whatever face asked for it: the events of a
//! streamed loop, the answer of a whole one, how it finished, and why it
//! failed. Faces (chat completions, ...) encode these in their wire format.

use serde::Serialize;
use serde_json::Value;

pub use crate::conversation::FinishReason;
use crate::conversation::{Call, Notices, Opaque, Reasoning, Usage};
use crate::executor::CallError;
pub use crate::executor::CallProgress;
use crate::executor::ToolResult;
use crate::model::upstream::UpstreamError;

/// One step of a streamed loop, in order. After [`Event::Done`] or
/// [`Event::Failed`] nothing follows.
#[derive(Debug)]
pub enum Event {
    /// A piece of the answer's text.
    Content(String),
    /// A piece of the model's reasoning (`reasoning_content`).
    Reasoning(String),
    /// The state that ends the reasoning just streamed (a thinking block's
    /// signature), which only the model's protocol can read.
    ReasoningOpaque(Opaque),
    /// The gateway starts running a tool call the model made.
    ToolCallStarted(Box<Call>),
    /// A running gateway tool call reported progress (MCP tools that send
    /// `notifications/progress`).
    ToolProgress(Box<CallProgress>),
    /// A gateway tool call finished (successfully or not).
    ToolCallDone(Box<CallRecord>),
    /// The model called client tools: the client runs them and asks again.
    ClientCalls(Vec<Call>),
    /// The loop is over.
    Done(Box<Summary>),
    /// The loop failed part-way; what was sent stays sent.
    Failed(Box<ChatError>),
}

/// A whole (non-streamed) loop's result.
#[derive(Debug)]
pub struct Answer {
    /// The upstream's last answer as it sent it (ids, times, fingerprints
    /// around its turn), for a face of the same protocol to keep what it
    /// shares with it; read only by a face that shows it (see
    /// [`Envelope::read`](crate::model::protocol::Envelope::read)).
    pub envelope: Option<crate::model::protocol::Envelope>,
    pub content: Option<String>,
    pub reasoning: Option<String>,
    /// The reasoning as the model gave it, with its opaque state.
    pub reasoning_items: Vec<Reasoning>,
    /// Calls of client tools the client must run (finish `tool_calls`).
    pub client_calls: Vec<Call>,
    /// What the model protocol could not carry of the request.
    pub notices: Notices,
    pub summary: Summary,
}

/// How a loop ended, and what it did.
#[derive(Debug, Clone)]
pub struct Summary {
    pub finish: FinishReason,
    pub report: Report,
    /// Token usage summed over every model call.
    pub usage: Usage,
}

/// What the loop did, reported beside the answer (the `toolgate` field).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub tool_set: Option<String>,
    /// `function_calling` or `structured_prompt`.
    pub formatter: &'static str,
    pub upstream: String,
    /// Model calls made.
    pub iterations: u32,
    pub tool_calls: Vec<CallRecord>,
    /// On a route of several targets: each target tried, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<crate::model::routing::Attempt>,
    /// What the model calls cost.
    pub cost: Cost,
}

/// What a loop's model calls cost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cost {
    /// In US dollars; `null` ("cost unknown") when a call's price is not
    /// known (its tokens are counted all the same).
    pub usd: Option<f64>,
    /// Model calls whose price is unknown.
    #[serde(skip_serializing_if = "is_zero")]
    pub unpriced_calls: u32,
    /// Budgets of the caller past their warning share.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budget_warnings: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Cost {
    /// The cost as the `X-Toolgate-Cost` header says it: dollars, or
    /// `unknown`.
    pub fn header(&self) -> String {
        match self.usd {
            Some(usd) => format!("{usd:.6}"),
            None => "unknown".into(),
        }
    }
}

/// What is known when a streamed loop starts (its first model call
/// answered): what the model protocol could not carry, and on a route of
/// several targets those tried.
#[derive(Debug, Default)]
pub struct Started {
    pub notices: Notices,
    pub attempts: Vec<crate::model::routing::Attempt>,
    /// Budgets of the caller past their warning share.
    pub budget_warnings: Vec<String>,
}

/// One gateway tool call, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct CallRecord {
    pub id: String,
    pub function: CallFunction,
    /// The result's data, or the error's text.
    pub result: Value,
    pub success: bool,
    pub skipped: bool,
    pub cached: bool,
    /// Seconds.
    pub execution_time: f64,
    pub error: Option<CallError>,
    /// The model call (1-based) whose answer made this call.
    pub iteration: u32,
}

/// The call as the model made it.
#[derive(Debug, Clone, Serialize)]
pub struct CallFunction {
    pub name: String,
    /// JSON text, as the model sent it.
    pub arguments: String,
}

impl CallRecord {
    pub fn new(call: &Call, result: &ToolResult, iteration: u32) -> CallRecord {
        CallRecord {
            id: call.id.clone(),
            function: CallFunction {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
            result: match (&result.data, &result.error) {
                (_, Some(e)) => Value::String(e.to_string()),
                (Some(d), None) => d.clone(),
                (None, None) => Value::Null,
            },
            success: result.success,
            skipped: result.skipped,
            cached: result.cached,
            execution_time: result.duration_ms / 1000.0,
            error: result.error.clone(),
            iteration,
        }
    }
}

/// Why a loop failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ChatError {
    /// The model's upstream failed or answered something unusable.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The gateway could not do its part (e.g. render the prompt template).
    #[error("{0}")]
    Internal(String),
    /// A budget of the caller is spent (or cannot be checked).
    #[error(transparent)]
    Spend(#[from] crate::governance::spend::SpendError),
}

impl ChatError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ChatError::Upstream(e) => e.code(),
            ChatError::Internal(_) => "internal_error",
            ChatError::Spend(crate::governance::spend::SpendError::Exceeded(_)) => {
                "budget_exceeded"
            }
            ChatError::Spend(crate::governance::spend::SpendError::Unavailable) => {
                "budget_unavailable"
            }
        }
    }
}
