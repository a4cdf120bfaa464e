//! Each request of a connection, on its way to the axum app: it counts as
//! in flight until its answer is written whole, its body must arrive within
//! `read_timeout`, and it carries the client's address (`ConnectInfo`).

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
        let body = axum::body::Body::new(Deadline {
            body,
            deadline: Box::pin(tokio::time::sleep(self.read_timeout)),
            timeout: self.read_timeout,
        });
        let req = Request::from_parts(parts, body);
        let app = self.app.clone();
        Box::pin(async move {
            let Ok(response) = tower::ServiceExt::oneshot(app, req).await;
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

/// A request body that must end within `timeout` of the request's head.
/// Unlike a timeout between frames, a client trickling a byte at a time
/// cannot stretch it.
struct Deadline {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
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
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Most of a refused request's body read before answering (see
/// [`refuse_after_reading`]).
const DRAIN_LIMIT: usize = 64 * 1024;

/// Answers `refusal` after reading what is left of the refused request's
/// `body`, so the client's keep-alive connection stays usable for its next
/// request (a client whose token was refused retries with a fresh one on
/// the same connection; hyper closes a connection whose request body went
/// unread, and the retry meets a closed socket). A body longer than 64 KiB
/// is not read: the answer then says `Connection: close`, so the client
/// knows not to reuse the connection. The listener's `read_timeout` bounds
/// a slow body as for any request.
pub async fn refuse_after_reading(
    body: axum::body::Body,
    mut refusal: axum::response::Response,
) -> axum::response::Response {
    if axum::body::to_bytes(body, DRAIN_LIMIT).await.is_err() {
        refusal.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    refusal
}
