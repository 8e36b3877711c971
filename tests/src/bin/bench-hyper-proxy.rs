//! The floor of the gateway's HTTP stack, for `tests/bench/proxy.sh`: the
//! same hyper server (HTTP/1 and HTTP/2, `hyper-util`'s auto builder) and
//! the same pooled `hyper-util` client the gateway proxies with, and
//! nothing between them — no router, layers, key check, metrics or
//! request parsing. Every request's body is read whole and sent to the
//! upstream URL as a POST with its content type; the answer is passed back
//! as it streams.
//!
//!     bench-hyper-proxy LISTEN_ADDR UPSTREAM_URL
//!
//! Connections are served the way the gateway serves them: one
//! single-threaded runtime per core, each accepted connection handed to
//! the next in turn, and each thread with a pooled client of its own. With
//! `BENCH_HYPER_SHARED=1` they are served on tokio's work-stealing runtime
//! with one client instead (the gateway's shape before 2026-11-28).
//!
//! With `BENCH_HYPER_LEAN=1` it is leaner still, to measure what a
//! leaner HTTP layer could save: an HTTP/1-only server, and each client
//! connection with an upstream connection of its own (hyper's
//! connection-level client: no pool, no task per request).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// `request` as a POST to `uri`: its body read whole, its content type kept.
async fn outgoing(request: Request<Incoming>, uri: &str) -> Result<Request<Full<Bytes>>, Error> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let mut out = Request::post(uri).body(Full::new(body))?;
    if let Some(ct) = parts.headers.get(CONTENT_TYPE) {
        out.headers_mut().insert(CONTENT_TYPE, ct.clone());
    }
    Ok(out)
}

/// One request: sent on, the answer passed back.
async fn forward(
    client: Client<HttpConnector, Full<Bytes>>,
    upstream: hyper::Uri,
    request: Request<Incoming>,
) -> Result<Response<Incoming>, Error> {
    let out = outgoing(request, &upstream.to_string()).await?;
    Ok(client.request(out).await?)
}

/// One request of a lean connection, on the connection's own upstream
/// connection (made on first use, and again when it closed).
async fn forward_lean(
    slot: Arc<tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>>,
    upstream: hyper::Uri,
    request: Request<Incoming>,
) -> Result<Response<Incoming>, Error> {
    let authority = upstream
        .authority()
        .map(ToString::to_string)
        .unwrap_or_default();
    let mut out = outgoing(request, upstream.path()).await?;
    out.headers_mut().insert(HOST, authority.parse()?);
    let mut slot = slot.lock().await;
    if slot.as_ref().is_none_or(SendRequest::is_closed) {
        let tcp = tokio::net::TcpStream::connect(&authority).await?;
        tcp.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
        tokio::spawn(conn);
        *slot = Some(sender);
    }
    let sender = slot.as_mut().ok_or("no upstream connection")?;
    sender.ready().await?;
    Ok(sender.send_request(out).await?)
}

#[global_allocator]
static GLOBAL: toolgate_alloc::Mimalloc = toolgate_alloc::Mimalloc;

type Pooled = Client<HttpConnector, Full<Bytes>>;

fn client() -> Pooled {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(http)
}

thread_local! {
    /// The pooled client of a connection thread.
    static CLIENT: Pooled = client();
}

/// Serves one client connection until it ends.
async fn serve(stream: tokio::net::TcpStream, client: Pooled, upstream: hyper::Uri, lean: bool) {
    let _ = stream.set_nodelay(true);
    if lean {
        let slot = Arc::new(tokio::sync::Mutex::new(None));
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            forward_lean(Arc::clone(&slot), upstream.clone(), request)
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
        return;
    }
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        forward(client.clone(), upstream.clone(), request)
    });
    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// One single-threaded runtime per core, each on a thread of its own.
fn connection_threads() -> Vec<tokio::runtime::Handle> {
    let n = std::thread::available_parallelism().map_or(1, usize::from);
    (0..n)
        .map(|_| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let handle = runtime.handle().clone();
            std::thread::spawn(move || runtime.block_on(std::future::pending::<()>()));
            handle
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args
        .next()
        .expect("usage: bench-hyper-proxy LISTEN_ADDR UPSTREAM_URL");
    let upstream: hyper::Uri = args
        .next()
        .expect("usage: bench-hyper-proxy LISTEN_ADDR UPSTREAM_URL")
        .parse()
        .expect("UPSTREAM_URL is a URL");
    let lean = std::env::var_os("BENCH_HYPER_LEAN").is_some_and(|v| v == "1");
    let shared = std::env::var_os("BENCH_HYPER_SHARED").is_some_and(|v| v == "1");
    if shared {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let client = client();
            let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(stream, client.clone(), upstream.clone(), lean));
            }
        });
        return;
    }
    let threads = connection_threads();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
        for next in 0.. {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let Ok(stream) = stream.into_std() else {
                continue;
            };
            let upstream = upstream.clone();
            threads[next % threads.len()].spawn(async move {
                let Ok(stream) = tokio::net::TcpStream::from_std(stream) else {
                    return;
                };
                let client = CLIENT.with(Pooled::clone);
                serve(stream, client, upstream, lean).await;
            });
        }
    });
}
