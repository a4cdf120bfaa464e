//! Each request of a connection, on its way to the axum app: it counts as
//! in flight until its answer is written whole, its body must arrive within
//! `read_timeout`, it carries the client's address (`ConnectInfo`), and a
//! body its handler answered without reading is read before the answer
//! goes out, so the connection stays usable.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::conn::State;

/// The hyper service of one connection.
#[derive(Clone)]
pub(super) struct Requests {
    app: Router,
    state: Arc<State>,
    peer: SocketAddr,
    read_timeout: Duration,
}

impl Requests {
    pub(super) fn new(
        app: Router,
        state: Arc<State>,
        peer: SocketAddr,
        read_timeout: Duration,
    ) -> Self {
        Self {
            app,
            state,
            peer,
            read_timeout,
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for Requests {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::new(self.state.clone());
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(ConnectInfo(self.peer));
        let unread = Unread::default();
        let at = tokio::time::Instant::now() + self.read_timeout;
        let body = axum::body::Body::new(Deadline::new(
            body,
            at,
            self.read_timeout,
            Some(unread.clone()),
        ));
        let req = Request::from_parts(parts, body);
        let app = self.app.clone();
        let timeout = self.read_timeout;
        Box::pin(async move {
            let Ok(mut response) = tower::ServiceExt::oneshot(app, req).await;
            read_what_was_left(&unread, timeout, &mut response).await;
            Ok(response.map(|body| Answer {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// Counts its request in flight from creation to drop.
struct InFlight(Arc<State>);

impl InFlight {
    fn new(state: Arc<State>) -> Self {
        state.request_started();
        Self(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// A response body; its request is in flight until hyper drops it (written
/// whole, or the connection ended).
pub(super) struct Answer {
    body: axum::body::Body,
    _in_flight: InFlight,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Most of a body its handler left unread that the listener reads (see
/// [`read_what_was_left`]).
const DRAIN_LIMIT: usize = 64 * 1024;

/// Where a request body its handler dropped unread is handed back, with
/// its deadline.
type Unread = Arc<std::sync::Mutex<Option<(Incoming, tokio::time::Instant)>>>;

/// Reads the rest of a request body its handler answered without reading
/// (a refusal: 401, 403, 404, 503, ...), so the client's keep-alive
/// connection stays usable for its next request: hyper closes a connection
/// whose request body went unread, and a client retrying with a fresh
/// token on it would meet a closed socket. A rest longer than 64 KiB (or
/// slower than `read_timeout`) is not read: the answer then says
/// `Connection: close`, so the client knows not to reuse the connection.
/// One place for every early answer of every route.
async fn read_what_was_left(
    unread: &Unread,
    timeout: Duration,
    response: &mut Response<axum::body::Body>,
) {
    let left = unread.lock().ok().and_then(|mut u| u.take());
    let Some((body, at)) = left else { return };
    let rest = axum::body::Body::new(Deadline::new(body, at, timeout, None));
    if axum::body::to_bytes(rest, DRAIN_LIMIT).await.is_err() {
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
}

/// A request body that must end within `timeout` of the request's head.
/// Unlike a timeout between frames, a client trickling a byte at a time
/// cannot stretch it. Dropped before its end, it hands the rest to
/// `unread` (see [`read_what_was_left`]).
struct Deadline {
    body: Option<Incoming>,
    at: tokio::time::Instant,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    unread: Option<Unread>,
}

impl Deadline {
    fn new(
        body: Incoming,
        at: tokio::time::Instant,
        timeout: Duration,
        unread: Option<Unread>,
    ) -> Self {
        Self {
            body: Some(body),
            at,
            deadline: Box::pin(tokio::time::sleep_until(at)),
            timeout,
            unread,
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let (Some(body), Some(unread)) = (self.body.take(), &self.unread)
            && !body.is_end_stream()
            && let Ok(mut slot) = unread.lock()
        {
            *slot = Some((body, self.at));
        }
    }
}

impl Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the request body did not arrive within {} (limits.read_timeout)",
                        humantime::format_duration(this.timeout)
                    ),
                )
                .into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}
