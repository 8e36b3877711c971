//! Model-written Python, run by an interpreter with no OS access (`monty`:
//! Ruff's parser and its own bytecode VM, no CPython), one program per
//! worker process of the gateway's own binary, confined.
//!
//! Why a process per program when the interpreter needs none: its memory.
//! The interpreter can bound time and recursion itself, but counts memory
//! only through a process-wide allocator, so one program's memory is bounded
//! only where one process runs one program; and a flaw of a young
//! interpreter then ends one program, not the gateway. The process also
//! confines itself ([`confine`]), so a flaw would find no files, network or
//! processes behind it.
//!
//! Data flows: the gateway's [`Worker::run`] starts `toolgate code-worker`,
//! sends the program ([`protocol`]), answers each tool call the program
//! makes with the `on_call` it was given, and reads the [`Outcome`]; the
//! worker's [`worker_main`] confines itself and runs [`worker::serve`].

pub mod confine;
pub mod host;
pub mod protocol;
pub mod value;
pub mod worker;

pub use host::{Call, Failure, Limits, Outcome, WORKER_ARG, Worker, binary};
pub use protocol::{FailureKind, Printed};

/// The worker process's main: one program from stdin, its calls and
/// outcome on stdout. Returns the process's exit code.
pub fn worker_main() -> i32 {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let result = worker::serve(&mut stdin.lock(), &mut stdout.lock(), |limits| {
        confine::confine(limits).map(|_| ())
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("code worker: {e}");
            2
        }
    }
}

/// The argument that makes the `toolgate` binary confine itself and become
/// a command (`exec`, lenient Python): [`confine::child_main`].
pub const CONFINE_ARG: &str = "confine";
