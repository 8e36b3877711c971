//! What lets an HTTP/1 connection idle without hyper's state.
//!
//! hyper keeps a connection's read and write buffers (8 KiB each) for as
//! long as the connection is open, so an idle keep-alive connection held
//! 27 KiB. The server instead takes hyper's connection apart once an
//! exchange is over (`into_parts`: the socket, the bytes read ahead, the
//! service), waits for the next request's first bytes holding only the
//! socket, and then serves it with a new hyper connection, as nginx frees
//! a connection's buffers while it idles.
//!
//! An exchange is over when all of these hold, tracked in one [`Exchange`]
//! per connection:
//!
//! - its request body has been read to its end (else hyper still has body
//!   bytes to read or drain, and they must not be taken for a request);
//! - its answer's body has ended, and is not a `101` (an upgrade hands the
//!   socket to the upgraded protocol, which taking hyper apart would
//!   cancel);
//! - everything hyper wrote has been flushed (hyper flushes the socket only
//!   once its own write buffer is empty);
//! - and hyper asks the socket for more bytes ([`Watched::poll_read`]):
//!   it has nothing left to parse, and would wait.
//!
//! At that read the socket answers `Pending` and marks the connection
//! parked; the server sees the mark when hyper's connection returns
//! `Pending`, and takes it apart. hyper's own state (keep-alive, closing)
//! is respected: a connection hyper means to close never reads again, so it
//! is never parked.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A request began.
const STARTED: u8 = 1;
/// Its body was read to its end.
const REQUEST_READ: u8 = 1 << 1;
/// Its answer's body ended.
const ANSWERED: u8 = 1 << 2;
/// Never park: the answer upgrades the connection.
const UPGRADED: u8 = 1 << 3;
/// Bytes were written since the last flush.
const UNFLUSHED: u8 = 1 << 4;
/// hyper asked for more bytes once the exchange was over.
const PARKED: u8 = 1 << 5;

/// Where one connection's current exchange stands.
#[derive(Debug, Default)]
pub(super) struct Exchange(AtomicU8);

impl Exchange {
    fn set(&self, bits: u8) {
        self.0.fetch_or(bits, Ordering::Relaxed);
    }

    fn over(bits: u8) -> bool {
        bits & (STARTED | REQUEST_READ | ANSWERED | UPGRADED | UNFLUSHED)
            == STARTED | REQUEST_READ | ANSWERED
    }

    /// A request begins; `read` when it has no body to read.
    pub(super) fn begin(&self, read: bool) {
        let bits = if read {
            STARTED | REQUEST_READ
        } else {
            STARTED
        };
        self.0.store(bits, Ordering::Relaxed);
    }

    /// The answer upgrades the connection: it is never parked.
    pub(super) fn upgraded(&self) {
        self.set(UPGRADED);
    }

    /// hyper's connection returned `Pending` after asking for bytes with
    /// the exchange over: it can be taken apart. Clears the mark either
    /// way (hyper asks again on its next poll).
    pub(super) fn take_parked(&self) -> bool {
        let bits = self.0.fetch_and(!PARKED, Ordering::Relaxed);
        bits & PARKED != 0 && Self::over(bits)
    }

    /// The next connection starts with no exchange.
    pub(super) fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// A body that marks its [`Exchange`] when it ends.
pub(super) struct Tracked<B> {
    inner: B,
    exchange: Arc<Exchange>,
    bit: u8,
}

impl<B> Tracked<B> {
    /// A request's body.
    pub(super) fn request(inner: B, exchange: Arc<Exchange>) -> Tracked<B> {
        Tracked {
            inner,
            exchange,
            bit: REQUEST_READ,
        }
    }

    /// An answer's body.
    pub(super) fn answer(inner: B, exchange: Arc<Exchange>) -> Tracked<B> {
        Tracked {
            inner,
            exchange,
            bit: ANSWERED,
        }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if frame.is_none() {
            this.exchange.set(this.bit);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        let end = self.inner.is_end_stream();
        if end {
            self.exchange.set(self.bit);
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's socket as hyper sees it: bytes read ahead by an earlier
/// hyper connection first, then the socket; and the parking read.
pub(super) struct Watched {
    pub(super) stream: TcpStream,
    /// Read by the last hyper connection, not parsed yet.
    pub(super) ahead: Bytes,
    exchange: Arc<Exchange>,
}

impl Watched {
    pub(super) fn new(stream: TcpStream, exchange: Arc<Exchange>) -> Watched {
        Watched {
            stream,
            ahead: Bytes::new(),
            exchange,
        }
    }

    /// What hyper had read and not parsed when its connection was taken
    /// apart. Kept only when there is some: an empty `Bytes` split off
    /// hyper's read buffer would keep all of that buffer.
    pub(super) fn read_ahead(&mut self, bytes: Bytes) {
        self.ahead = if bytes.is_empty() {
            Bytes::new()
        } else {
            bytes
        };
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.ahead.is_empty() {
            let n = this.ahead.len().min(buf.remaining());
            buf.put_slice(&this.ahead[..n]);
            this.ahead.advance(n);
            if this.ahead.is_empty() {
                // An empty `Bytes` still holds the buffer it came from.
                this.ahead = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        if Exchange::over(this.exchange.0.load(Ordering::Relaxed)) {
            this.exchange.set(PARKED);
            return Poll::Pending;
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.exchange.set(UNFLUSHED);
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.exchange.set(UNFLUSHED);
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let flushed = Pin::new(&mut this.stream).poll_flush(cx);
        if let Poll::Ready(Ok(())) = flushed {
            this.exchange.0.fetch_and(!UNFLUSHED, Ordering::Relaxed);
        }
        flushed
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_is_over_only_when_both_bodies_ended_and_all_is_flushed() {
        let ex = Exchange::default();
        assert!(
            !Exchange::over(ex.0.load(Ordering::Relaxed)),
            "no request yet"
        );
        ex.begin(false);
        ex.set(ANSWERED);
        assert!(!Exchange::over(ex.0.load(Ordering::Relaxed)), "body unread");
        ex.set(REQUEST_READ | UNFLUSHED);
        assert!(!Exchange::over(ex.0.load(Ordering::Relaxed)), "unflushed");
        ex.0.fetch_and(!UNFLUSHED, Ordering::Relaxed);
        assert!(Exchange::over(ex.0.load(Ordering::Relaxed)));
        ex.set(PARKED);
        assert!(ex.take_parked());
        assert!(!ex.take_parked(), "the mark is taken once");
        ex.upgraded();
        ex.set(PARKED);
        assert!(!ex.take_parked(), "an upgrade is never parked");
        ex.begin(true);
        ex.set(ANSWERED | PARKED);
        assert!(ex.take_parked(), "a request without a body is read at once");
    }
}
