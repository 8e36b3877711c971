//! The worker's side: read the program, confine the process, run the
//! program on the interpreter, ask the gateway for every function call, and
//! answer how it ended. The interpreter has no OS access of its own: an
//! `open`, `os.getenv` or `Path.read_text` reaches the host as an `OsCall`,
//! which is refused here; the confinement ([`crate::confine`]) holds even if
//! the interpreter had a flaw.

use std::borrow::Cow;
use std::io::{BufRead, Read, Write};
use std::time::Duration;

use monty::{MontyRun, RunProgress};
use monty_types::{
    CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult,
    PrintWriter, PrintWriterCallback, ResourceLimits, ResourceTracker,
};
use serde_json::Map;

use crate::protocol::{FailureKind, FromWorker, MAX_LINE, Printed, ToWorker, WorkerLimits};
use crate::value;

/// Why the worker stopped talking (its process then exits non-zero).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("reading from the gateway: {0}")]
    Io(#[from] std::io::Error),
    #[error("a message from the gateway is not understood: {0}")]
    Message(String),
    #[error("the gateway went away")]
    Closed,
}

/// Runs one program over `input` and `output`, confining the process with
/// `confine` once the program is read (tests pass a no-op).
pub fn serve(
    input: &mut impl BufRead,
    output: &mut impl Write,
    confine: impl FnOnce(&WorkerLimits) -> Result<(), String>,
) -> Result<(), WorkerError> {
    let ToWorker::Start {
        code,
        functions,
        limits,
    } = read(input)?
    else {
        return Err(WorkerError::Message(
            "the first message is not `start`".into(),
        ));
    };
    let mut printed = Bounded::new(limits.max_output);
    if let Err(why) = confine(&limits) {
        return send(
            output,
            &FromWorker::Failed {
                kind: FailureKind::Worker,
                message: format!("the interpreter's process could not be confined: {why}"),
                printed: printed.finish(),
            },
        );
    }
    let end = run(&code, &functions, &limits, &mut printed, input, output)?;
    let message = match end {
        Ok(value) => FromWorker::Done {
            value: value::to_json(&value),
            printed: printed.finish(),
        },
        Err((kind, message)) => FromWorker::Failed {
            kind,
            message,
            printed: printed.finish(),
        },
    };
    send(output, &message)
}

type End = Result<MontyObject, (FailureKind, String)>;

fn run(
    code: &str,
    functions: &[String],
    limits: &WorkerLimits,
    printed: &mut Bounded,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> Result<End, WorkerError> {
    let runner = match MontyRun::new(
        code.to_owned(),
        "program.py",
        Vec::new(),
        CompileOptions::default(),
    ) {
        Ok(runner) => runner,
        Err(e) => return Ok(Err((FailureKind::Syntax, e.to_string()))),
    };
    let tracker = ResourceTracker::new(ResourceLimits {
        max_duration: Some(Duration::from_millis(limits.time_ms)),
        // No allocator accounting here, so this bounds single values (a
        // `'x' * 10**10` is refused before it is built); the process's
        // data limit bounds the rest.
        max_memory: usize::try_from(limits.memory_bytes).ok(),
        gc_interval: None,
        max_recursion_depth: limits.max_recursion,
    });
    let mut calls = 0u32;
    let mut progress = runner.start(Vec::new(), tracker, PrintWriter::Callback(printed));
    loop {
        let step = match progress {
            Err(e) => return Ok(Err(failure(&e))),
            Ok(step) => step,
        };
        progress = match step {
            RunProgress::Complete(value) => return Ok(Ok(value)),
            RunProgress::NameLookup(lookup) => {
                let found = if functions.contains(&lookup.name) {
                    NameLookupResult::Value(MontyObject::Function {
                        name: lookup.name.clone(),
                        docstring: None,
                    })
                } else {
                    NameLookupResult::Undefined
                };
                lookup.resume(found, PrintWriter::Callback(printed))
            }
            RunProgress::FunctionCall(call) => {
                let result = if !functions.contains(&call.function_name) {
                    ExtFunctionResult::NotFound(call.function_name.clone())
                } else if calls >= limits.max_calls {
                    return Ok(Err((
                        FailureKind::Limit,
                        format!(
                            "the program made more than {} tool calls, the limit of one program",
                            limits.max_calls
                        ),
                    )));
                } else {
                    calls += 1;
                    ask(&call, input, output)?
                };
                call.resume(result, PrintWriter::Callback(printed))
            }
            RunProgress::OsCall(call) => {
                let what = call.function_call.to_string();
                call.resume(
                    ExtFunctionResult::Error(MontyException::new(
                        ExcType::PermissionError,
                        Some(format!(
                            "{what}: this interpreter has no access to files, the network or the environment; use the tools it offers"
                        )),
                    )),
                    PrintWriter::Callback(printed),
                )
            }
            RunProgress::ResolveFutures(_) => {
                return Ok(Err((
                    FailureKind::Exception,
                    "the program awaits something that never comes: tool functions are called directly, without `await`".into(),
                )));
            }
        };
    }
}

/// Asks the gateway to run a call and reads its answer.
fn ask(
    call: &monty::FunctionCall,
    input: &mut impl BufRead,
    output: &mut impl Write,
) -> Result<ExtFunctionResult, WorkerError> {
    let mut kwargs = Map::new();
    for (k, v) in &call.kwargs {
        let key = match k {
            MontyObject::String(s) => s.clone(),
            other => other.to_string(),
        };
        kwargs.insert(key, value::to_json(v));
    }
    send(
        output,
        &FromWorker::Call {
            name: call.function_name.clone(),
            args: call.args.iter().map(value::to_json).collect(),
            kwargs,
        },
    )?;
    Ok(match read(input)? {
        ToWorker::Return { value } => ExtFunctionResult::Return(value::to_python(&value)),
        ToWorker::Raise { message } => {
            ExtFunctionResult::Error(MontyException::new(ExcType::RuntimeError, Some(message)))
        }
        ToWorker::Start { .. } => {
            return Err(WorkerError::Message(
                "`start` in the middle of a program".into(),
            ));
        }
    })
}

fn failure(e: &MontyException) -> (FailureKind, String) {
    let kind = match e.exc_type() {
        ExcType::TimeoutError => FailureKind::Timeout,
        ExcType::MemoryError | ExcType::RecursionError => FailureKind::Limit,
        ExcType::SyntaxError => FailureKind::Syntax,
        _ => FailureKind::Exception,
    };
    (kind, e.to_string())
}

fn read(input: &mut impl BufRead) -> Result<ToWorker, WorkerError> {
    let mut line = Vec::new();
    let n = input
        .take(MAX_LINE as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(WorkerError::Closed);
    }
    if n > MAX_LINE {
        return Err(WorkerError::Message(format!(
            "a line longer than {MAX_LINE} bytes"
        )));
    }
    serde_json::from_slice(&line).map_err(|e| WorkerError::Message(e.to_string()))
}

fn send(output: &mut impl Write, message: &FromWorker) -> Result<(), WorkerError> {
    let mut line = serde_json::to_vec(message).map_err(|e| WorkerError::Message(e.to_string()))?;
    line.push(b'\n');
    output.write_all(&line)?;
    output.flush()?;
    Ok(())
}

/// Printed output kept up to a number of bytes (cut on a character
/// boundary), the rest counted.
struct Bounded {
    text: String,
    limit: usize,
    dropped: usize,
}

impl Bounded {
    fn new(limit: usize) -> Bounded {
        Bounded {
            text: String::new(),
            limit,
            dropped: 0,
        }
    }

    fn push(&mut self, s: &str) {
        let room = self.limit.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return;
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&s[..cut]);
        self.dropped = self.dropped.saturating_add(s.len() - cut);
    }

    fn finish(&mut self) -> Printed {
        Printed {
            text: std::mem::take(&mut self.text),
            dropped: self.dropped,
        }
    }
}

impl PrintWriterCallback for Bounded {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.push(&output);
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        let mut buf = [0u8; 4];
        self.push(end.encode_utf8(&mut buf));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> WorkerLimits {
        WorkerLimits {
            time_ms: 2_000,
            max_output: 64,
            max_calls: 3,
            max_recursion: 50,
            memory_bytes: 64 * 1024 * 1024,
        }
    }

    /// Runs `code` (unconfined: the process is the test's) with `replies`
    /// as the gateway's answers; the worker's messages in order.
    fn exchange(code: &str, functions: &[&str], replies: &[ToWorker]) -> Vec<FromWorker> {
        let mut input = Vec::new();
        let start = ToWorker::Start {
            code: code.into(),
            functions: functions.iter().map(|f| (*f).to_owned()).collect(),
            limits: limits(),
        };
        for m in std::iter::once(&start).chain(replies) {
            input.extend(serde_json::to_vec(m).unwrap());
            input.push(b'\n');
        }
        let mut output = Vec::new();
        serve(&mut std::io::Cursor::new(input), &mut output, |_| Ok(())).unwrap();
        output
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn a_program_calls_functions_and_ends_with_its_last_value() {
        let out = exchange(
            "r = get_issues(repo='a/b', state='open')\nprint(len(r))\n[i['n'] for i in r]",
            &["get_issues"],
            &[ToWorker::Return {
                value: json!([{"n": 1}, {"n": 2}]),
            }],
        );
        assert_eq!(
            out[0],
            FromWorker::Call {
                name: "get_issues".into(),
                args: vec![],
                kwargs: serde_json::from_value(json!({"repo": "a/b", "state": "open"})).unwrap(),
            }
        );
        assert_eq!(
            out[1],
            FromWorker::Done {
                value: json!([1, 2]),
                printed: Printed {
                    text: "2\n".into(),
                    dropped: 0
                }
            }
        );
    }

    #[test]
    fn a_failed_call_is_an_exception_the_program_can_catch() {
        let out = exchange(
            "try:\n    f()\nexcept RuntimeError as e:\n    print('caught', e)",
            &["f"],
            &[ToWorker::Raise {
                message: "no such repository".into(),
            }],
        );
        let FromWorker::Done { printed, .. } = &out[1] else {
            panic!("{out:?}")
        };
        assert_eq!(printed.text, "caught no such repository\n");
    }

    #[test]
    fn unknown_names_files_and_the_environment_do_not_exist() {
        for (code, expected) in [
            ("g()", "NameError"),
            ("open('/etc/passwd').read()", "PermissionError"),
            ("import os\nos.getenv('HOME')", "PermissionError"),
            (
                "from pathlib import Path\nPath('/etc').iterdir()",
                "PermissionError",
            ),
            ("import subprocess", "ModuleNotFoundError"),
            ("import socket", "ModuleNotFoundError"),
        ] {
            let out = exchange(code, &["f"], &[]);
            let FromWorker::Failed { message, .. } = &out[0] else {
                panic!("{code}: {out:?}")
            };
            assert!(message.contains(expected), "{code}: {message}");
        }
    }

    #[test]
    fn limits_end_a_program() {
        for (code, expected) in [
            ("while True:\n    pass", "time limit"),
            ("def f(n):\n    return f(n + 1)\nf(0)", "RecursionError"),
            ("'x' * (10 ** 10)", "MemoryError"),
            ("for i in range(10):\n    f()", "more than 3 tool calls"),
        ] {
            let replies = vec![ToWorker::Return { value: json!(1) }; 3];
            let out = exchange(code, &["f"], &replies);
            let Some(FromWorker::Failed { kind, message, .. }) = out.last() else {
                panic!("{code}: {out:?}")
            };
            let limit = if expected == "time limit" {
                FailureKind::Timeout
            } else {
                FailureKind::Limit
            };
            assert_eq!(*kind, limit, "{code}: {message}");
            assert!(message.contains(expected), "{code}: {message}");
        }
    }

    #[test]
    fn printed_output_is_capped_on_a_character_boundary() {
        let out = exchange("print('é' * 100)", &[], &[]);
        let FromWorker::Done { printed, .. } = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(printed.text, "é".repeat(32));
        assert_eq!(printed.dropped, 201 - 64);
    }

    #[test]
    fn syntax_errors_are_told() {
        let out = exchange("def f(:\n  pass", &[], &[]);
        let FromWorker::Failed { kind, message, .. } = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(*kind, FailureKind::Syntax, "{message}");
    }

    #[test]
    fn a_broken_first_message_is_an_error_not_a_panic() {
        let mut output = Vec::new();
        let r = serve(
            &mut std::io::Cursor::new(b"{\"type\":\"return\",\"value\":1}\n".to_vec()),
            &mut output,
            |_| Ok(()),
        );
        assert!(r.is_err());
        let r = serve(
            &mut std::io::Cursor::new(b"not json\n".to_vec()),
            &mut output,
            |_| Ok(()),
        );
        assert!(r.is_err());
    }
}
