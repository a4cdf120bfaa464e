//! `vigil events [--follow] [--backend NAME]...`: health transitions from
//! the control API's event stream (`GET /api/v1/events`).
//!
//! The stream opens with a `hello` snapshot holding each backend's recent
//! transitions; those are printed merged and in time order, one line each:
//!
//! ```text
//! 2025-06-01T09:14:03.201Z  search  running     → offline      exited with code 1
//! ```
//!
//! (the time is RFC 3339 in UTC, to the millisecond). Without `--follow`
//! that is all. With it, each `transition` event is printed as it arrives,
//! stdout flushed after every line, until Ctrl-C. When the stream ends
//! (the gateway restarted) or breaks, it reconnects after the delay the
//! stream asked for (`retry:`), doubling while connecting fails, with a
//! note on stderr; the `hello` of the new connection fills in what was
//! missed. A `hello` in the middle of a stream (this client fell behind)
//! does the same. A transition already shown is never shown again.
//!
//! `--json` prints every event, `hello` included, as one JSON line
//! `{"event": ..., "id": ..., "data": ...}` and nothing else on stdout.
//! `--backend` keeps only those backends' transitions (in `--json`, it
//! drops other backends' `transition` events and leaves the rest whole).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{self, Write};
use std::time::Duration;

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::client::{ApiClient, ClientError, Failure, chain};
use super::sse::{SseEvent, SseParser};
use super::table::one_line;
use super::{EventsArgs, Exit};

/// Reconnection delay when the stream never said (`retry:`).
const DEFAULT_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between reconnection attempts.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// Transitions remembered as shown, against repeats.
const SEEN: usize = 4096;
/// The widest state name (`quarantined`), so reasons line up.
const STATE_WIDTH: usize = 11;

/// Where the command's lines go.
pub trait Sink: Send {
    /// Writes `text` (whole lines) to stdout and flushes it. An error
    /// (stdout closed, as under `| head`) ends the command.
    fn out(&mut self, text: &str) -> io::Result<()>;
    /// Writes `text` (whole lines) to stderr.
    fn err(&mut self, text: &str);
}

/// The process's stdout and stderr.
pub struct StdStreams;

impl Sink for StdStreams {
    fn out(&mut self, text: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.flush()
    }

    fn err(&mut self, text: &str) {
        let _ = io::stderr().lock().write_all(text.as_bytes());
    }
}

/// Both streams kept as text.
#[derive(Debug, Default)]
pub struct Collect {
    pub stdout: String,
    pub stderr: String,
}

impl Sink for Collect {
    fn out(&mut self, text: &str) -> io::Result<()> {
        self.stdout.push_str(text);
        Ok(())
    }

    fn err(&mut self, text: &str) {
        self.stderr.push_str(text);
    }
}

/// One transition as the stream sends it (`at` in Unix milliseconds),
/// read leniently: states are kept as text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct TransitionRow {
    pub backend: String,
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub reason: String,
    pub at: i64,
}

#[derive(Deserialize)]
struct Hello {
    #[serde(default)]
    instances: Vec<Named>,
    #[serde(default)]
    transitions: HashMap<String, Vec<TransitionRow>>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct TransitionEvent {
    transition: TransitionRow,
}

/// Runs `vigil events` until it is done, `stop` fires (exit 0), stdout
/// closes (exit 0), or a connection fails in a way that ends it: any
/// failure of the first connection (exit 2, or 4 for a refused token), and
/// a refused token on a reconnection (exit 4). Without `--follow` it is
/// done after the first `hello`; with it, never.
pub async fn run(args: &EventsArgs, sink: &mut dyn Sink, stop: &CancellationToken) -> Exit {
    let client = match ApiClient::new(&args.api.api, args.api.token.clone()) {
        Ok(c) => c,
        Err(e) => return failed(sink, &e),
    };
    let mut state = State::new(args);
    // Failed attempts since the last connection that got its `hello`.
    let mut failures = 0u32;
    loop {
        let attempt = tokio::select! {
            biased;
            _ = stop.cancelled() => return Exit::Ok,
            r = state.session(&client, sink) => r,
        };
        let wait = match attempt {
            Ok(Ended::Done | Ended::Closed) => return Exit::Ok,
            Ok(Ended::Lost(why)) => {
                failures = 0;
                let wait = state.backoff(failures);
                sink.err(&format!(
                    "note: the event stream {why}; reconnecting in {}\n",
                    humantime::format_duration(wait)
                ));
                wait
            }
            Err(e) if state.hellos == 0 || e.failure() == Failure::Refused => {
                return failed(sink, &e);
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = state.backoff(failures);
                let first_line = e.to_string();
                let first_line = first_line.lines().next().unwrap_or_default();
                sink.err(&format!(
                    "note: {first_line}; retrying in {}\n",
                    humantime::format_duration(wait)
                ));
                wait
            }
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => return Exit::Ok,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn failed(sink: &mut dyn Sink, e: &ClientError) -> Exit {
    sink.err(&format!("error: {e}\n"));
    Exit::of(e.failure(), false)
}

/// How one connection ended, once it had its `hello`.
enum Ended {
    /// Not following: the snapshot is printed.
    Done,
    /// Stdout is closed: nobody reads any more.
    Closed,
    /// The stream ended or broke (the text says which, for a note).
    Lost(String),
}

/// What one event asks of the session.
enum Flow {
    Go,
    Stop(Ended),
}

/// What the command keeps across connections.
struct State<'a> {
    args: &'a EventsArgs,
    /// `--backend`, empty for all.
    only: HashSet<&'a str>,
    /// `hello`s received, over all connections.
    hellos: u64,
    /// The reconnection delay the stream asked for.
    retry: Option<Duration>,
    /// Width of the BACKEND column: the longest name in the first `hello`.
    width: usize,
    /// Transitions shown, against repeats (a transition may come in a
    /// snapshot and as an event).
    seen: HashSet<TransitionRow>,
    seen_order: VecDeque<TransitionRow>,
}

// === impl State ===

impl<'a> State<'a> {
    fn new(args: &'a EventsArgs) -> Self {
        State {
            args,
            only: args.backends.iter().map(String::as_str).collect(),
            hellos: 0,
            retry: None,
            width: 0,
            seen: HashSet::new(),
            seen_order: VecDeque::new(),
        }
    }

    /// The wait before the next attempt: the stream's `retry:`, doubled
    /// for each failed attempt, at most [`MAX_RETRY`] (or `retry:` if
    /// that is longer).
    fn backoff(&self, failures: u32) -> Duration {
        let base = self.retry.unwrap_or(DEFAULT_RETRY);
        let doubled = base.saturating_mul(1u32 << failures.min(16));
        doubled.min(MAX_RETRY.max(base))
    }

    /// One connection: connects, reads and prints until it ends.
    ///
    /// # Errors
    ///
    /// Whatever happened before the connection's `hello` was read: no
    /// answer, an error status, not an event stream, a stream that ends or
    /// breaks first, a first event other than a readable `hello`.
    async fn session(
        &mut self,
        client: &ApiClient,
        sink: &mut dyn Sink,
    ) -> Result<Ended, ClientError> {
        let url = client.url(&["events"]).to_string();
        let bad = |reason: String| ClientError::BadAnswer {
            url: url.clone(),
            reason,
        };
        let mut res = client.events().await?;
        let mut parser = SseParser::new();
        let mut greeted = false;
        loop {
            let chunk = match res.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) if greeted => return Ok(Ended::Lost("ended".into())),
                Ok(None) => return Err(bad("the event stream ended before its `hello`".into())),
                Err(e) if greeted => {
                    return Ok(Ended::Lost(format!(
                        "broke ({})",
                        one_line(&chain(&e.without_url()))
                    )));
                }
                Err(e) => {
                    return Err(ClientError::Unreachable {
                        url,
                        reason: chain(&e.without_url()),
                    });
                }
            };
            let events = match parser.push(&chunk) {
                Ok(events) => events,
                Err(e) if greeted => return Ok(Ended::Lost(format!("broke ({e})"))),
                Err(e) => return Err(bad(e.to_string())),
            };
            if let Some(retry) = parser.retry() {
                self.retry = Some(retry);
            }
            for ev in events {
                if !greeted && ev.event != "hello" {
                    return Err(bad(format!(
                        "the first event is `{}`, not `hello`",
                        ev.event
                    )));
                }
                let flow = self.event(&ev, !greeted, sink).map_err(&bad)?;
                greeted = true;
                if let Flow::Stop(end) = flow {
                    return Ok(end);
                }
            }
        }
    }

    /// Prints what `ev` shows. `fresh`: the connection's first event.
    ///
    /// # Errors
    ///
    /// A `hello` that cannot be read (why, for a bad-answer error).
    fn event(&mut self, ev: &SseEvent, fresh: bool, sink: &mut dyn Sink) -> Result<Flow, String> {
        let text = if self.args.api.json {
            self.json_event(ev)?
        } else {
            self.text_event(ev, fresh, sink)?
        };
        if !text.is_empty() && sink.out(&text).is_err() {
            return Ok(Flow::Stop(Ended::Closed));
        }
        if ev.event == "hello" {
            self.hellos += 1;
            if !self.args.follow {
                return Ok(Flow::Stop(Ended::Done));
            }
        }
        Ok(Flow::Go)
    }

    /// `--json`: the event as one line, unless `--backend` drops it.
    fn json_event(&mut self, ev: &SseEvent) -> Result<String, String> {
        if ev.event == "hello" && serde_json::from_str::<serde_json::Value>(&ev.data).is_err() {
            return Err("its `hello` is not JSON".into());
        }
        if ev.event == "transition"
            && !self.only.is_empty()
            && let Ok(t) = serde_json::from_str::<TransitionEvent>(&ev.data)
            && !self.only.contains(t.transition.backend.as_str())
        {
            return Ok(String::new());
        }
        Ok(json_line(ev))
    }

    /// The table lines `ev` adds, and notes on stderr.
    fn text_event(
        &mut self,
        ev: &SseEvent,
        fresh: bool,
        sink: &mut dyn Sink,
    ) -> Result<String, String> {
        match ev.event.as_str() {
            "hello" => {
                let hello: Hello = serde_json::from_str(&ev.data)
                    .map_err(|e| format!("its `hello` is not Vigil's ({e})"))?;
                let first = self.hellos == 0;
                if first {
                    self.width = hello
                        .instances
                        .iter()
                        .map(|i| i.name.chars().count())
                        .max()
                        .unwrap_or(0);
                    let unknown: Vec<&str> = self
                        .args
                        .backends
                        .iter()
                        .map(String::as_str)
                        .filter(|b| !hello.instances.iter().any(|i| i.name == *b))
                        .collect();
                    if !unknown.is_empty() {
                        let known: Vec<&str> =
                            hello.instances.iter().map(|i| i.name.as_str()).collect();
                        sink.err(&format!(
                            "warning: no backend named {} (backends: {})\n",
                            unknown.join(", "),
                            if known.is_empty() {
                                "none".to_owned()
                            } else {
                                known.join(", ")
                            }
                        ));
                    }
                } else if fresh {
                    sink.err("note: reconnected\n");
                } else {
                    sink.err("note: this client fell behind the event stream; resuming from a new snapshot\n");
                }
                let mut recent: Vec<TransitionRow> = hello
                    .transitions
                    .into_values()
                    .flatten()
                    .filter(|t| self.wanted(t) && !self.seen.contains(t))
                    .collect();
                recent.sort_by(|a, b| (a.at, &a.backend).cmp(&(b.at, &b.backend)));
                let mut text = String::new();
                for t in recent {
                    text.push_str(&self.line(&t));
                    self.remember(t);
                }
                if first && text.is_empty() && !self.args.follow {
                    text.push_str("no recent transitions\n");
                }
                Ok(text)
            }
            "transition" => match serde_json::from_str::<TransitionEvent>(&ev.data) {
                Ok(TransitionEvent { transition: t }) => {
                    if !self.wanted(&t) || self.seen.contains(&t) {
                        return Ok(String::new());
                    }
                    let line = self.line(&t);
                    self.remember(t);
                    Ok(line)
                }
                Err(e) => {
                    sink.err(&format!(
                        "warning: skipped a transition event that is not readable ({e})\n"
                    ));
                    Ok(String::new())
                }
            },
            // Figures and plugins: `--json` has them.
            _ => Ok(String::new()),
        }
    }

    fn wanted(&self, t: &TransitionRow) -> bool {
        self.only.is_empty() || self.only.contains(t.backend.as_str())
    }

    fn remember(&mut self, t: TransitionRow) {
        if self.seen.insert(t.clone()) {
            self.seen_order.push_back(t);
        }
        while self.seen_order.len() > SEEN {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }

    fn line(&self, t: &TransitionRow) -> String {
        transition_line(t, self.width)
    }
}

/// `TIME  BACKEND  FROM → TO  REASON`, the backend padded to `width`.
pub fn transition_line(t: &TransitionRow, width: usize) -> String {
    let at = crate::health::unix_ms::from_ms(t.at);
    let line = format!(
        "{}  {:<width$}  {:<sw$} → {:<sw$}  {}",
        humantime::format_rfc3339_millis(at),
        one_line(&t.backend),
        one_line(&t.from),
        one_line(&t.to),
        one_line(&t.reason),
        sw = STATE_WIDTH,
    );
    let mut line = line.trim_end().to_owned();
    line.push('\n');
    line
}

/// `{"event": ..., "id": ..., "data": ...}` and a newline: `data` as the
/// stream sent it when it is JSON (compacted if it spans lines), else as a
/// string; `id` a number (Vigil's ids are), a string, or null.
pub fn json_line(ev: &SseEvent) -> String {
    let data = if serde_json::from_str::<serde::de::IgnoredAny>(&ev.data).is_err() {
        serde_json::Value::String(ev.data.clone()).to_string()
    } else if ev.data.contains(['\n', '\r']) {
        serde_json::from_str::<serde_json::Value>(&ev.data)
            .map(|v| v.to_string())
            .unwrap_or_default()
    } else {
        ev.data.trim().to_owned()
    };
    let id = match &ev.id {
        None => "null".to_owned(),
        Some(id) => match id.parse::<u64>() {
            Ok(n) => n.to_string(),
            Err(_) => serde_json::Value::String(id.clone()).to_string(),
        },
    };
    let event = serde_json::Value::String(ev.event.clone());
    format!("{{\"event\":{event},\"id\":{id},\"data\":{data}}}\n")
}
