//! The messages between the gateway and a worker: one JSON object per line,
//! each line bounded ([`MAX_LINE`]) on both sides.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The longest line either side reads: a program, a tool's result or a
/// program's result (the gateway caps tool results far below this).
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// What the gateway sends.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToWorker {
    /// The program, the names it may call, and its limits (first line).
    Start {
        code: String,
        functions: Vec<String>,
        limits: WorkerLimits,
    },
    /// The value a called function returned.
    Return { value: Value },
    /// The function failed: raised in the program as a `RuntimeError`.
    Raise { message: String },
}

/// The limits the worker enforces itself (the gateway also holds a
/// wall-clock deadline and the process's memory limit).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WorkerLimits {
    /// Interpreter time, not counting the time functions take.
    pub time_ms: u64,
    /// Bytes of printed output kept (the rest counted and dropped).
    pub max_output: usize,
    /// Function calls the program may make.
    pub max_calls: u32,
    /// Depth of the program's own call stack.
    pub max_recursion: usize,
    /// Memory of the worker process (its data segment), and the largest
    /// single value the interpreter will build.
    pub memory_bytes: u64,
}

/// What the worker sends.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromWorker {
    /// The program calls `name` (positional and keyword arguments).
    Call {
        name: String,
        args: Vec<Value>,
        kwargs: Map<String, Value>,
    },
    /// The program ended: the value of its last expression.
    Done { value: Value, printed: Printed },
    /// The program did not end well.
    Failed {
        kind: FailureKind,
        message: String,
        printed: Printed,
    },
}

/// What a program printed, under the output limit.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Printed {
    pub text: String,
    /// Bytes dropped past the limit.
    pub dropped: usize,
}

/// Why a program did not end well.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// It does not parse (or uses what the interpreter does not have).
    Syntax,
    /// It raised an exception it did not catch.
    Exception,
    /// It ran out of time.
    Timeout,
    /// It ran out of recursion, memory or calls.
    Limit,
    /// The worker could not run it (a broken message, no confinement).
    Worker,
}
