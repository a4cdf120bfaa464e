//! `GET /api/v1/events`: health events as server-sent events, for the
//! dashboard and for scripts (`curl -N -H 'Authorization: Bearer …'`).
//!
//! Every connection starts with one `hello` event, a full snapshot, then
//! gets what changes, in order:
//!
//! | event | data |
//! |---|---|
//! | `hello` | `{"principal", "role", "instances": [InstanceReport], "transitions": {backend: [Transition, newest last]}, "plugins": {"dir", "plugins": [PluginInfo]}, "warnings": [text]}` |
//! | `transition` | `{"transition": Transition, "instance": InstanceReport}`: the backend's report as the event is sent (it may already be past `to`: a crash's `offline` and `restarting` share a millisecond) |
//! | `instances` | `{"instances": [InstanceReport]}`: reports that moved visibly (any field, or latency by a quarter and 1 ms, calls by a quarter, error rate by a point), every 2 s at most |
//! | `plugins` | `{"dir", "plugins": [PluginInfo]}`: the whole list, when anything in it changed, every 2 s at most |
//! | `warnings` | `{"warnings": [text]}`: what an operator should know (the instances API's `warnings`: replicas serving another configuration, clients sharing a backend session), the whole list when it changed, every 2 s at most |
//!
//! Events after `hello` carry increasing `id`s. A client that falls behind
//! (or whose hub fell behind the gateway) gets a new `hello` instead of the
//! events it missed; one that reconnects
//! gets a fresh `hello` too, so it never needs `Last-Event-ID`. When a
//! config reload adds or removes backends, every stream gets a new `hello`.
//!
//! One [`Hub`] per API serves every stream: it takes each transition from
//! the gateway once, looks up the backend's report once, serializes once,
//! and hands the same bytes to every stream.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Serialize;
use serde_json::json;
use tokio::sync::broadcast;

use super::{Control, InstanceReport, Principal};
use crate::health::Transition;

/// Transitions per backend kept for a `hello`.
pub const RECENT: usize = 20;
/// How often moved figures are sent.
const FIGURES_EVERY: Duration = Duration::from_secs(2);
/// Frames kept for the slowest stream before it counts as behind: one
/// ring shared by every stream, so room for a mass restart of a thousand
/// backends (three transitions each) costs little.
const BUFFER: usize = 8 * 1024;
/// Comment lines sent on a quiet stream, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event, serialized once for every stream.
#[derive(Clone)]
struct Frame {
    id: u64,
    event: &'static str,
    data: Arc<str>,
}

/// Turns the gateway's transitions into frames for every open stream.
pub struct Hub {
    control: Arc<dyn Control>,
    frames: broadcast::Sender<Frame>,
    /// The newest transitions of each backend, for `hello`.
    recent: Mutex<HashMap<String, VecDeque<Transition>>>,
    /// Set when the first stream opens (nobody listening, no work), once
    /// the recent history is loaded and the pump runs.
    started: tokio::sync::OnceCell<()>,
    /// Ends every stream: the server's graceful shutdown waits for open
    /// responses, and these never end by themselves.
    closing: tokio_util::sync::CancellationToken,
    /// The id of the last frame sent, and the snapshot built after it.
    last_frame: std::sync::atomic::AtomicU64,
    snapshot: Mutex<Option<(u64, std::time::Instant, Arc<str>)>>,
}

impl Hub {
    pub fn new(
        control: Arc<dyn Control>,
        closing: tokio_util::sync::CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Hub {
            closing,
            last_frame: std::sync::atomic::AtomicU64::new(0),
            snapshot: Mutex::new(None),
            control,
            frames: broadcast::channel(BUFFER).0,
            recent: Mutex::new(HashMap::new()),
            started: tokio::sync::OnceCell::new(),
        })
    }

    /// The stream of one client: `hello`, then every frame.
    pub async fn stream(
        self: &Arc<Self>,
        who: &Principal,
    ) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
        self.started.get_or_init(|| self.start()).await;
        // Subscribe before the snapshot: a change in between arrives twice
        // at worst, never not at all.
        let rx = self.frames.subscribe();
        let state = Streaming {
            hub: self.clone(),
            who: who.clone(),
            rx,
            hello_due: true,
        };
        let stream = futures::stream::unfold(state, |mut s| async move {
            let event = s.next().await?;
            Some((Ok(event), s))
        });
        let stream = futures::StreamExt::take_until(stream, self.closing.clone().cancelled_owned());
        Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
    }

    /// Loads each backend's recent history from the store, then starts
    /// the pump; the first `hello` waits for it.
    async fn start(self: &Arc<Self>) {
        // Subscribed first, so nothing falls between history and feed.
        let transitions = self.control.subscribe();
        self.load_history().await;
        crate::background::spawn(pump(self.clone(), transitions));
    }

    /// Each backend's recent transitions, from the store.
    async fn load_history(&self) {
        for r in self.control.instances() {
            if let Ok(detail) = self.control.instance(&r.name).await {
                let skip = detail.transitions.len().saturating_sub(RECENT);
                let mut recent = lock(&self.recent);
                let list = recent.entry(r.name.clone()).or_default();
                list.clear();
                list.extend(detail.transitions[skip..].iter().cloned());
            }
        }
    }

    fn hello(&self, who: &Principal) -> Event {
        let snapshot = self.snapshot();
        let who = json!({"principal": who.name, "role": who.role}).to_string();
        // Both are JSON objects: one object of the caller's fields followed
        // by the shared snapshot's.
        let data = format!("{},{}", &who[..who.len() - 1], &snapshot[1..]);
        Event::default()
            .event("hello")
            .retry(Duration::from_secs(2))
            .data(data)
    }

    /// The snapshot part of `hello`, shared by every stream that opens
    /// before the next frame (or within [`FIGURES_EVERY`]): a hundred
    /// dashboards reconnecting at once cost one snapshot, not a hundred.
    fn snapshot(&self) -> Arc<str> {
        let frame = self.last_frame.load(std::sync::atomic::Ordering::Acquire);
        let mut cached = lock(&self.snapshot);
        if let Some((at_frame, made, text)) = &*cached
            && *at_frame == frame
            && made.elapsed() < FIGURES_EVERY
        {
            return text.clone();
        }
        let instances = self.control.instances();
        let (dir, plugins) = self.control.plugins();
        let warnings = self.control.warnings();
        let text: Arc<str> = {
            let recent = lock(&self.recent);
            let transitions: HashMap<&str, &VecDeque<Transition>> = instances
                .iter()
                .filter_map(|r| recent.get(&r.name).map(|t| (r.name.as_str(), t)))
                .collect();
            json!({
                "instances": instances,
                "transitions": transitions,
                "plugins": {"dir": dir, "plugins": plugins},
                "warnings": warnings,
            })
            .to_string()
            .into()
        };
        *cached = Some((frame, std::time::Instant::now(), text.clone()));
        text
    }

    fn remember(&self, t: &Transition) {
        let mut recent = lock(&self.recent);
        let list = recent.entry(t.backend.clone()).or_default();
        // Seeding from the store and the live feed may overlap by one.
        if list.back() == Some(t) {
            return;
        }
        list.push_back(t.clone());
        while list.len() > RECENT {
            list.pop_front();
        }
    }
}

/// One client's position in the feed.
struct Streaming {
    hub: Arc<Hub>,
    who: Principal,
    rx: broadcast::Receiver<Frame>,
    hello_due: bool,
}

impl Streaming {
    async fn next(&mut self) -> Option<Event> {
        if std::mem::take(&mut self.hello_due) {
            return Some(self.hub.hello(&self.who));
        }
        match self.rx.recv().await {
            // The hub missed transitions: only a snapshot is true now.
            Ok(f) if f.event == "resync" => Some(self.hub.hello(&self.who)),
            Ok(f) => Some(
                Event::default()
                    .id(f.id.to_string())
                    .event(f.event)
                    .data(&*f.data),
            ),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(principal = %self.who.name, missed, "event stream fell behind; sending a new snapshot");
                Some(self.hub.hello(&self.who))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

/// Feeds the hub: transitions as they come, moved figures and plugin
/// changes every [`FIGURES_EVERY`].
async fn pump(hub: Arc<Hub>, mut transitions: Option<broadcast::Receiver<Transition>>) {
    let mut figures = Figures::default();
    figures.moved(&hub.control); // the baseline `hello` already showed
    let mut id = 0u64;
    let mut send = |event: &'static str, data: String| {
        id += 1;
        hub.last_frame
            .store(id, std::sync::atomic::Ordering::Release);
        // No receiver is fine: nobody is listening right now.
        let _ = hub.frames.send(Frame {
            id,
            event,
            data: data.into(),
        });
    };
    let mut tick = tokio::time::interval(FIGURES_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = async {
            match &mut transitions {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // The API is closing: every stream ends with it.
            _ = hub.closing.cancelled() => return,
            t = next => match t {
                Ok(t) => {
                    hub.remember(&t);
                    let instance = hub.control.report(&t.backend);
                    if let Some(r) = &instance {
                        figures.seen(r);
                    }
                    send("transition", json!({"transition": t, "instance": instance}).to_string());
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "the event stream fell behind the health events; streams get a new snapshot");
                    // What was missed is in the store: reload it so the
                    // snapshots carry it.
                    hub.load_history().await;
                    send("resync", String::new());
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                // Nobody listening: a stream opening later starts with a
                // fresh snapshot anyway.
                if hub.frames.receiver_count() == 0 {
                    continue;
                }
                let (reports, plugins, warnings, set_changed) = figures.moved(&hub.control);
                if set_changed {
                    // A reload added or removed backends: a snapshot says
                    // which are gone, and carries the new ones.
                    send("resync", String::new());
                    continue;
                }
                if !reports.is_empty() {
                    send("instances", json!({"instances": reports}).to_string());
                }
                if let Some(p) = plugins {
                    send("plugins", p);
                }
                if let Some(w) = warnings {
                    send("warnings", w);
                }
            }
        }
    }
}

/// What streams were last told, to send only what moved.
#[derive(Default)]
struct Figures {
    reports: HashMap<String, InstanceReport>,
    plugins: Option<String>,
    warnings: Option<String>,
    /// The backends as of the last tick, to notice reloads.
    names: Vec<String>,
}

impl Figures {
    fn seen(&mut self, r: &InstanceReport) {
        self.reports.insert(r.name.clone(), r.clone());
    }

    /// Reports that differ from the last sent, the plugin list and the
    /// warnings if they changed (all remembered as sent), and whether the
    /// set of backends changed.
    fn moved(
        &mut self,
        control: &Arc<dyn Control>,
    ) -> (Vec<InstanceReport>, Option<String>, Option<String>, bool) {
        let now = control.instances();
        let mut names: Vec<String> = now.iter().map(|r| r.name.clone()).collect();
        names.sort_unstable();
        let set_changed = names != self.names;
        if set_changed {
            self.names = names;
            self.reports.clear();
        }
        let moved: Vec<InstanceReport> = now
            .into_iter()
            .filter(|r| {
                self.reports
                    .get(&r.name)
                    .is_none_or(|was| moved_visibly(was, r))
            })
            .collect();
        for r in &moved {
            self.seen(r);
        }
        let (dir, plugins) = control.plugins();
        let listed = Plugins { dir, plugins };
        let text = serde_json::to_string(&listed).unwrap_or_default();
        let plugins = (self.plugins.as_deref() != Some(text.as_str())).then(|| text.clone());
        self.plugins = Some(text);
        let text = json!({"warnings": control.warnings()}).to_string();
        // The first tick's are in the snapshot every stream began with.
        let warnings = self
            .warnings
            .as_deref()
            .is_some_and(|was| was != text)
            .then(|| text.clone());
        self.warnings = Some(text);
        (moved, plugins, warnings, set_changed)
    }
}

/// Whether `now` differs from `was` enough to show: any change but in the
/// figures that move with every probe and call, and those when they move by
/// more than a quarter (latency, also by over 1 ms; calls) or a percentage
/// point (error rate).
/// Without this every probed backend's report would be resent every tick.
pub(super) fn moved_visibly(was: &InstanceReport, now: &InstanceReport) -> bool {
    fn relative(a: f64, b: f64) -> bool {
        (a - b).abs() > 0.25 * a.abs().max(b.abs())
    }
    let figures = |r: &InstanceReport| (r.latency_ms, r.error_rate, r.calls_in_window);
    let same_but_figures = InstanceReport {
        latency_ms: was.latency_ms,
        error_rate: was.error_rate,
        calls_in_window: was.calls_in_window,
        ..now.clone()
    };
    if &same_but_figures != was {
        return true;
    }
    let ((l0, e0, c0), (l1, e1, c1)) = (figures(was), figures(now));
    let latency = match (l0, l1) {
        // Loopback round trips wander by fractions of a millisecond.
        (Some(a), Some(b)) => relative(a, b) && (a - b).abs() > 1.0,
        (a, b) => a.is_some() != b.is_some(),
    };
    let errors = match (e0, e1) {
        (Some(a), Some(b)) => (a - b).abs() > 0.01,
        (a, b) => a.is_some() != b.is_some(),
    };
    latency || errors || relative(c0 as f64, c1 as f64)
}

#[derive(Serialize)]
struct Plugins {
    dir: Option<String>,
    plugins: Vec<crate::plugins::PluginInfo>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
