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
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args
        .next()
        .expect("usage: bench-hyper-proxy LISTEN_ADDR UPSTREAM_URL");
    let upstream: hyper::Uri = args
        .next()
        .expect("usage: bench-hyper-proxy LISTEN_ADDR UPSTREAM_URL")
        .parse()
        .expect("UPSTREAM_URL is a URL");
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(http);
    let listener = tokio::net::TcpListener::bind(&listen).await.unwrap();
    let lean = std::env::var_os("BENCH_HYPER_LEAN").is_some_and(|v| v == "1");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let client = client.clone();
        let upstream = upstream.clone();
        if lean {
            tokio::spawn(async move {
                let slot = Arc::new(tokio::sync::Mutex::new(None));
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    forward_lean(Arc::clone(&slot), upstream.clone(), request)
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
            continue;
        }
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                forward(client.clone(), upstream.clone(), request)
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
