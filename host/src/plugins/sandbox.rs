//! What one plugin call runs in: a fresh [`Store`] whose data is [`State`]
//! — WASI with no files, no sockets, no environment; `wasi:http` through
//! [`Hooks`], which lets requests reach only the manifest's allowed hosts,
//! with a timeout over the whole response, a cap on its body and on the
//! requests in flight ([`super::http_limits`]); a memory cap; an epoch
//! deadline — and the host side of the `vigil:plugin` interfaces.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use super::bindings;
use super::budget::Budget;
use super::engine::{PluginEngine, YIELD_FUEL};
use super::http_limits::{Bounded, InFlight, timeout_detail};
use super::limiter::Limiter;
use super::manifest::{Manifest, allows};
use crate::backend::Connection;

/// The target of a probe call: its backend and live connection, if any.
pub struct Target {
    pub name: Arc<str>,
    pub conn: Option<Arc<Connection>>,
}

/// A store's data.
pub struct State {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    hooks: Hooks,
    pub(super) limits: Limiter,
    /// The plugin's name (and for probes, the backend) for log lines.
    pub(super) label: String,
    pub(super) config: Vec<(String, String)>,
    pub(super) target: Option<Target>,
    /// The call's deadline: bounds the timeouts plugins ask for.
    pub(super) deadline: tokio::time::Instant,
    /// Set when a target request timed out only because the deadline cut
    /// the timeout the plugin asked for: the call then ends as a plugin
    /// failure (a probe's `unknown`), not as whatever the plugin concludes
    /// from a timeout it never asked for.
    pub(super) cut_short: Option<String>,
    /// The limits this call ran into: shared with its HTTP hooks and the
    /// response bodies they hand out, which run outside host calls.
    pub(super) limit_hit: Arc<HitRecord>,
    /// What every call of this plugin shares (per-plugin caps).
    pub(super) budget: Arc<Budget>,
    /// Target requests this call may still send, of `target_cap`
    /// (`limits.target_requests`).
    pub(super) target_left: u32,
    pub(super) target_cap: u32,
    /// Whether a `host.log` line of this call was dropped already.
    pub(super) log_limited: bool,
    /// When guest code last ran into an epoch tick: a call cut by the
    /// wall-clock timeout soon after one was spinning, not waiting.
    pub(super) last_guest_tick: Option<std::time::Instant>,
}

/// A limit a call ran into: the manifest key (or host limit) and what
/// happened, for the log, `/api/v1/plugins` and the call's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitHit {
    /// `limits.http_concurrency`, say: what an operator would raise.
    pub key: &'static str,
    pub detail: String,
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.key)
    }
}

/// Where one call records the limits it runs into. The first hit is logged
/// (a WARN naming the limit) and kept for the call's outcome; later ones
/// are ignored, so a plugin hammering a limit cannot flood the log.
#[derive(Debug)]
pub struct HitRecord {
    /// The plugin (and for probes, the backend), for the WARN.
    label: String,
    first: std::sync::Mutex<Option<LimitHit>>,
}

impl HitRecord {
    pub fn new(label: String) -> Arc<Self> {
        Arc::new(Self {
            label,
            first: std::sync::Mutex::new(None),
        })
    }

    /// Records that the call ran into `key`.
    pub fn hit(&self, key: &'static str, detail: impl Into<String>) {
        let mut first = self.first.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_some() {
            return;
        }
        let hit = LimitHit {
            key,
            detail: detail.into(),
        };
        tracing::warn!(plugin = %self.label, limit = %key, "plugin call hit a limit: {}", hit.detail);
        *first = Some(hit);
    }

    /// The first hit, taken (once the call is over).
    pub fn take(&self) -> Option<LimitHit> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl State {
    /// Records that this call ran into `key`: see [`HitRecord`].
    pub(super) fn hit_limit(&mut self, key: &'static str, detail: impl Into<String>) {
        self.limit_hit.hit(key, detail);
    }
}

/// The end of a call reports the plugin's `host.log` lines dropped and not
/// reported yet.
impl Drop for State {
    fn drop(&mut self) {
        let dropped = self.budget.log.take_dropped(tokio::time::Instant::now());
        super::log_rate::report_dropped(&self.label, dropped);
    }
}

/// Most bytes one `fields` resource (a request's or response's headers) may
/// hold in the host. wasmtime's default, 128 KiB, times the number of
/// resources a call may create was the +414 MiB of the first round.
pub const HEADERS_SIZE: usize = 16 << 10;
/// Largest write into an outgoing body, and how many such writes the host
/// buffers before the plugin must wait: at most twice this per body.
pub const BODY_CHUNK: usize = 64 << 10;

/// `wasi:http` policy of one call.
struct Hooks {
    allowed: Vec<String>,
    /// `limits.http_timeout`: a whole request, response body included.
    timeout: Duration,
    max_body: u64,
    /// `limits.http_concurrency` and `http_concurrency_plugin`.
    in_flight: InFlight,
    /// The call's limit record (the same as [`State::limit_hit`]).
    hits: Arc<HitRecord>,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.hooks,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

impl WasiHttpHooks for Hooks {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        1
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        BODY_CHUNK
    }

    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                )>,
            > + Send,
    > {
        drop(fut);
        let uri = request.uri();
        let host = uri.host().unwrap_or("").to_owned();
        let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        if !allows(&self.allowed, &host, port) {
            tracing::warn!(%host, port, "plugin HTTP request to a host its manifest does not allow; refused");
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        let dest = format!("{host}:{port}");
        let permits = match self.in_flight.admit(&dest) {
            Ok(p) => p,
            Err(refused) => {
                self.hits.hit(refused.key, refused.detail);
                return Box::new(async { Err(wasmtime_wasi_http::Error::ConnectionLimitReached) });
            }
        };
        let (timeout, max_body, hits) = (self.timeout, self.max_body, self.hits.clone());
        // The whole request, head and body, must be done by then.
        let deadline = tokio::time::Instant::now() + timeout;
        let mut options = options.unwrap_or_default();
        let cap = |d: Option<Duration>| Some(d.map_or(timeout, |d| d.min(timeout)));
        options.connect_timeout = cap(options.connect_timeout);
        options.first_byte_timeout = cap(options.first_byte_timeout);
        options.between_bytes_timeout = cap(options.between_bytes_timeout);
        Box::new(async move {
            let sent = wasmtime_wasi_http::default_send_request(request, Some(options));
            let (resp, io) = match tokio::time::timeout_at(deadline, sent).await {
                Ok(r) => r?,
                Err(_) => {
                    hits.hit(
                        "limits.http_timeout",
                        timeout_detail(&dest, timeout, "had not begun"),
                    );
                    return Err(wasmtime_wasi_http::Error::ConnectionTimeout);
                }
            };
            // A body past the cap ends with an error instead of filling
            // the host's memory; one still arriving at the deadline too.
            // It holds the request's slots until it ends or is dropped.
            let resp = resp.map(move |body| {
                let limited = http_body_util::Limited::new(body, max_body as usize)
                    .map_err(move |_| {
                        wasmtime_wasi_http::Error::HttpResponseBodySize(Some(max_body))
                    })
                    .boxed_unsync();
                Bounded::new(limited, deadline, timeout, permits, hits, dest).boxed_unsync()
            });
            Ok((
                resp,
                Box::new(io)
                    as Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
            ))
        })
    }
}

/// Links everything a plugin may import: WASI p2 (denying files and
/// sockets through the context), `wasi:http`, and Vigil's interfaces.
pub fn linker(engine: &PluginEngine) -> Result<Linker<State>, String> {
    let mut l = Linker::new(engine.engine());
    let e = |e: wasmtime::Error| format!("cannot link the plugin host: {e:#}");
    wasmtime_wasi::p2::add_to_linker_async(&mut l).map_err(e)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut l).map_err(e)?;
    bindings::probe::vigil::plugin::host::add_to_linker::<State, HasSelf<State>>(&mut l, |s| s)
        .map_err(e)?;
    bindings::probe::vigil::plugin::target::add_to_linker::<State, HasSelf<State>>(&mut l, |s| s)
        .map_err(e)?;
    Ok(l)
}

/// A store for one call of a plugin with `manifest`.
pub fn store(
    engine: &PluginEngine,
    manifest: &Manifest,
    label: String,
    config: Vec<(String, String)>,
    target: Option<Target>,
    budget: Arc<Budget>,
) -> Store<State> {
    // No preopened directories, no environment, no arguments, no network
    // (sockets stay denied: wasmtime-wasi's default).
    let wasi = WasiCtxBuilder::new().build();
    let mut http = WasiHttpCtx::new();
    http.set_field_size_limit(HEADERS_SIZE);
    let mut table = ResourceTable::new();
    table.set_max_capacity(manifest.limits.host_resources);
    let hits = HitRecord::new(label.clone());
    let state = State {
        wasi,
        http,
        table,
        hooks: Hooks {
            allowed: manifest.allowed_hosts.clone(),
            timeout: manifest.limits.http_timeout,
            max_body: manifest.limits.http_max_body,
            in_flight: InFlight::new(
                manifest.limits.http_concurrency,
                budget.http.clone(),
                budget.http_cap,
            ),
            hits: hits.clone(),
        },
        limits: Limiter::new(manifest.limits.memory as usize, hits.clone()),
        label,
        config,
        target,
        deadline: tokio::time::Instant::now() + manifest.limits.deadline,
        cut_short: None,
        limit_hit: hits,
        budget,
        target_left: manifest.limits.target_requests,
        target_cap: manifest.limits.target_requests,
        log_limited: false,
        last_guest_tick: None,
    };
    let mut store = Store::new(engine.engine(), state);
    store.limiter(|s| &mut s.limits);
    // Fuel only paces: guest code yields every YIELD_FUEL instructions (so
    // a poll of a call is short, see `runner`); it never runs out. The
    // epoch stops the call at its deadline.
    store
        .set_fuel(u64::MAX)
        .and_then(|()| store.fuel_async_yield_interval(Some(YIELD_FUEL)))
        .expect("the plugin engine consumes fuel");
    let stop_at = std::time::Instant::now() + manifest.limits.deadline;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut cx| {
        let now = std::time::Instant::now();
        cx.data_mut().last_guest_tick = Some(now);
        Ok(if now >= stop_at {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Continue(1)
        })
    });
    store
}

/// `text` cut to at most `max` bytes (at a character boundary), marked.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let total = text.len();
        text.truncate(end);
        text.push_str(&format!("… (cut: {total} bytes)"));
    }
    text
}
