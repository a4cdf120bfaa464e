//! What one plugin call runs in: a fresh [`Store`] whose data is [`State`]
//! — WASI with no files, no sockets, no environment; `wasi:http` through
//! [`Hooks`], which lets requests reach only the manifest's allowed hosts,
//! with a timeout and a cap on the response body; a memory cap; an epoch
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
use super::engine::PluginEngine;
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
    /// The first limit this call ran into (later ones are not logged).
    pub(super) limit_hit: Option<LimitHit>,
    /// What every call of this plugin shares (per-plugin caps).
    pub(super) budget: Arc<Budget>,
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

impl State {
    /// Records that this call ran into `key`. The first hit of a call is
    /// logged (a WARN naming the limit) and reported; later ones only
    /// counted, so a plugin hammering a limit cannot flood the log.
    pub(super) fn hit_limit(&mut self, key: &'static str, detail: impl Into<String>) {
        if self.limit_hit.is_some() {
            return;
        }
        let hit = LimitHit {
            key,
            detail: detail.into(),
        };
        tracing::warn!(plugin = %self.label, limit = %key, "plugin call hit a limit: {}", hit.detail);
        self.limit_hit = Some(hit);
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
    timeout: Duration,
    max_body: u64,
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
        let (timeout, max_body) = (self.timeout, self.max_body);
        let mut options = options.unwrap_or_default();
        let cap = |d: Option<Duration>| Some(d.map_or(timeout, |d| d.min(timeout)));
        options.connect_timeout = cap(options.connect_timeout);
        options.first_byte_timeout = cap(options.first_byte_timeout);
        options.between_bytes_timeout = cap(options.between_bytes_timeout);
        Box::new(async move {
            let sent = wasmtime_wasi_http::default_send_request(request, Some(options));
            let (resp, io) = tokio::time::timeout(timeout, sent)
                .await
                .map_err(|_| wasmtime_wasi_http::Error::ConnectionTimeout)??;
            // A body past the cap ends with an error instead of filling
            // the host's memory.
            let resp = resp.map(move |body| {
                http_body_util::Limited::new(body, max_body as usize)
                    .map_err(move |_| {
                        wasmtime_wasi_http::Error::HttpResponseBodySize(Some(max_body))
                    })
                    .boxed_unsync()
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
    let state = State {
        wasi,
        http,
        table,
        hooks: Hooks {
            allowed: manifest.allowed_hosts.clone(),
            timeout: manifest.limits.http_timeout,
            max_body: manifest.limits.http_max_body,
        },
        limits: Limiter::new(manifest.limits.memory as usize),
        label,
        config,
        target,
        deadline: tokio::time::Instant::now() + manifest.limits.deadline,
        cut_short: None,
        limit_hit: None,
        budget,
    };
    let mut store = Store::new(engine.engine(), state);
    store.limiter(|s| &mut s.limits);
    // Guest code yields to the plugin threads at every tick (so one busy
    // plugin holds no thread from the others) and stops at its deadline.
    let stop_at = std::time::Instant::now() + manifest.limits.deadline;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        Ok(if std::time::Instant::now() >= stop_at {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
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
