//! The traffic side of a call's `wasi:http` policy: a response bounded as a
//! whole by `limits.http_timeout`, body included.
//!
//! It outlives the host call that made the request: a response is read by
//! wasmtime's own tasks and pollables long after `handle` returned. So the
//! bound travels inside the response body ([`Bounded`]), and a limit hit is
//! recorded through the call's shared [`HitRecord`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::{Error, WasiBody};

use super::sandbox::HitRecord;

/// A response body that ends with `http-response-timeout` once the
/// request's `limits.http_timeout` has passed (counted from the request's
/// start, so a body trickled a byte at a time cannot outlive it).
pub struct Bounded {
    inner: WasiBody,
    deadline: Pin<Box<Sleep>>,
    /// Set once the body ended: finished, failed or timed out.
    ended: bool,
    hits: Arc<HitRecord>,
    dest: String,
    timeout: Duration,
}

impl Bounded {
    /// `inner` bounded by `deadline` (when the request started plus
    /// `timeout`).
    pub fn new(
        inner: WasiBody,
        deadline: Instant,
        timeout: Duration,
        hits: Arc<HitRecord>,
        dest: String,
    ) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            ended: false,
            hits,
            dest,
            timeout,
        }
    }

    fn end(&mut self) {
        self.ended = true;
    }
}

/// What a request that ran out of `limits.http_timeout` tells the operator.
pub fn timeout_detail(dest: &str, timeout: Duration, what: &str) -> String {
    format!(
        "the response from {dest} {what} after {}: a request, its body included, must finish within it",
        humantime::format_duration(timeout)
    )
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        // The deadline first: a body that always has a byte ready must not
        // starve it.
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.end();
            this.hits.hit(
                "limits.http_timeout",
                timeout_detail(&this.dest, this.timeout, "was still arriving"),
            );
            return Poll::Ready(Some(Err(Error::HttpResponseTimeout)));
        }
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
            this.end();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn body(chunks: usize) -> WasiBody {
        let stream = futures::stream::iter(
            (0..chunks).map(|_| Ok::<_, Error>(Frame::data(Bytes::from_static(b"x")))),
        );
        http_body_util::StreamBody::new(stream).boxed_unsync()
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_arriving_at_the_timeout_ends_with_an_error_and_records_the_hit() {
        let hits = HitRecord::new("p".into());
        // One byte a second, for ever (the between-bytes timer never fires).
        let trickle = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Some((Ok::<_, Error>(Frame::data(Bytes::from_static(b"x"))), ()))
        });
        let timeout = Duration::from_secs(3);
        let mut b = Bounded::new(
            http_body_util::StreamBody::new(trickle).boxed_unsync(),
            Instant::now() + timeout,
            timeout,
            hits.clone(),
            "h:1".into(),
        );
        let t0 = Instant::now();
        let mut bytes = 0;
        let err = loop {
            match b.frame().await {
                Some(Ok(_)) => bytes += 1,
                Some(Err(e)) => break e,
                None => panic!("the body ended"),
            }
        };
        assert!(matches!(err, Error::HttpResponseTimeout), "{err:?}");
        assert_eq!(t0.elapsed(), timeout);
        assert!(bytes <= 3, "{bytes}");
        let hit = hits.take().unwrap();
        assert_eq!(hit.key, "limits.http_timeout");
        assert!(
            hit.detail.contains("h:1 was still arriving after 3s"),
            "{hit}"
        );
        assert!(b.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_done_in_time_passes_whole_and_records_nothing() {
        let hits = HitRecord::new("p".into());
        let timeout = Duration::from_secs(3);
        let b = Bounded::new(
            body(3),
            Instant::now() + timeout,
            timeout,
            hits.clone(),
            "h".into(),
        );
        let collected = b.collect().await.unwrap().to_bytes();
        assert_eq!(&collected[..], b"xxx");
        assert!(hits.take().is_none());
    }
}
