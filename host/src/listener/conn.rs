//! One accepted connection: hyper serving it, and a watchdog that ends it
//! when a bound of [`ListenerLimits`] is passed.
//!
//! What the watchdog reads is recorded as it happens: bytes received and
//! writes that cannot proceed (by [`Watched`], around the socket), and
//! requests in flight (by `body.rs`, around each request).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ListenerLimits;
use super::body::Requests;
use crate::metrics::ListenerMetrics;

/// Largest read buffer (and request head) per connection; hyper's default
/// is ~400 KiB, an MCP request head a few hundred bytes.
const MAX_READ_BUFFER: usize = 64 * 1024;
/// Streams one HTTP/2 connection may have open at once.
const MAX_H2_STREAMS: u32 = 128;
/// How long an idle connection's graceful close may take.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// "Not set" in the millisecond fields of [`State`].
const NONE: u64 = u64::MAX;

/// What a connection has been doing, in milliseconds since it opened.
pub(super) struct State {
    opened: Instant,
    /// Last byte received or written, or request started or finished.
    last: AtomicU64,
    /// Requests whose answer is not finished.
    pub(super) active: AtomicUsize,
    /// When the bytes of a request head began to arrive with no request in
    /// flight (HTTP/1 only); for a new connection, when it opened: its
    /// first request is due within `read_timeout` of that, so one that
    /// sends nothing is not kept until `idle_timeout`.
    head_since: AtomicU64,
    /// When a write began to wait for the client to take data.
    stalled_since: AtomicU64,
    /// Whether the first bytes were looked at, and were HTTP/2's preface.
    checked: AtomicBool,
    h2: AtomicBool,
}

impl State {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            last: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            head_since: AtomicU64::new(0),
            stalled_since: AtomicU64::new(NONE),
            checked: AtomicBool::new(false),
            h2: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    /// Bytes arrived.
    fn received(&self, data: &[u8]) {
        let now = self.now();
        self.last.store(now, Ordering::Release);
        if !self.checked.swap(true, Ordering::AcqRel) && data.starts_with(b"PRI * HTTP/2") {
            self.h2.store(true, Ordering::Release);
            // HTTP/2 streams are timed as in flight or idle, not by head.
            self.head_since.store(NONE, Ordering::Release);
            return;
        }
        if self.active.load(Ordering::Acquire) == 0 && !self.h2.load(Ordering::Acquire) {
            let _ =
                self.head_since
                    .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// A write went through (`false`) or must wait for the client (`true`).
    fn wrote(&self, waiting: bool) {
        if waiting {
            let _ = self.stalled_since.compare_exchange(
                NONE,
                self.now(),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        } else {
            self.stalled_since.store(NONE, Ordering::Release);
            self.last.store(self.now(), Ordering::Release);
        }
    }

    /// A request's head arrived whole (hyper handed it over).
    pub(super) fn request_started(&self) {
        self.active.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
        self.last.store(self.now(), Ordering::Release);
    }

    /// A request's answer was written whole, or dropped.
    pub(super) fn request_ended(&self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
        self.last.store(self.now(), Ordering::Release);
    }
}

/// Why the watchdog ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cut {
    /// A request head still incomplete after `read_timeout`, or a new
    /// connection's first request not begun by then.
    SlowHead,
    /// Nothing in flight and nothing received for `idle_timeout`.
    Idle,
    /// The client took nothing of an answer for `write_timeout`.
    WriteStalled,
}

impl Cut {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Cut::SlowHead => "read_timeout",
            Cut::Idle => "idle_timeout",
            Cut::WriteStalled => "write_timeout",
        }
    }
}

/// The first bound `state` passes, checked every `tick`.
async fn watchdog(state: &State, limits: ListenerLimits) -> Cut {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(NONE - 1);
    let (read, idle, write) = (
        ms(limits.read_timeout),
        ms(limits.idle_timeout),
        ms(limits.write_timeout),
    );
    let shortest = limits
        .read_timeout
        .min(limits.idle_timeout)
        .min(limits.write_timeout);
    let tick = (shortest / 10).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        tokio::time::sleep(tick).await;
        let now = state.now();
        let stalled = state.stalled_since.load(Ordering::Acquire);
        if stalled != NONE && now.saturating_sub(stalled) >= write {
            return Cut::WriteStalled;
        }
        if state.active.load(Ordering::Acquire) == 0 {
            let head = state.head_since.load(Ordering::Acquire);
            if head != NONE && now.saturating_sub(head) >= read {
                return Cut::SlowHead;
            }
            if head == NONE && now.saturating_sub(state.last.load(Ordering::Acquire)) >= idle {
                return Cut::Idle;
            }
        }
    }
}

/// Serves one connection until it ends, a bound is passed, or shutdown.
pub(super) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ListenerLimits,
    shutdown: CancellationToken,
    metrics: ListenerMetrics,
) {
    let _open = metrics.opened();
    let state = Arc::new(State::new());
    let io = TokioIo::new(Watched {
        io: stream,
        state: state.clone(),
    });
    let requests = Requests::new(app, state.clone(), peer, limits.read_timeout);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // The watchdog times request heads, apart from idle keep-alive time
        // (hyper's own timer would close idle connections at this bound).
        .header_read_timeout(None)
        .max_buf_size(MAX_READ_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_H2_STREAMS);
    let conn = builder.serve_connection(io, requests);
    tokio::pin!(conn);
    let ended = tokio::select! {
        r = &mut conn => {
            if let Err(e) = r {
                tracing::trace!(%peer, error = %e, "connection ended with an error");
            }
            return;
        }
        cut = watchdog(&state, limits) => Some(cut),
        _ = shutdown.cancelled() => None,
    };
    match ended {
        Some(Cut::Idle) | None => {
            // Nothing in flight (idle), or let what is finish (shutdown).
            conn.as_mut().graceful_shutdown();
            let grace = if ended.is_none() {
                super::SHUTDOWN_GRACE
            } else {
                CLOSE_GRACE
            };
            let _ = tokio::time::timeout(grace, conn).await;
        }
        Some(cut) => {
            metrics.cut(cut.as_str());
            tracing::debug!(%peer, reason = cut.as_str(), "connection cut off");
            // Dropped: the socket and whatever was buffered for it go now.
        }
    }
}

/// The socket, recording bytes received and writes that must wait.
pub(super) struct Watched {
    io: TcpStream,
    state: Arc<State>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &r
            && buf.filled().len() > before
        {
            this.state.received(&buf.filled()[before..]);
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, data);
        this.state.wrote(r.is_pending());
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.state.wrote(r.is_pending());
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        if r.is_pending() {
            this.state.wrote(true);
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ListenerLimits {
        ListenerLimits {
            connections: 1,
            read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
        }
    }

    /// Asserts the watchdog cuts `state`'s connection as a slow head at
    /// the read timeout (10 s of paused time, within a second).
    async fn cut_at_the_read_timeout(state: &State) {
        let started = Instant::now();
        assert_eq!(watchdog(state, limits()).await, Cut::SlowHead);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_secs(10) && waited <= Duration::from_secs(11),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_never_completes_is_cut_at_the_read_timeout() {
        let state = State::new();
        state.received(b"GET / HTTP/1.1\r\nHost: x\r\n");
        cut_at_the_read_timeout(&state).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_is_cut_at_the_read_timeout() {
        // Before: kept until the idle timeout (60 s), holding a descriptor
        // and a place under the connection cap.
        cut_at_the_read_timeout(&State::new()).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_head_is_timed_from_the_connections_opening() {
        let state = State::new();
        tokio::time::advance(Duration::from_secs(8)).await;
        state.received(b"GET / HTTP/1.1\r\n");
        let started = Instant::now();
        assert_eq!(watchdog(&state, limits()).await, Cut::SlowHead);
        assert!(
            started.elapsed() <= Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_connection_between_requests_is_cut_at_the_idle_timeout() {
        let state = State::new();
        state.received(b"GET /mcp HTTP/1.1\r\n\r\n");
        state.request_started();
        state.request_ended();
        let started = Instant::now();
        assert_eq!(watchdog(&state, limits()).await, Cut::Idle);
        assert!(started.elapsed() >= Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_is_neither_idle_nor_a_slow_head() {
        let state = State::new();
        state.received(b"GET /mcp HTTP/1.1\r\n\r\n");
        state.request_started();
        // A long answer (an SSE stream) that the client keeps taking.
        let ran = tokio::time::timeout(Duration::from_secs(600), watchdog(&state, limits())).await;
        assert!(ran.is_err(), "cut while a request was in flight: {ran:?}");
        state.request_ended();
        assert_eq!(watchdog(&state, limits()).await, Cut::Idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_nothing_is_cut_at_the_write_timeout() {
        let state = State::new();
        state.request_started();
        state.wrote(true);
        let started = Instant::now();
        assert_eq!(watchdog(&state, limits()).await, Cut::WriteStalled);
        assert!(started.elapsed() >= Duration::from_secs(30));
    }

    #[test]
    fn http2_is_told_by_its_preface_and_has_no_head_timer() {
        let state = State::new();
        state.received(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(state.head_since.load(Ordering::Acquire), NONE);
        let state = State::new();
        state.received(b"POST /mcp HTTP/1.1\r\n");
        assert_ne!(state.head_since.load(Ordering::Acquire), NONE);
        state.request_started();
        state.request_ended();
        assert_eq!(state.head_since.load(Ordering::Acquire), NONE);
        state.received(b"POST /mcp HTTP/1.1\r\n");
        assert_ne!(state.head_since.load(Ordering::Acquire), NONE);
    }
}
