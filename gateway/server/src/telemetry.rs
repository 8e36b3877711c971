//! What the process reports: logs on stderr (text, or one JSON object per
//! line) and, when configured, traces exported with OpenTelemetry (OTLP
//! over HTTP, protobuf or JSON) to a collector.
//!
//! Traces are configured by `telemetry.otlp` in `toolgate.yaml` (read once
//! at start, before the full load) or by the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! variables. The spans exported are the gateway's own at `info`: the
//! request (a child of the client's `traceparent`), each model call
//! (`gen_ai.operation.name = chat`) and each tool call (`execute_tool`),
//! whatever the log level.

use std::path::Path;
use std::time::Duration;

use clap::ValueEnum;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_subscriber::filter::{FilterExt, LevelFilter, Targets, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use toolgate_config::format::{GatewayFile, OtlpDecl, OtlpProtocol};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours on a terminal).
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, fields, spans).
    Json,
}

/// The trace pipeline, flushed by [`Telemetry::shutdown`].
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered (bounded by the exporter's timeout).
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!("exporting the last traces failed: {e}");
        }
    }
}

/// The `telemetry.otlp` settings of the folder's `toolgate.yaml`, or
/// defaults when only the standard variables name a collector; `None`
/// when traces are not exported. (The full load, later, reports whatever
/// is wrong with the file.)
pub fn otlp_settings(dir: &Path) -> Option<OtlpDecl> {
    let file = std::fs::read_to_string(dir.join("toolgate.yaml")).ok();
    let declared = file
        .and_then(|text| {
            toolgate_config::load::parse_text::<GatewayFile>(
                "toolgate.yaml",
                &text,
                &mut Vec::new(),
            )
        })
        .and_then(|g| g.value.telemetry.otlp);
    declared.or_else(|| {
        [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
        .then(|| OtlpDecl {
            endpoint: None,
            protocol: OtlpProtocol::default(),
            service_name: None,
            sample_ratio: 1.0,
        })
    })
}

/// Installs the subscriber: logs filtered by `TOOLGATE_LOG` (default
/// `info,rmcp=warn`) in `format`, and the gateway's spans exported per
/// `otlp`. Export runs on `runtime`.
pub fn init(
    format: LogFormat,
    otlp: Option<&OtlpDecl>,
    runtime: tokio::runtime::Handle,
) -> Telemetry {
    let filter = EnvFilter::try_from_env("TOOLGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(
                std::io::IsTerminal::is_terminal(&std::io::stderr())
                    && std::env::var_os("NO_COLOR").is_none(),
            )
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .boxed(),
    }
    .with_filter(filter);
    let (provider, error) = match otlp.map(|decl| provider(decl, runtime)) {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("toolgate"))
            // Spans only: log events (which may quote an upstream's error
            // text) stay in the logs.
            .with_filter(
                Targets::new()
                    .with_target("toolgate_engine", LevelFilter::INFO)
                    .with_target("toolgate_server", LevelFilter::INFO)
                    .and(filter_fn(|meta| meta.is_span())),
            )
    });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init();
    if let Some(e) = error {
        tracing::warn!("traces are not exported: {e}");
    }
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        toolgate_engine::support::telemetry::set_propagator(inject);
        tracing::info!("exporting traces over OTLP");
    }
    Telemetry { provider }
}

fn provider(decl: &OtlpDecl, runtime: tokio::runtime::Handle) -> Result<SdkTracerProvider, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| e.to_string())?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Export { client, runtime })
        .with_protocol(match decl.protocol {
            OtlpProtocol::HttpProtobuf => Protocol::HttpBinary,
            OtlpProtocol::HttpJson => Protocol::HttpJson,
        })
        .with_timeout(Duration::from_secs(10));
    if let Some(base) = &decl.endpoint {
        exporter = exporter.with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')));
    }
    let exporter = exporter.build().map_err(|e| e.to_string())?;
    let service = decl
        .service_name
        .clone()
        .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
        .unwrap_or_else(|| "toolgate".into());
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            decl.sample_ratio,
        ))))
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .build())
}

/// The exporter's HTTP client: the batch processor runs on a thread of its
/// own, so each export is handed to the gateway's runtime and awaited.
#[derive(Debug)]
struct Export {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Export {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        let send = async move {
            let (parts, body) = request.into_parts();
            let response = client
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let status = response.status();
            // The collector's answer is a small status message.
            let body = response.bytes().await?;
            let mut out = http::Response::new(body);
            *out.status_mut() = status;
            Ok::<_, reqwest::Error>(out)
        };
        Ok(self.runtime.spawn(send).await??)
    }
}

/// Makes `span` a child of the trace a client's `traceparent` names, if
/// traces are exported and it sent a valid one.
pub fn adopt(span: &tracing::Span, headers: &http::HeaderMap) {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if !toolgate_engine::support::telemetry::enabled() || !headers.contains_key("traceparent") {
        return;
    }
    let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Writes the current span's trace context into `headers` (installed in
/// the engine for its own requests).
fn inject(headers: &mut http::HeaderMap) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeadersMut(headers));
    });
}

struct Headers<'a>(&'a http::HeaderMap);

impl opentelemetry::propagation::Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut http::HeaderMap);

impl opentelemetry::propagation::Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
