//! The connections of a cleartext (`http://`) upstream: HTTP/1.1
//! keep-alive connections made with hyper's connection-level client and
//! kept in a stack of idle ones.
//!
//! A connection is taken for one exchange and given back by its answer's
//! body once that body has been read to its end ([`Lease::release`], called
//! by [`super::Bounded`]): no pool checkout future and no task per request
//! to watch a connection become idle again, which is what hyper-util's
//! pooled client spends on every HTTP/1 request. A body dropped before it
//! was polled to its end (a stream left after its `[DONE]`) gives its
//! connection back only once hyper says it can take another request
//! ([`Lease::release_when_ready`]); one dropped in the middle of its answer
//! closes. Each connection runs in a task of its own for as long as it
//! lives, on the thread that opened it; an exchange takes an idle
//! connection of its own thread first (the server runs each client
//! connection on one thread, see `toolgate_server`'s `server::threads`), so
//! that on a one-thread runtime its answer wakes no other thread.
//!
//! Bounds: at most [`MAX_IDLE`] idle connections are kept (one more is
//! closed on its return), and an idle connection older than
//! [`IDLE_TIMEOUT`] is closed, by the pool's next use or by a sweep every
//! [`IDLE_TIMEOUT`] (or sooner, when the upstream closes it).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread::ThreadId;
use std::time::Duration;

use tokio::time::Instant;

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
/// How many of the most recently used idle connections an exchange looks
/// through for one of its own thread.
const HOME_SCAN: usize = 64;
/// How long a connection whose answer was dropped before its end may take
/// to become ready for another request before it is closed.
const READY_WAIT: Duration = Duration::from_secs(5);

type Sender = SendRequest<Full<Bytes>>;

/// Why an exchange failed before its answer's head arrived.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{0}")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
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
    /// Idle connections kept at most ([`MAX_IDLE`]).
    max_idle: usize,
    /// Whether the task closing connections idle too long is running.
    sweeping: AtomicBool,
}

#[derive(Debug)]
struct Idle {
    sender: Sender,
    since: Instant,
    /// The thread whose runtime runs the connection's task.
    home: ThreadId,
}

/// A connection's sending half and the thread its task runs on.
#[derive(Debug)]
struct Conn {
    sender: Sender,
    home: ThreadId,
}

/// A connection taken for one exchange, given back with
/// [`release`](Lease::release) once its answer was read to the end.
#[derive(Debug)]
pub struct Lease {
    conn: Conn,
    pool: Arc<Pool>,
}

impl Lease {
    /// The connection goes back to the pool, unless the pool is full.
    pub fn release(self) {
        self.pool.put(self.conn);
    }

    /// For an answer dropped before its end was polled: the connection
    /// goes back once hyper has read that end and can take another request
    /// (within [`READY_WAIT`]); a connection hyper closes instead (the
    /// answer was cut in its middle) is dropped.
    pub fn release_when_ready(self) {
        let Lease { mut conn, pool } = self;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Ok(Ok(())) = tokio::time::timeout(READY_WAIT, conn.sender.ready()).await {
                pool.put(conn);
            }
        });
    }
}

impl Pool {
    /// A pool of connections to `target`'s host, made by `connector`.
    pub fn new(connector: HttpConnector, target: &Uri) -> Result<Pool, String> {
        Pool::with_max_idle(connector, target, MAX_IDLE)
    }

    fn with_max_idle(
        connector: HttpConnector,
        target: &Uri,
        max_idle: usize,
    ) -> Result<Pool, String> {
        let host = target
            .host()
            .ok_or_else(|| format!("`{target}` has no host"))?;
        // `host[:port]`, never a URL's user information.
        let host = match target.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let target = Uri::builder()
            .scheme("http")
            .authority(host.as_str())
            .path_and_query("/")
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Pool {
            connector,
            target,
            host: HeaderValue::from_str(&host).map_err(|e| e.to_string())?,
            idle: Mutex::new(VecDeque::new()),
            max_idle,
            sweeping: AtomicBool::new(false),
        })
    }

    /// Sends `req` (its URI absolute, on this pool's host) on an idle
    /// connection, or on a new one. A request an idle connection could not
    /// take because it had just closed is sent on the next one: it was not
    /// written, so it cannot run twice.
    pub fn send(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> impl Future<Output = Result<(Response<Incoming>, Lease), PoolError>> + '_ {
        // HTTP/1 wants the origin form and a `Host` header.
        let origin = req
            .uri()
            .path_and_query()
            .cloned()
            .map_or_else(|| Uri::from_static("/"), Uri::from);
        *req.uri_mut() = origin;
        req.headers_mut().insert(HOST, self.host.clone());
        // Not an `async fn`, and the request boxed until it is sent: the
        // future, which lives until the answer's head arrives, holds no
        // slot of a request's size.
        let mut req = Box::new(req);
        async move {
            loop {
                let (mut conn, reused) = match self.take() {
                    Some(conn) => (conn, true),
                    None => {
                        self.sweep_idle();
                        (self.connect().await?, false)
                    }
                };
                if let Err(e) = conn.sender.ready().await {
                    if reused {
                        continue;
                    }
                    return Err(e.into());
                }
                let sending = conn.sender.try_send_request(unbox(req));
                match sending.await {
                    Ok(response) => {
                        let lease = Lease {
                            conn,
                            pool: Arc::clone(self),
                        };
                        return Ok((response, lease));
                    }
                    Err(mut e) => match e.take_message() {
                        // `req` was moved out whole: boxed again, not
                        // written into.
                        #[allow(clippy::replace_box)]
                        Some(unsent) if reused => req = Box::new(unsent),
                        _ => return Err(e.into_error().into()),
                    },
                }
            }
        }
    }

    /// The most recently used idle connection still open, one of this
    /// thread's first, closing those idle for too long.
    fn take(&self) -> Option<Conn> {
        let here = std::thread::current().id();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        expire(&mut idle);
        loop {
            let pick = idle
                .iter()
                .rev()
                .take(HOME_SCAN)
                .position(|i| i.home == here)
                .map_or(idle.len().checked_sub(1)?, |back| idle.len() - 1 - back);
            let Idle { sender, home, .. } = idle.remove(pick)?;
            if !sender.is_closed() {
                return Some(Conn { sender, home });
            }
        }
    }

    fn put(&self, conn: Conn) {
        if conn.sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        expire(&mut idle);
        if idle.len() < self.max_idle {
            idle.push_back(Idle {
                sender: conn.sender,
                since: Instant::now(),
                home: conn.home,
            });
        }
    }

    /// Starts, once, the task that closes connections idle too long when
    /// nothing uses the pool; it ends with the pool.
    fn sweep_idle(self: &Arc<Self>) {
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let pool: Weak<Pool> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE_TIMEOUT).await;
                let Some(pool) = pool.upgrade() else { return };
                expire(&mut pool.idle.lock().unwrap_or_else(PoisonError::into_inner));
            }
        });
    }

    /// A new connection, run by a task of its own until it closes.
    async fn connect(&self) -> Result<Conn, PoolError> {
        let io = tower_service::Service::call(&mut self.connector.clone(), self.target.clone())
            .await
            .map_err(|e| PoolError::Connect(e.into()))?;
        let (sender, conn) = http1::handshake(io).await?;
        // Mapped, not awaited in an `async` block, which would hold the
        // connection twice (as its capture and as what it awaits).
        tokio::spawn(futures::FutureExt::map(conn, |ended| {
            if let Err(e) = ended {
                tracing::debug!("an upstream connection ended: {e}");
            }
        }));
        Ok(Conn {
            sender,
            home: std::thread::current().id(),
        })
    }
}

/// The value out of its box, the box freed at once (not when the moved-out
/// box's variable ends).
#[allow(clippy::boxed_local)]
fn unbox<T>(boxed: Box<T>) -> T {
    *boxed
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

    /// A keep-alive server answering every request of its `n`th connection
    /// with `answer(n)` (a whole HTTP/1.1 response); its open connections
    /// all close, without a word, when the returned `Notify` is notified.
    async fn raw_server(
        answer: fn(usize) -> String,
    ) -> (Uri, Arc<AtomicUsize>, Arc<tokio::sync::Notify>) {
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
                            if stream.write_all(answer(n).as_bytes()).await.is_err() {
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

    fn numbered(n: usize) -> String {
        let body = format!("connection {n}");
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn a_connection_the_upstream_closed_while_idle_is_replaced_without_an_error() {
        let (uri, connections, close) = raw_server(numbered).await;
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
        // Through `Upstream`, the error names its cause.
        let base = uri.to_string().replace("/x", "/v1");
        let upstream = upstream(&base.parse().unwrap());
        match upstream.chat(Bytes::from_static(b"{}")).await {
            Err(crate::model::upstream::UpstreamError::Unreachable { message, .. }) => {
                assert!(message.contains("refused"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    /// Runs `steps` on a thread of its own with a one-thread runtime, as
    /// the server runs a client connection; the thread's runtime (and the
    /// connections it opened) lives until `end` is sent or dropped.
    fn on_a_thread(
        steps: impl AsyncFnOnce() + Send + 'static,
        end: std::sync::mpsc::Receiver<()>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(steps());
            let _ = end.recv();
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_exchange_takes_an_idle_connection_of_its_own_thread_first() {
        let (uri, connections) = server().await;
        let pool = pool(&uri);
        let (said, mut heard) = tokio::sync::mpsc::unbounded_channel();
        // Thread A holds its connection while thread B opens one of its
        // own; A gives its back last, so it is the most recent idle one.
        let (release_a, a_releases) = std::sync::mpsc::channel::<()>();
        let (end_a, a_ends) = std::sync::mpsc::channel();
        let (p, u, tell) = (Arc::clone(&pool), uri.clone(), said.clone());
        let a = on_a_thread(
            async move || {
                let (response, lease) = p.send(post(&u)).await.unwrap();
                response.into_body().collect().await.unwrap();
                tell.send(("a", std::thread::current().id())).unwrap();
                let _ = tokio::task::spawn_blocking(move || a_releases.recv()).await;
                lease.release();
                tell.send(("a released", std::thread::current().id()))
                    .unwrap();
            },
            a_ends,
        );
        let (_, thread_a) = heard.recv().await.unwrap();
        let (take_b, b_takes) = std::sync::mpsc::channel::<()>();
        let (end_b, b_ends) = std::sync::mpsc::channel();
        let (p, u, tell) = (Arc::clone(&pool), uri.clone(), said.clone());
        let b = on_a_thread(
            async move || {
                let (response, lease) = p.send(post(&u)).await.unwrap();
                response.into_body().collect().await.unwrap();
                lease.release();
                tell.send(("b", std::thread::current().id())).unwrap();
                let _ = tokio::task::spawn_blocking(move || b_takes.recv()).await;
                let taken = p.take().unwrap();
                let home = taken.home;
                p.put(taken);
                tell.send(("b took", home)).unwrap();
            },
            b_ends,
        );
        let (_, thread_b) = heard.recv().await.unwrap();
        release_a.send(()).unwrap();
        assert_eq!(heard.recv().await.unwrap().0, "a released");
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        {
            let idle = pool.idle.lock().unwrap();
            let homes: Vec<_> = idle.iter().map(|i| i.home).collect();
            assert_eq!(homes, [thread_b, thread_a], "A's is the most recent");
        }
        take_b.send(()).unwrap();
        assert_eq!(heard.recv().await.unwrap(), ("b took", thread_b));
        // B gave its own back, now the most recent; a thread with none of
        // its own takes the most recent one.
        assert_eq!(pool.take().unwrap().home, thread_b);
        drop((end_a, end_b));
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(connections.load(Ordering::SeqCst), 2, "no connection more");
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

    #[tokio::test]
    async fn no_more_idle_connections_than_the_bound_are_kept() {
        let (uri, connections) = server().await;
        let pool = Arc::new(Pool::with_max_idle(HttpConnector::new(), &uri, 2).unwrap());
        let mut leases = Vec::new();
        for _ in 0..3 {
            let (response, lease) = pool.send(post(&uri)).await.unwrap();
            response.into_body().collect().await.unwrap();
            leases.push(lease);
        }
        leases.into_iter().for_each(Lease::release);
        assert_eq!(connections.load(Ordering::SeqCst), 3);
        assert_eq!(pool.idle.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_host_header_is_host_and_port_only() {
        let uri: Uri = "http://user:secret@models.internal:8000/v1"
            .parse()
            .unwrap();
        let pool = Pool::new(HttpConnector::new(), &uri).unwrap();
        assert_eq!(pool.host, "models.internal:8000");
        assert_eq!(pool.target, "http://models.internal:8000/");
    }

    // Through `Upstream`: its answers' bodies (`Bounded`) give their
    // connection back, or close it, as the pool's invariant says.

    fn upstream(uri: &Uri) -> crate::model::upstream::Upstream {
        let base = uri.to_string().replace("/chat/completions", "");
        let timeouts = crate::model::upstream::Timeouts {
            connect: Duration::from_secs(5),
            read: Duration::from_secs(5),
            total: Duration::from_secs(10),
        };
        crate::model::upstream::Upstream::new("u".into(), &base, None, timeouts, Default::default())
            .unwrap()
    }

    fn idle_of(upstream: &crate::model::upstream::Upstream) -> usize {
        match &upstream.transport {
            crate::model::upstream::Transport::Cleartext(pool) => pool.idle.lock().unwrap().len(),
            crate::model::upstream::Transport::Tls(_) => panic!("a cleartext upstream"),
        }
    }

    fn chunked(_: usize) -> String {
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            .into()
    }

    #[tokio::test]
    async fn answers_read_to_their_end_give_their_connection_back() {
        for answer in [numbered as fn(usize) -> String, chunked] {
            let (uri, connections, _close) = raw_server(answer).await;
            let upstream = upstream(&uri);
            for _ in 0..3 {
                let reply = upstream.chat(Bytes::from_static(b"{}")).await.unwrap();
                upstream.read_body(reply, 1024).await.unwrap();
            }
            assert_eq!(connections.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn an_answer_over_the_cap_closes_its_connection() {
        for answer in [numbered as fn(usize) -> String, chunked] {
            let (uri, connections, _close) = raw_server(answer).await;
            let upstream = upstream(&uri);
            let reply = upstream.chat(Bytes::from_static(b"{}")).await.unwrap();
            let e = upstream.read_body(reply, 3).await.unwrap_err();
            assert!(matches!(
                e,
                crate::model::upstream::UpstreamError::TooLarge { .. }
            ));
            let reply = upstream.chat(Bytes::from_static(b"{}")).await.unwrap();
            upstream.read_body(reply, 1024).await.unwrap();
            assert_eq!(connections.load(Ordering::SeqCst), 2);
        }
    }

    /// Reads a stream's first chunk, then drops the stream (as the tool
    /// loop does after a streamed answer's `[DONE]`).
    async fn first_chunk_then_drop(upstream: &crate::model::upstream::Upstream) {
        use futures::StreamExt;
        let reply = upstream.chat(Bytes::from_static(b"{}")).await.unwrap();
        let mut stream = Box::pin(upstream.body_stream(reply, 1024));
        assert_eq!(stream.next().await.unwrap().unwrap(), "hello");
    }

    #[tokio::test]
    async fn a_stream_left_after_its_last_chunk_gives_its_connection_back() {
        let (uri, connections, _close) = raw_server(|_| {
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".into()
        })
        .await;
        let upstream = upstream(&uri);
        first_chunk_then_drop(&upstream).await;
        // Given back by a task once hyper has read the stream's end.
        for _ in 0..100 {
            if idle_of(&upstream) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        first_chunk_then_drop(&upstream).await;
        assert_eq!(connections.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stream_left_in_its_middle_closes_its_connection() {
        // The stream's end never comes.
        let (uri, connections, _close) = raw_server(|_| {
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n".into()
        })
        .await;
        let upstream = upstream(&uri);
        first_chunk_then_drop(&upstream).await;
        first_chunk_then_drop(&upstream).await;
        assert_eq!(connections.load(Ordering::SeqCst), 2);
        assert_eq!(idle_of(&upstream), 0);
    }

    #[tokio::test]
    async fn a_known_length_answer_gives_its_connection_back_with_its_last_byte() {
        // A proxied answer is not polled past its declared length.
        use http_body_util::BodyExt;
        let (uri, _, _close) = raw_server(numbered).await;
        let upstream = upstream(&uri);
        let reply = upstream.chat(Bytes::from_static(b"{}")).await.unwrap();
        let mut body = upstream.body(reply, 1024);
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "connection 1");
        assert_eq!(idle_of(&upstream), 1);
    }

    #[tokio::test]
    async fn an_empty_answer_gives_its_connection_back_at_once() {
        let (uri, _, _close) =
            raw_server(|_| "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".into()).await;
        let upstream = upstream(&uri);
        let reply = upstream.chat(Bytes::from_static(b"{}")).await.unwrap();
        // A proxied empty answer is never polled: it must not need to be.
        let body = upstream.body(reply, 1024);
        assert_eq!(idle_of(&upstream), 1);
        drop(body);
    }
}
