//! The traffic side of a call's `wasi:http` policy: how many requests may be
//! in flight (per call and per plugin), and a response bounded as a whole
//! by `limits.http_timeout`, body included.
//!
//! Both outlive the host call that made the request: a response is read by
//! wasmtime's own tasks and pollables long after `handle` returned. So a
//! request's permits travel inside its response body ([`Bounded`]) and are
//! given back when the body ends or is dropped, and a limit hit is recorded
//! through the call's shared [`HitRecord`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::{Error, WasiBody};

use super::sandbox::HitRecord;

/// Requests in flight: one call's and all of its plugin's.
#[derive(Debug, Clone)]
pub struct InFlight {
    call: Arc<Semaphore>,
    call_cap: u32,
    plugin: Arc<Semaphore>,
    plugin_cap: u32,
}

/// What a request holds while it is in flight: one slot of its call's cap
/// and one of its plugin's.
#[derive(Debug)]
pub struct Permits {
    _call: OwnedSemaphorePermit,
    _plugin: OwnedSemaphorePermit,
}

/// A request refused for the cap `key`, with what to tell the operator.
#[derive(Debug)]
pub struct Refused {
    pub key: &'static str,
    pub detail: String,
}

impl InFlight {
    /// A fresh per-call cap of `call_cap` beside the plugin's shared one.
    pub fn new(call_cap: u32, plugin: Arc<Semaphore>, plugin_cap: u32) -> Self {
        Self {
            call: Arc::new(Semaphore::new(call_cap as usize)),
            call_cap,
            plugin,
            plugin_cap,
        }
    }

    /// A plugin's shared semaphore for `cap` requests.
    pub fn plugin_semaphore(cap: u32) -> Arc<Semaphore> {
        Arc::new(Semaphore::new(cap as usize))
    }

    /// Takes a slot for a request to `dest`, or says at once which cap is
    /// full: a request past the cap is refused, never queued.
    pub fn admit(&self, dest: &str) -> Result<Permits, Refused> {
        let call = self.call.clone().try_acquire_owned().map_err(|_| Refused {
            key: "limits.http_concurrency",
            detail: format!(
                "a request to {dest} was refused: {} requests of this call were already in flight \
                 (a request counts until its response body is read to the end or dropped)",
                self.call_cap
            ),
        })?;
        let plugin = self
            .plugin
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refused {
                key: "limits.http_concurrency_plugin",
                detail: format!(
                    "a request to {dest} was refused: {} requests of this plugin's calls together \
                 were already in flight",
                    self.plugin_cap
                ),
            })?;
        Ok(Permits {
            _call: call,
            _plugin: plugin,
        })
    }
}

/// A response body that ends with `http-response-timeout` once the
/// request's `limits.http_timeout` has passed (counted from the request's
/// start, so a body trickled a byte at a time cannot outlive it), and that
/// holds the request's [`Permits`] until it ends or is dropped.
pub struct Bounded {
    inner: WasiBody,
    deadline: Pin<Box<Sleep>>,
    /// Set once the body ended: finished, failed or timed out.
    ended: bool,
    /// Given back when the body ends or is dropped.
    permits: Option<Permits>,
    hits: Arc<HitRecord>,
    dest: String,
    timeout: Duration,
}

impl Bounded {
    /// `inner` bounded by `deadline` (when the request started plus
    /// `timeout`), holding `permits`.
    pub fn new(
        inner: WasiBody,
        deadline: Instant,
        timeout: Duration,
        permits: Permits,
        hits: Arc<HitRecord>,
        dest: String,
    ) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            ended: false,
            permits: Some(permits),
            hits,
            dest,
            timeout,
        }
    }

    fn end(&mut self) {
        self.ended = true;
        self.permits = None;
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

    fn caps(call: u32, plugin: &Arc<Semaphore>) -> InFlight {
        InFlight::new(call, plugin.clone(), plugin.available_permits() as u32)
    }

    #[test]
    fn requests_past_either_cap_are_refused_at_once_and_slots_come_back() {
        let plugin = InFlight::plugin_semaphore(3);
        let a = caps(2, &plugin);
        let b = caps(2, &plugin);
        let a1 = a.admit("x").unwrap();
        let _a2 = a.admit("x").unwrap();
        let e = a.admit("x").unwrap_err();
        assert_eq!(e.key, "limits.http_concurrency");
        assert!(e.detail.contains("2 requests of this call"), "{}", e.detail);
        let _b1 = b.admit("x").unwrap();
        let e = b.admit("x").unwrap_err();
        assert_eq!(e.key, "limits.http_concurrency_plugin");
        assert!(
            e.detail.contains("3 requests of this plugin's calls"),
            "{}",
            e.detail
        );
        // Refused by the plugin's cap, the call's slot was given back.
        drop(a1);
        let _b2 = b.admit("x").unwrap();
    }

    fn body(chunks: usize) -> WasiBody {
        let stream = futures::stream::iter(
            (0..chunks).map(|_| Ok::<_, Error>(Frame::data(Bytes::from_static(b"x")))),
        );
        http_body_util::StreamBody::new(stream).boxed_unsync()
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_still_arriving_at_the_timeout_ends_with_an_error_and_records_the_hit() {
        let plugin = InFlight::plugin_semaphore(1);
        let inflight = caps(1, &plugin);
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
            inflight.admit("h:1").unwrap(),
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
        // The slot came back when the body ended, though it is not dropped.
        assert!(inflight.admit("h:1").is_ok());
        assert!(b.frame().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_finished_body_gives_its_slot_back_and_records_nothing() {
        let plugin = InFlight::plugin_semaphore(1);
        let inflight = caps(1, &plugin);
        let hits = HitRecord::new("p".into());
        let timeout = Duration::from_secs(3);
        let mut b = Bounded::new(
            body(3),
            Instant::now() + timeout,
            timeout,
            inflight.admit("h").unwrap(),
            hits.clone(),
            "h".into(),
        );
        assert!(inflight.admit("h").is_err(), "held while unread");
        let collected = (&mut b).collect().await.unwrap().to_bytes();
        assert_eq!(&collected[..], b"xxx");
        assert!(inflight.admit("h").is_ok(), "given back at the end");
        assert!(hits.take().is_none());
    }
}
