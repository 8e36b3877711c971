//! A spawned server's transport: newline-delimited JSON-RPC on the child's
//! stdin and stdout, as rmcp's `TokioChildProcess` speaks it (the same
//! bounded line reading, the same writer, the same shutdown), with one
//! shortcut on the way in.
//!
//! rmcp reads a message by trying its shapes in turn: the message's kind,
//! then, for an answer, `ServerResult`'s variants, each a failed attempt on
//! a buffered copy that builds an error before the next is tried. A
//! `tools/call` answer, the message a gateway reads most, is the sixteenth.
//! Here an answer to a `tools/call` this transport sent, when its result
//! holds nothing but `CallToolResult`'s fields (`content` among them), is
//! read as that directly;
//! every other line goes through rmcp's own codec, as before. The property
//! test `tests::an_answer_to_a_call_is_read_as_rmcp_reads_it` holds the two
//! readings equal.

use std::collections::HashSet;
use std::io;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures::SinkExt;
use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, ClientNotification, ClientRequest, ErrorData, JsonRpcMessage, JsonRpcResponse,
    JsonRpcVersion2_0, RequestId, ServerResult,
};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::{
    DEFAULT_MAX_LINE_LENGTH, JsonRpcMessageCodec, JsonRpcMessageCodecError,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::Mutex;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedWrite};

/// How long a closing server has to exit, after its stdin is closed and
/// again after SIGTERM, before it is killed (rmcp's figure).
const EXIT_WAIT: Duration = Duration::from_secs(3);
/// The line buffer's capacity kept between messages: a server's one large
/// answer does not hold its size for the session's life.
const KEPT_LINE_CAPACITY: usize = 64 * 1024;
/// The most `tools/call` requests remembered at once; answers to more are
/// read the general way.
const MAX_CALLS: usize = 1024;

type Writer = FramedWrite<ChildStdin, JsonRpcMessageCodec<TxJsonRpcMessage<RoleClient>>>;

/// The transport of a spawned server. Dropped, it kills the server (its
/// whole process group).
pub(crate) struct ChildStdio {
    child: Option<Box<dyn ChildWrapper>>,
    read: BufReader<ChildStdout>,
    /// The line being read: kept across a cancelled `receive` (rmcp's
    /// service loop polls it in a `select!`), cleared once it is read.
    line: Vec<u8>,
    /// The rest of an oversized line is being skipped.
    discarding: bool,
    /// Shared with the futures `send` returns (they outlive the borrow).
    write: Arc<Mutex<Option<Writer>>>,
    /// An answer owed to a well-formed message of no known shape.
    refusal: Option<Refusal>,
    /// The ids of the `tools/call` requests sent and not yet answered.
    calls: HashSet<RequestId>,
}

/// The "Invalid Request" answer owed, in its two steps (each survives a
/// cancelled `receive`).
enum Refusal {
    Queued,
    Written,
}

/// Spawns `cmd` with its stdin and stdout piped to the transport and its
/// stderr piped to the caller.
pub(crate) fn spawn(mut cmd: CommandWrap) -> io::Result<(ChildStdio, Option<ChildStderr>)> {
    cmd.command_mut()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let inner = child.inner_mut();
    let (Some(stdin), Some(stdout)) = (inner.stdin().take(), inner.stdout().take()) else {
        return Err(io::Error::other(
            "the server's stdin or stdout is not a pipe",
        ));
    };
    let stderr = inner.stderr().take();
    let write = FramedWrite::new(stdin, JsonRpcMessageCodec::default());
    Ok((
        ChildStdio {
            child: Some(child),
            read: BufReader::new(stdout),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(Mutex::new(Some(write))),
            refusal: None,
            calls: HashSet::new(),
        },
        stderr,
    ))
}

impl Drop for ChildStdio {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // `kill` waits for the exit, so no zombie stays behind; outside a
        // runtime (the gateway is ending) the signal alone is sent.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(e) = Box::into_pin(child.kill()).await {
                        tracing::warn!("cannot kill an MCP server: {e}");
                    }
                });
            }
            Err(_) => {
                if let Err(e) = child.start_kill() {
                    tracing::warn!("cannot kill an MCP server: {e}");
                }
            }
        }
    }
}

/// What one bounded read of a line gave.
enum LineRead {
    Line,
    Oversized,
    Eof,
    Failed(io::Error),
}

impl ChildStdio {
    /// Reads one `\n`-terminated line into `self.line`, never letting it
    /// grow past rmcp's `DEFAULT_MAX_LINE_LENGTH` (16 MiB). Cancel-safe:
    /// bytes are taken from the reader and appended with no await between.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let available = match self.read.fill_buf().await {
                Ok(available) => available,
                Err(e) => return LineRead::Failed(e),
            };
            if available.is_empty() {
                return LineRead::Eof;
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            let mut done = None;
            if self.discarding {
                self.discarding = newline.is_none();
            } else if self.line.len().saturating_add(take) > DEFAULT_MAX_LINE_LENGTH {
                self.clear_line();
                self.discarding = newline.is_none();
                done = Some(LineRead::Oversized);
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    done = Some(LineRead::Line);
                }
            }
            self.read.consume(take);
            if let Some(done) = done {
                return done;
            }
        }
    }

    /// Empties the line buffer; one grown past `KEPT_LINE_CAPACITY` by a
    /// large message is given back.
    fn clear_line(&mut self) {
        if self.line.capacity() > KEPT_LINE_CAPACITY {
            self.line = Vec::new();
        } else {
            self.line.clear();
        }
    }

    /// Notes the `tools/call` requests going out, and forgets those the
    /// gateway cancels (the server need not answer them).
    fn sent(&mut self, item: &TxJsonRpcMessage<RoleClient>) {
        match item {
            JsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::CallToolRequest(_))
                    && self.calls.len() < MAX_CALLS =>
            {
                self.calls.insert(r.id.clone());
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.calls.remove(id);
                }
            }
            _ => {}
        }
    }

    /// Forgets the call `message` answers.
    fn answered(&mut self, message: &RxJsonRpcMessage<RoleClient>) {
        let id = match message {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if let Some(id) = id {
            self.calls.remove(id);
        }
    }

    /// Writes the "Invalid Request" answer owed; `None` when the pipe is
    /// closed.
    async fn refuse(&mut self) -> Option<()> {
        let Some(state) = &mut self.refusal else {
            return Some(());
        };
        let mut write = self.write.lock().await;
        let write = write.as_mut()?;
        if matches!(state, Refusal::Queued) {
            let answer = TxJsonRpcMessage::<RoleClient>::error(
                ErrorData::invalid_request("Invalid request", None),
                None,
            );
            write.feed(answer).await.ok()?;
            *state = Refusal::Written;
        }
        write.flush().await.ok()?;
        self.refusal = None;
        Some(())
    }

    /// Closes the server's stdin, gives it `EXIT_WAIT` to exit, then
    /// SIGTERM and as long again, then kills it (the MCP stdio shutdown).
    async fn shut_down(&mut self) -> io::Result<()> {
        drop(self.write.lock().await.take());
        // The child stays here until it is gone: a cancelled shutdown
        // leaves it to `drop`, which kills it.
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        if tokio::time::timeout(EXIT_WAIT, child.wait()).await.is_ok() {
            self.child = None;
            return Ok(());
        }
        #[cfg(unix)]
        match child.signal(nix::sys::signal::Signal::SIGTERM as i32) {
            Ok(()) => {
                if tokio::time::timeout(EXIT_WAIT, child.wait()).await.is_ok() {
                    self.child = None;
                    return Ok(());
                }
            }
            Err(e) => tracing::warn!("cannot send SIGTERM to an MCP server: {e}"),
        }
        let killed = Box::into_pin(child.kill()).await;
        self.child = None;
        killed
    }
}

impl rmcp::transport::Transport<RoleClient> for ChildStdio {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.sent(&item);
        let write = Arc::clone(&self.write);
        async move {
            match write.lock().await.as_mut() {
                Some(write) => write.send(item).await.map_err(io::Error::from),
                None => Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the MCP server's stdin is closed",
                )),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            self.refuse().await?;
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::Oversized => {
                    tracing::error!(
                        "an MCP server sent a message longer than {DEFAULT_MAX_LINE_LENGTH} bytes; it was dropped"
                    );
                    continue;
                }
                LineRead::Eof => return None,
                LineRead::Failed(e) => {
                    tracing::error!("cannot read from an MCP server: {e}");
                    return None;
                }
            }
            let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                self.clear_line();
                continue;
            }
            let read = match answer_to_call(line, &self.calls) {
                Some(message) => Ok(Some(message)),
                None => read_as_rmcp(line),
            };
            self.clear_line();
            match read {
                Ok(Some(message)) => {
                    self.answered(&message);
                    return Some(message);
                }
                // A notification rmcp ignores (not MCP's).
                Ok(None) => {}
                Err(JsonRpcMessageCodecError::Serde(e)) => match e.classify() {
                    // Not JSON: nothing to answer (answering could start a
                    // storm with a peer that echoes), as rmcp does.
                    serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                        tracing::debug!("an MCP server sent a line that is not JSON: {e}");
                    }
                    serde_json::error::Category::Data | serde_json::error::Category::Io => {
                        tracing::debug!("an MCP server sent a message of no known shape: {e}");
                        self.refusal = Some(Refusal::Queued);
                    }
                },
                Err(e) => {
                    tracing::error!("cannot read from an MCP server: {e}");
                    return None;
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.shut_down().await
    }
}

/// A line as rmcp reads it: its codec, with its handling of a byte-order
/// mark and of notifications that are not MCP's (`Ok(None)`).
fn read_as_rmcp(
    line: &[u8],
) -> Result<Option<RxJsonRpcMessage<RoleClient>>, JsonRpcMessageCodecError> {
    JsonRpcMessageCodec::<RxJsonRpcMessage<RoleClient>>::default()
        .decode_eof(&mut BytesMut::from(line))
}

/// An answer, as far as telling a `tools/call` answer apart needs: which
/// of the keys rmcp looks at to tell a message's kind are there.
#[derive(Deserialize)]
struct Answer<'a> {
    jsonrpc: &'a str,
    id: RequestId,
    #[serde(borrow)]
    result: &'a RawValue,
    #[serde(default, deserialize_with = "present")]
    method: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// The keys of a `CallToolResult`, `content` among them, and no other: a
/// result with another key (which another result may have) is read the
/// general way.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallToolKeys {
    #[serde(default, deserialize_with = "present")]
    content: bool,
    #[serde(rename = "resultType", default)]
    _result_type: Option<serde::de::IgnoredAny>,
    #[serde(rename = "structuredContent", default)]
    _structured_content: Option<serde::de::IgnoredAny>,
    #[serde(rename = "isError", default)]
    _is_error: Option<serde::de::IgnoredAny>,
    #[serde(rename = "_meta", default)]
    _meta: Option<serde::de::IgnoredAny>,
}

/// `line` read directly, when it answers one of `calls` with a result of
/// `CallToolResult`'s keys only (`content` among them); `None` otherwise.
fn answer_to_call(line: &[u8], calls: &HashSet<RequestId>) -> Option<RxJsonRpcMessage<RoleClient>> {
    if calls.is_empty() {
        return None;
    }
    let answer: Answer = serde_json::from_slice(line).ok()?;
    if answer.jsonrpc != "2.0" || answer.method || answer.error || !calls.contains(&answer.id) {
        return None;
    }
    let result = answer.result.get();
    // The keys, checked without building anything.
    if !serde_json::from_str::<CallToolKeys>(result).ok()?.content {
        return None;
    }
    let result: CallToolResult = serde_json::from_str(result).ok()?;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id: answer.id,
        result: ServerResult::CallToolResult(result),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn calls(ids: &[i64]) -> HashSet<RequestId> {
        ids.iter().map(|&i| RequestId::Number(i)).collect()
    }

    /// How rmcp reads `line`, as its variant and fields.
    fn rmcp_reads(line: &str) -> String {
        match read_as_rmcp(line.as_bytes()) {
            Ok(Some(message)) => format!("{message:?}"),
            other => format!("not a message: {other:?}"),
        }
    }

    #[test]
    fn servers_answers_to_calls_are_read_directly_as_rmcp_reads_them() {
        let answers = [
            // server-everything's echo, as it writes it
            r#"{"result":{"content":[{"type":"text","text":"Echo: hi"}]},"jsonrpc":"2.0","id":2}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"text","text":"a picture"}],"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"{\"n\":1}"}],"structuredContent":{"n":1},"_meta":{"k":"v"},"resultType":"complete"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"resource_link","uri":"file:///a","name":"a"}],"isError":true},"extra":1}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}\r",
        ];
        for line in answers {
            let line = line.trim_end_matches('\r');
            let read = answer_to_call(line.as_bytes(), &calls(&[2]))
                .unwrap_or_else(|| panic!("not read directly: {line}"));
            assert!(
                matches!(&read, JsonRpcMessage::Response(r) if matches!(r.result, ServerResult::CallToolResult(_))),
                "{read:?}"
            );
            assert_eq!(format!("{read:?}"), rmcp_reads(line), "{line}");
        }
    }

    #[test]
    fn other_lines_are_left_to_rmcp() {
        let ours = calls(&[2]);
        for line in [
            // not an answer to a call this transport sent
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#,
            // a result with a key no call result has, or without `content`
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[],"task":{"taskId":"t"}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"isError":true}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":null}}"#,
            // an input request (2026-07-28), an error, a request, a stray key
            r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"input_required","inputRequests":{}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"ping","result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]},"error":null}"#,
            // not JSON-RPC 2.0, a byte-order mark, not JSON
            r#"{"jsonrpc":"1.0","id":2,"result":{"content":[]}}"#,
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"content\":[]}}",
            "{\"jsonrpc\"",
        ] {
            assert!(answer_to_call(line.as_bytes(), &ours).is_none(), "{line}");
        }
        assert!(
            answer_to_call(
                br#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
                &calls(&[])
            )
            .is_none()
        );
    }

    /// A server (a shell script) that reads the gateway's call, answers it
    /// in a line too long to keep, sends a line that is not JSON, a message of no
    /// known shape, reads what the gateway answers that, and answers the
    /// call with it; then exits when its stdin closes.
    #[tokio::test]
    async fn a_server_s_lines_are_bounded_refused_and_answered_over_its_pipes() {
        use rmcp::model::{CallToolRequest, CallToolRequestParams};
        use rmcp::transport::Transport;
        let script = r#"
            read -r call
            printf '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"'
            head -c 17000000 /dev/zero | tr '\0' 'a'
            echo '"}]}}'
            echo 'not json'
            echo '{"jsonrpc":"2.0","shape":"none"}'
            read -r refusal
            text=$(printf '%s' "$refusal" | sed 's/\\/\\\\/g; s/"/\\"/g')
            printf '{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"%s"}]}}\n' "$text"
            cat >/dev/null
        "#;
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(script).kill_on_drop(true);
        let (mut transport, _stderr) = spawn(CommandWrap::from(cmd)).unwrap();
        let call = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new("echo"),
        ));
        transport
            .send(JsonRpcMessage::request(call, RequestId::Number(7)))
            .await
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(30), transport.receive())
            .await
            .expect("an answer within 30 s")
            .expect("an answer");
        let JsonRpcMessage::Response(JsonRpcResponse {
            id,
            result: ServerResult::CallToolResult(result),
            ..
        }) = answer
        else {
            panic!("not a call's result: {answer:?}");
        };
        assert_eq!(id, RequestId::Number(7));
        let text = serde_json::to_string(&result.content).unwrap();
        // The server got rmcp's "Invalid Request" for the shapeless message.
        assert!(
            text.contains("-32600") && text.contains("Invalid request"),
            "{text}"
        );
        assert!(transport.calls.is_empty(), "the answered call is forgotten");
        assert!(
            transport.line.capacity() <= KEPT_LINE_CAPACITY,
            "the large line's buffer is given back"
        );
        // Closing its stdin ends it within the first wait.
        let started = std::time::Instant::now();
        transport.close().await.unwrap();
        assert!(transport.child.is_none() && started.elapsed() < EXIT_WAIT);
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(|b| json!(b)),
            any::<i64>().prop_map(|n| json!(n)),
            prop::sample::select(vec!["text", "image", "complete", "task", "", "a"])
                .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The keys of every result rmcp knows, and a few more.
    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "content",
            "structuredContent",
            "isError",
            "_meta",
            "resultType",
            "type",
            "text",
            "data",
            "mimeType",
            "uri",
            "name",
            "annotations",
            "tools",
            "contents",
            "messages",
            "prompts",
            "resources",
            "resourceTemplates",
            "completion",
            "values",
            "task",
            "taskId",
            "status",
            "action",
            "inputRequests",
            "requestState",
            "nextCursor",
            "protocolVersion",
            "capabilities",
            "serverInfo",
            "supportedVersions",
            "skills",
            "ttlMs",
            "other",
        ])
        .prop_map(str::to_owned)
    }

    /// A content block: a well-formed one, or any value.
    fn block() -> impl Strategy<Value = Value> {
        prop_oneof![
            ".{0,8}".prop_map(|t| json!({"type": "text", "text": t})),
            Just(json!({"type": "image", "data": "AA==", "mimeType": "image/png"})),
            Just(json!({"type": "resource_link", "uri": "file:///a", "name": "a"})),
            json_value(),
        ]
    }

    /// A result: mostly a call's keys, sometimes with others.
    fn result() -> impl Strategy<Value = Value> {
        (
            prop::option::of(prop::collection::vec(block(), 0..3)),
            prop::option::of(json_value()),
            prop::option::of(prop_oneof![
                any::<bool>().prop_map(Value::Bool),
                json_value()
            ]),
            prop::option::of(json_value()),
            prop::option::of(prop_oneof![
                Just(json!("complete")),
                Just(json!("input_required")),
                Just(json!("task")),
                json_value()
            ]),
            prop::collection::btree_map(key(), json_value(), 0..2),
        )
            .prop_map(
                |(content, structured, is_error, meta, result_type, others)| {
                    let mut result = serde_json::Map::new();
                    if let Some(content) = content {
                        result.insert("content".into(), Value::Array(content));
                    }
                    for (key, value) in [
                        ("structuredContent", structured),
                        ("isError", is_error),
                        ("_meta", meta),
                        ("resultType", result_type),
                    ] {
                        if let Some(value) = value {
                            result.insert(key.into(), value);
                        }
                    }
                    result.extend(others);
                    Value::Object(result)
                },
            )
    }

    proptest! {
        /// Whatever a server answers a call, the direct reading, when it
        /// takes the answer, is rmcp's reading of it.
        #[test]
        fn an_answer_to_a_call_is_read_as_rmcp_reads_it(
            result in result(),
            id in 0i64..3,
            string_id in any::<bool>(),
        ) {
            let id = if string_id { json!(id.to_string()) } else { json!(id) };
            let line = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
            let ours: HashSet<RequestId> =
                [RequestId::Number(1), RequestId::String("1".into())].into();
            if let Some(read) = answer_to_call(line.as_bytes(), &ours) {
                prop_assert_eq!(format!("{read:?}"), rmcp_reads(&line));
            }
        }
    }
}
