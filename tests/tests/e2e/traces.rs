//! OpenTelemetry: a chat request's trace, exported over OTLP/HTTP
//! (protobuf) to a receiver here, parented under the client's
//! `traceparent` and carried on to the model and the tool's backend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;
use serde_json::json;
use toolgate_tests::mock_llm::MockLlm;
use toolgate_tests::{Backend, ConfigDir, Server, user};

use crate::mcp_support;

/// Spans received, with the `service.name` of their resource.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP receiver: every span posted to `/v1/traces`, with the
/// `service.name` of its resource.
struct Receiver {
    port: u16,
    spans: Received,
}

impl Receiver {
    async fn start() -> Receiver {
        let spans: Received = Arc::default();
        let app = Router::new()
            .route(
                "/v1/traces",
                post(|State(spans): State<Received>, body: Bytes| async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    let mut spans = spans.lock().unwrap();
                    for resource in request.resource_spans {
                        let service = resource
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                                Any::StringValue(s) => Some(s.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        for scope in resource.scope_spans {
                            for span in scope.spans {
                                spans.push((service.clone(), span));
                            }
                        }
                    }
                    // An empty ExportTraceServiceResponse.
                    (
                        [("content-type", "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }),
            )
            .with_state(Arc::clone(&spans));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { port, spans }
    }

    /// Waits (at most 30 s) until the spans of `trace` include one per
    /// name in `names`; all spans of that trace.
    async fn trace(&self, trace: &[u8], names: &[&str]) -> Vec<(String, Span)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans: Vec<(String, Span)> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, s)| s.trace_id == trace)
                .cloned()
                .collect();
            if names
                .iter()
                .all(|n| spans.iter().any(|(_, s)| s.name == *n))
            {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "spans of the trace: {:?}; all spans: {:?}",
                spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>(),
                self.spans
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|(_, s)| format!(
                        "{} {} {}",
                        s.name,
                        hex(&s.trace_id),
                        hex(&s.parent_span_id)
                    ))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Any::StringValue(s) => Some(s.clone()),
            Any::IntValue(i) => Some(i.to_string()),
            Any::BoolValue(b) => Some(b.to_string()),
            Any::DoubleValue(d) => Some(d.to_string()),
            _ => None,
        }
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [(String, Span)], name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|(_, s)| s.name == name)
        .map(|(_, s)| s)
        .collect()
}

/// A gateway whose upstream is `model`, exporting traces to `receiver`.
fn traced_gateway(model: &MockLlm, receiver: &Receiver) -> String {
    format!(
        "upstreams: [{{ name: mock, base_url: {} }}]\ntelemetry:\n  otlp: {{ endpoint: \"http://127.0.0.1:{}\" }}\n",
        model.base_url(),
        receiver.port
    )
}

#[tokio::test]
async fn a_chat_request_is_one_trace_under_the_clients_traceparent() {
    let receiver = Receiver::start().await;
    let backend = Backend::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &traced_gateway(&model, &receiver)),
        (
            "tools.d/a.yaml",
            &toolgate_tests::lookup_tool(&backend, "lookup", "Look up."),
        ),
        ("tool-sets/default.yaml", "name: default\ntools: [lookup]\n"),
    ]);
    let s = Server::start(dir.path(), &[("OTEL_BSP_SCHEDULE_DELAY", "100")]).await;

    let trace_id = [
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
        0x36,
    ];
    let client_span = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
    let traceparent = format!("00-{}-{}-01", hex(&trace_id), hex(&client_span));
    let r = reqwest::Client::new()
        .post(s.url("/v1/chat/completions"))
        .header("traceparent", &traceparent)
        .json(&json!({"model": "m", "messages": user("call lookup {\"q\": \"traced\"}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Tool results: [lookup] traced"
    );

    let spans = receiver
        .trace(&trace_id, &["request", "chat m", "execute_tool lookup"])
        .await;
    assert!(spans.iter().all(|(service, _)| service == "toolgate"));
    let request = named(&spans, "request");
    assert_eq!(request.len(), 1);
    let request = request[0];
    assert_eq!(
        request.parent_span_id, client_span,
        "the client's span is the parent"
    );
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(
        attr(request, "http.route").as_deref(),
        Some("/v1/chat/completions")
    );

    // Two model calls (the tool call, then the answer), one tool call, all
    // children of the request.
    let chats = named(&spans, "chat m");
    assert_eq!(chats.len(), 2, "{chats:#?}");
    for chat in &chats {
        assert_eq!(chat.parent_span_id, request.span_id);
        assert_eq!(chat.kind, SpanKind::Client as i32);
        assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(attr(chat, "gen_ai.request.model").as_deref(), Some("m"));
        assert_eq!(attr(chat, "server.address").as_deref(), Some("127.0.0.1"));
        assert_eq!(attr(chat, "toolgate.upstream").as_deref(), Some("mock"));
        assert!(
            attr(chat, "gen_ai.usage.input_tokens").is_some(),
            "{chat:#?}"
        );
    }
    let tool = named(&spans, "execute_tool lookup")[0];
    assert_eq!(tool.parent_span_id, request.span_id);
    assert_eq!(
        attr(tool, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(attr(tool, "gen_ai.tool.name").as_deref(), Some("lookup"));

    // The trace goes on to the model and to the tool's backend, under the
    // span that called each.
    let sent = model.request_headers();
    let to_model = sent[0].get("traceparent").unwrap();
    let chat_ids: Vec<String> = chats.iter().map(|c| hex(&c.span_id)).collect();
    assert!(
        to_model.starts_with(&format!("00-{}-", hex(&trace_id))),
        "{to_model}"
    );
    assert!(
        chat_ids.iter().any(|id| to_model.contains(id.as_str())),
        "{to_model}"
    );
    let to_backend = backend.requests()[0].headers["traceparent"].clone();
    assert_eq!(
        to_backend,
        format!("00-{}-{}-01", hex(&trace_id), hex(&tool.span_id))
    );

    // A streamed request: its tool call belongs to its trace too.
    let trace_id = [7u8; 16];
    let traceparent = format!("00-{}-{}-01", hex(&trace_id), hex(&client_span));
    let (status, _events, done) = {
        let r = reqwest::Client::new()
            .post(s.url("/v1/chat/completions"))
            .header("traceparent", &traceparent)
            .json(&json!({"model": "m", "stream": true, "messages": user("call lookup {\"q\": \"streamed\"}")}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, text.clone(), text.contains("[DONE]"))
    };
    assert_eq!((status, done), (200, true));
    let spans = receiver
        .trace(&trace_id, &["request", "chat m", "execute_tool lookup"])
        .await;
    let request = named(&spans, "request")[0];
    assert_eq!(
        named(&spans, "execute_tool lookup")[0].parent_span_id,
        request.span_id
    );
}

/// An MCP server's tool call carries the trace in its `_meta` (SEP-414),
/// under the tool's span.
#[tokio::test]
async fn an_mcp_tool_call_carries_the_trace_in_its_meta() {
    let server = require!(mcp_support::python_stdio_yaml("py", "py_", ""));
    let receiver = Receiver::start().await;
    let model = MockLlm::start().await;
    let dir = ConfigDir::new(&[
        ("toolgate.yaml", &traced_gateway(&model, &receiver)),
        ("tools.d/mcp.yaml", &format!("mcp_servers:\n{server}")),
        (
            "tool-sets/default.yaml",
            "name: default\ntools: [py_meta]\n",
        ),
    ]);
    let s = Server::start(dir.path(), &[("OTEL_BSP_SCHEDULE_DELAY", "100")]).await;
    let trace_id = [9u8; 16];
    let traceparent = format!("00-{}-{}-01", hex(&trace_id), hex(&[1u8; 8]));
    let r = reqwest::Client::new()
        .post(s.url("/v1/chat/completions"))
        .header("traceparent", &traceparent)
        .json(&json!({"model": "m", "messages": user("call py_meta {\"name\": \"traceparent\"}")}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    let spans = receiver.trace(&trace_id, &["execute_tool py_meta"]).await;
    let tool = named(&spans, "execute_tool py_meta")[0];
    assert_eq!(
        body["choices"][0]["message"]["content"],
        format!(
            "Tool results: [py_meta] 00-{}-{}-01",
            hex(&trace_id),
            hex(&tool.span_id)
        ),
        "{body}"
    );
}
