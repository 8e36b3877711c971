//! The connections of a cleartext (`http://`) upstream: HTTP/1.1
//! keep-alive connections made with hyper's connection-level client and
//! kept in a stack of idle ones.
//!
//! A connection is taken for one exchange and given back by its answer's
//! body once that body has been read to its end ([`Lease::release`], called
//! by [`super::Bounded`]): no pool checkout future and no task per request
//! to watch a connection become idle again, which is what hyper-util's
//! pooled client spends on every HTTP/1 request. A body dropped before its
//! end does not give its connection back (it closes). Each connection
//! runs in a task of its own for as long as it lives.
//!
//! Bounds: at most [`MAX_IDLE`] idle connections are kept (one more is
//! closed on its return), and an idle connection older than
//! [`IDLE_TIMEOUT`] is closed when the pool is next used (or sooner, when
//! the upstream closes it).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::client::legacy::connect::HttpConnector;

/// Idle connections kept at most.
pub const MAX_IDLE: usize = 1024;
/// An idle connection older than this is closed rather than used.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

type Sender = SendRequest<Full<Bytes>>;

/// Why an exchange failed before its answer's head arrived.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{0}")]
    Connect(Box<dyn std::error::Error + Send + Sync>),
    #[error("{0}")]
    Http(#[from] hyper::Error),
}

/// The idle connections of one upstream host.
#[derive(Debug)]
pub struct Pool {
    connector: HttpConnector,
    /// `http://host:port`, what the connector connects to.
    target: Uri,
    /// The `Host` header of every request.
    host: HeaderValue,
    idle: Mutex<VecDeque<Idle>>,
}

#[derive(Debug)]
struct Idle {
    sender: Sender,
    since: Instant,
}

/// A connection taken for one exchange, given back with
/// [`release`](Lease::release) once its answer was read to the end.
#[derive(Debug)]
pub struct Lease {
    sender: Sender,
    pool: Arc<Pool>,
}

impl Lease {
    /// The connection goes back to the pool, unless the pool is full.
    pub fn release(self) {
        self.pool.put(self.sender);
    }
}

impl Pool {
    /// A pool of connections to `target`'s host, made by `connector`.
    pub fn new(connector: HttpConnector, target: &Uri) -> Result<Pool, String> {
        let authority = target
            .authority()
            .ok_or_else(|| format!("`{target}` has no host"))?;
        let host = HeaderValue::from_str(authority.as_str()).map_err(|e| e.to_string())?;
        let target = Uri::builder()
            .scheme("http")
            .authority(authority.clone())
            .path_and_query("/")
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Pool {
            connector,
            target,
            host,
            idle: Mutex::new(VecDeque::new()),
        })
    }

    /// Sends `req` (its URI absolute, on this pool's host) on an idle
    /// connection, or on a new one. A request an idle connection could not
    /// take because it had just closed is sent on the next one: it was not
    /// written, so it cannot run twice.
    pub async fn send(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Lease), PoolError> {
        // HTTP/1 wants the origin form and a `Host` header.
        let origin = req
            .uri()
            .path_and_query()
            .cloned()
            .map_or_else(|| Uri::from_static("/"), Uri::from);
        *req.uri_mut() = origin;
        req.headers_mut().insert(HOST, self.host.clone());
        loop {
            let (mut sender, reused) = match self.take() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            if let Err(e) = sender.ready().await {
                if reused {
                    continue;
                }
                return Err(e.into());
            }
            match sender.try_send_request(req).await {
                Ok(response) => {
                    let lease = Lease {
                        sender,
                        pool: Arc::clone(self),
                    };
                    return Ok((response, lease));
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => req = unsent,
                    _ => return Err(e.into_error().into()),
                },
            }
        }
    }

    /// The most recently used idle connection still open, closing those
    /// idle for too long.
    fn take(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        expire(&mut idle);
        while let Some(Idle { sender, .. }) = idle.pop_back() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        expire(&mut idle);
        if idle.len() < MAX_IDLE {
            idle.push_back(Idle {
                sender,
                since: Instant::now(),
            });
        }
    }

    /// A new connection, run by a task of its own until it closes.
    async fn connect(&self) -> Result<Sender, PoolError> {
        let io = tower_service::Service::call(&mut self.connector.clone(), self.target.clone())
            .await
            .map_err(|e| PoolError::Connect(e.into()))?;
        let (sender, conn) = http1::handshake(io).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!("an upstream connection ended: {e}");
            }
        });
        Ok(sender)
    }
}

/// Drops the connections idle longer than [`IDLE_TIMEOUT`] (the oldest
/// are at the front).
fn expire(idle: &mut VecDeque<Idle>) {
    while idle
        .front()
        .is_some_and(|i| i.since.elapsed() > IDLE_TIMEOUT)
    {
        idle.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An HTTP/1 keep-alive server counting its connections.
    async fn server() -> (Uri, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(async move {
                    let served = Arc::new(AtomicUsize::new(0));
                    let service = hyper::service::service_fn(move |_req| {
                        let count = served.fetch_add(1, Ordering::SeqCst) + 1;
                        async move {
                            let body = format!("connection {n} answer {count}");
                            Ok::<_, std::convert::Infallible>(Response::new(Full::new(
                                Bytes::from(body),
                            )))
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let conn =
                        hyper::server::conn::http1::Builder::new().serve_connection(io, service);
                    let _ = conn.await;
                });
            }
        });
        let uri = format!("http://{addr}/v1/chat/completions")
            .parse()
            .unwrap();
        (uri, connections)
    }

    fn pool(uri: &Uri) -> Arc<Pool> {
        Arc::new(Pool::new(HttpConnector::new(), uri).unwrap())
    }

    fn post(uri: &Uri) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(Bytes::from_static(b"{}")));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = uri.clone();
        req
    }

    /// One exchange, its body read to the end and its connection given back.
    async fn exchange(pool: &Arc<Pool>, uri: &Uri) -> String {
        let (response, lease) = pool.send(post(uri)).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        lease.release();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn a_connection_is_used_again_once_its_answer_was_read() {
        let (uri, connections) = server().await;
        let pool = pool(&uri);
        for i in 1..=3 {
            assert_eq!(
                exchange(&pool, &uri).await,
                format!("connection 1 answer {i}")
            );
        }
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_answer_not_read_to_its_end_does_not_give_its_connection_back() {
        let (uri, connections) = server().await;
        let pool = pool(&uri);
        let (response, lease) = pool.send(post(&uri)).await.unwrap();
        drop((response, lease));
        assert_eq!(exchange(&pool, &uri).await, "connection 2 answer 1");
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn concurrent_exchanges_get_connections_of_their_own() {
        let (uri, connections) = server().await;
        let pool = pool(&uri);
        let (first, lease_1) = pool.send(post(&uri)).await.unwrap();
        let (second, lease_2) = pool.send(post(&uri)).await.unwrap();
        for (response, lease) in [(first, lease_1), (second, lease_2)] {
            response.into_body().collect().await.unwrap();
            lease.release();
        }
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        // Both went back; the next exchange takes the last one returned.
        assert_eq!(exchange(&pool, &uri).await, "connection 2 answer 2");
        assert_eq!(pool.idle.lock().unwrap().len(), 2);
    }

    /// A keep-alive server whose open connections all close, without a
    /// word, when the returned `Notify` is notified.
    async fn closing_server() -> (Uri, Arc<AtomicUsize>, Arc<tokio::sync::Notify>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let close = Arc::new(tokio::sync::Notify::new());
        let (counted, closing) = (Arc::clone(&connections), Arc::clone(&close));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                let closing = Arc::clone(&closing);
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        let k = tokio::select! {
                            () = closing.notified() => return,
                            k = stream.read(&mut buf) => match k {
                                Ok(0) | Err(_) => return,
                                Ok(k) => k,
                            },
                        };
                        request.extend_from_slice(&buf[..k]);
                        if request.ends_with(b"\r\n\r\n{}") {
                            request.clear();
                            let body = format!("connection {n}");
                            let answer = format!(
                                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let uri = format!("http://{addr}/v1/chat/completions")
            .parse()
            .unwrap();
        (uri, connections, close)
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_while_idle_is_replaced_without_an_error() {
        let (uri, connections, close) = closing_server().await;
        let pool = pool(&uri);
        assert_eq!(exchange(&pool, &uri).await, "connection 1");
        assert_eq!(exchange(&pool, &uri).await, "connection 1");
        close.notify_waiters();
        // The connection's task sees the end of its stream.
        for _ in 0..100 {
            if pool
                .idle
                .lock()
                .unwrap()
                .iter()
                .all(|i| i.sender.is_closed())
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(exchange(&pool, &uri).await, "connection 2");
        assert_eq!(exchange(&pool, &uri).await, "connection 2");
        assert_eq!(connections.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_unreachable_host_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let uri: Uri = format!("http://{}/x", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(listener);
        let error = pool(&uri).send(post(&uri)).await.unwrap_err();
        assert!(matches!(error, PoolError::Connect(_)), "{error:?}");
    }

    #[tokio::test]
    async fn idle_connections_are_bounded_in_number_and_age() {
        let (uri, _) = server().await;
        let pool = pool(&uri);
        let mut leases = Vec::new();
        for _ in 0..3 {
            let (response, lease) = pool.send(post(&uri)).await.unwrap();
            response.into_body().collect().await.unwrap();
            leases.push(lease);
        }
        for lease in leases {
            lease.release();
        }
        assert_eq!(pool.idle.lock().unwrap().len(), 3);
        let Some(old) = Instant::now().checked_sub(IDLE_TIMEOUT + Duration::from_secs(1)) else {
            return; // a machine up for less than the timeout
        };
        pool.idle
            .lock()
            .unwrap()
            .iter_mut()
            .for_each(|i| i.since = old);
        assert!(
            pool.take().is_none(),
            "connections idle too long are closed"
        );
        assert!(pool.idle.lock().unwrap().is_empty());
    }
}
