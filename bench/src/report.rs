//! Turning samples into figures: per-round lines, a summary table per pair
//! and session count (rounds merged), the ratios against the goals, JSON.

use std::fmt::{self, Write as _};

use serde_json::json;

use crate::load::Sample;
use crate::machine::Machine;
use crate::stats::Latency;
use crate::{Args, GOAL_P50_OVERHEAD_SESSIONS, GOAL_P50_OVERHEAD_US, GOAL_VIGIL_CPU_US};

/// Which client and backend drive a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pair {
    /// rmcp's client against the demo backend (an rmcp server).
    Rmcp,
    /// The bench's lean client against its lean backend.
    Lean,
    /// The lean backend over stdio: Vigil runs it as a stdio backend and
    /// the lean client calls through Vigil; directly, the bench drives its
    /// pipes itself.
    LeanStdio,
}

impl Pair {
    /// Goal: through-Vigil throughput at least this fraction of direct
    /// (`None`: no goal).
    pub fn throughput_goal(self) -> Option<f64> {
        match self {
            Self::Rmcp => Some(crate::GOAL_THROUGHPUT_RATIO_RMCP),
            Self::Lean => Some(crate::GOAL_THROUGHPUT_RATIO_LEAN),
            Self::LeanStdio => None,
        }
    }
}

impl fmt::Display for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Rmcp => "rmcp",
            Self::Lean => "lean",
            Self::LeanStdio => "lean-stdio",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    Direct,
    Vigil,
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Direct => "direct",
            Self::Vigil => "vigil",
        })
    }
}

/// Figures common to one round and to merged rounds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// Successful calls completed inside the measured windows.
    pub calls: u64,
    pub errors: u64,
    pub seconds: f64,
    pub throughput: f64,
    pub latency: Latency,
    /// CPU microseconds per completed call, per process.
    pub cpu_client_us: f64,
    pub cpu_vigil_us: f64,
    pub cpu_backend_us: f64,
    /// Fraction of the machine's CPUs busy.
    pub busy: f64,
    /// CPUs' worth of time taken by other processes.
    pub other_cores: f64,
}

impl Figures {
    fn of(samples: &[&Sample]) -> Self {
        let mut lat: Vec<u64> = samples
            .iter()
            .flat_map(|s| s.latencies_ns.iter().copied())
            .collect();
        lat.sort_unstable();
        let calls: u64 = samples.iter().map(|s| s.completed).sum();
        let seconds: f64 = samples.iter().map(|s| s.window.as_secs_f64()).sum();
        let per_call = |cpu: f64| {
            if calls == 0 {
                0.0
            } else {
                cpu * 1e6 / calls as f64
            }
        };
        Self {
            calls,
            errors: samples.iter().map(|s| s.errors).sum(),
            seconds,
            throughput: if seconds > 0.0 {
                calls as f64 / seconds
            } else {
                0.0
            },
            latency: Latency::of(&lat),
            cpu_client_us: per_call(samples.iter().map(|s| s.cpu_client).sum()),
            cpu_vigil_us: per_call(samples.iter().map(|s| s.cpu_vigil).sum()),
            cpu_backend_us: per_call(samples.iter().map(|s| s.cpu_backend).sum()),
            busy: samples
                .iter()
                .map(|s| s.machine_busy * s.window.as_secs_f64())
                .sum::<f64>()
                / seconds.max(f64::MIN_POSITIVE),
            other_cores: samples
                .iter()
                .map(|s| s.other_cores * s.window.as_secs_f64())
                .sum::<f64>()
                / seconds.max(f64::MIN_POSITIVE),
        }
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "calls": self.calls,
            "errors": self.errors,
            "seconds": self.seconds,
            "throughput_per_s": self.throughput,
            "latency_us": {
                "p50": self.latency.p50, "p90": self.latency.p90, "p99": self.latency.p99,
                "max": self.latency.max, "mean": self.latency.mean,
            },
            "cpu_us_per_call": {
                "client": self.cpu_client_us, "vigil": self.cpu_vigil_us, "backend": self.cpu_backend_us,
            },
            "machine_busy": self.busy,
            "other_processes_cores": self.other_cores,
        })
    }
}

/// One pair, one target, one session count, one round.
pub struct Measurement {
    pub pair: Pair,
    pub kind: TargetKind,
    pub sessions: u32,
    pub round: u32,
    pub sample: Sample,
    pub figures: Figures,
}

impl Measurement {
    pub fn new(pair: Pair, kind: TargetKind, sessions: u32, round: u32, sample: Sample) -> Self {
        let figures = Figures::of(&[&sample]);
        Self {
            pair,
            kind,
            sessions,
            round,
            sample,
            figures,
        }
    }

    /// One line for the progress output.
    pub fn line(&self) -> String {
        let f = &self.figures;
        let mut s = format!(
            "{}  sessions {:>4}  round {}  {:<6}  {:>8} calls  {:>9.1} calls/s  p50 {:>8.1}  p90 {:>8.1}  p99 {:>8.1}  max {:>9.1} µs  \
             CPU µs/call client {:>6.1} vigil {:>6.1} backend {:>6.1}  busy {:>3.0}% (others {:.2} CPUs)",
            self.pair,
            self.sessions,
            self.round,
            self.kind,
            f.calls,
            f.throughput,
            f.latency.p50,
            f.latency.p90,
            f.latency.p99,
            f.latency.max,
            f.cpu_client_us,
            f.cpu_vigil_us,
            f.cpu_backend_us,
            f.busy * 100.0,
            f.other_cores,
        );
        if f.errors > 0 {
            let _ = write!(
                s,
                "  ERRORS {} (first: {})",
                f.errors,
                self.sample.first_error.as_deref().unwrap_or("?")
            );
        }
        s
    }
}

/// Both targets of one pair at one session count, rounds merged.
pub struct Row {
    pub pair: Pair,
    pub sessions: u32,
    pub direct: Figures,
    pub vigil: Figures,
}

impl Row {
    pub fn throughput_ratio(&self) -> f64 {
        if self.direct.throughput > 0.0 {
            self.vigil.throughput / self.direct.throughput
        } else {
            0.0
        }
    }
    pub fn p50_overhead_us(&self) -> f64 {
        self.vigil.latency.p50 - self.direct.latency.p50
    }
    pub fn p99_overhead_us(&self) -> f64 {
        self.vigil.latency.p99 - self.direct.latency.p99
    }
    /// `None` where the pair has no throughput goal.
    pub fn throughput_met(&self) -> Option<bool> {
        self.pair
            .throughput_goal()
            .map(|goal| self.throughput_ratio() >= goal)
    }
    /// The p50 goal holds at one session count only: above it the
    /// overhead is mostly queueing behind saturated CPUs.
    pub fn p50_met(&self) -> Option<bool> {
        (self.sessions == GOAL_P50_OVERHEAD_SESSIONS)
            .then(|| self.p50_overhead_us() <= GOAL_P50_OVERHEAD_US)
    }
    pub fn vigil_cpu_met(&self) -> bool {
        self.vigil.cpu_vigil_us <= GOAL_VIGIL_CPU_US
    }
}

pub struct Summary {
    pub rows: Vec<Row>,
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

impl Summary {
    pub fn new(measurements: &[Measurement]) -> Self {
        // Pairs in the order they ran, then session counts.
        let mut keys: Vec<(Pair, u32)> = Vec::new();
        for m in measurements {
            if !keys.contains(&(m.pair, m.sessions)) {
                keys.push((m.pair, m.sessions));
            }
        }
        keys.sort_by_key(|&(pair, _)| measurements.iter().position(|m| m.pair == pair));
        let rows = keys
            .into_iter()
            .map(|(pair, n)| {
                let of = |kind| {
                    let samples: Vec<&Sample> = measurements
                        .iter()
                        .filter(|m| m.pair == pair && m.sessions == n && m.kind == kind)
                        .map(|m| &m.sample)
                        .collect();
                    Figures::of(&samples)
                };
                Row {
                    pair,
                    sessions: n,
                    direct: of(TargetKind::Direct),
                    vigil: of(TargetKind::Vigil),
                }
            })
            .collect();
        Self { rows }
    }

    /// The results table, in Markdown.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| pair | sessions | target | calls | calls/s | p50 µs | p90 µs | p99 µs | CPU µs/call: client / vigil / backend | machine busy (other procs, CPUs) |\n\
             |---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rows {
            for (kind, f) in [
                (TargetKind::Direct, &r.direct),
                (TargetKind::Vigil, &r.vigil),
            ] {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {}{} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} / {:.0} | {:.0}% ({:.2}) |",
                    r.pair,
                    r.sessions,
                    kind,
                    f.calls,
                    if f.errors > 0 {
                        format!(" ({} errors)", f.errors)
                    } else {
                        String::new()
                    },
                    f.throughput,
                    f.latency.p50,
                    f.latency.p90,
                    f.latency.p99,
                    f.cpu_client_us,
                    f.cpu_vigil_us,
                    f.cpu_backend_us,
                    f.busy * 100.0,
                    f.other_cores,
                );
            }
        }
        s
    }

    /// The ratios against the goals, in Markdown.
    pub fn goals(&self) -> String {
        let mut s = format!(
            "| pair | sessions | throughput vigil/direct (goal: rmcp ≥ {:.2}, lean ≥ {:.2}) | p50 overhead µs (goal ≤ {GOAL_P50_OVERHEAD_US:.0} at {GOAL_P50_OVERHEAD_SESSIONS} session) | p99 overhead µs | Vigil CPU µs/call (goal ≤ {GOAL_VIGIL_CPU_US:.0}) |\n\
             |---|---:|---:|---:|---:|---:|\n",
            crate::GOAL_THROUGHPUT_RATIO_RMCP,
            crate::GOAL_THROUGHPUT_RATIO_LEAN,
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {:.2} ({}) | {:+.0}{} | {:+.0} | {:.0} ({}) |",
                r.pair,
                r.sessions,
                r.throughput_ratio(),
                r.throughput_met().map_or("no goal", met),
                r.p50_overhead_us(),
                r.p50_met()
                    .map_or(String::new(), |ok| format!(" ({})", met(ok))),
                r.p99_overhead_us(),
                r.vigil.cpu_vigil_us,
                met(r.vigil_cpu_met()),
            );
        }
        s
    }
}

pub fn json(
    machine: &Machine,
    args: &Args,
    measurements: &[Measurement],
    summary: &Summary,
) -> serde_json::Value {
    json!({
        "machine": machine,
        "plan": {
            "sessions": args.sessions,
            "rounds": args.rounds,
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "payload_bytes": args.payload,
            "keep_alive": args.keep_alive,
            "backend_keep_alive": args.backend_keep_alive,
            "call_tool": args.call_tool,
            "pairs": args.pairs().iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            "pin_vigil": args.pin_vigil.as_ref().map(|c| &c.0),
            "pin_load": args.pin_load.as_ref().map(|c| &c.0),
        },
        "goals": {
            "throughput_ratio_min": {
                "rmcp": Pair::Rmcp.throughput_goal(),
                "lean": Pair::Lean.throughput_goal(),
                "lean-stdio": Pair::LeanStdio.throughput_goal(),
            },
            "p50_overhead_us_max": GOAL_P50_OVERHEAD_US,
            "p50_overhead_at_sessions": GOAL_P50_OVERHEAD_SESSIONS,
            "vigil_cpu_us_per_call_max": GOAL_VIGIL_CPU_US,
        },
        "rounds": measurements.iter().map(|m| json!({
            "pair": m.pair.to_string(), "sessions": m.sessions, "round": m.round, "target": m.kind.to_string(), "figures": m.figures.json(),
        })).collect::<Vec<_>>(),
        "summary": summary.rows.iter().map(|r| json!({
            "pair": r.pair.to_string(),
            "sessions": r.sessions,
            "direct": r.direct.json(),
            "vigil": r.vigil.json(),
            "throughput_ratio": r.throughput_ratio(),
            "throughput_goal_met": r.throughput_met(),
            "p50_overhead_us": r.p50_overhead_us(),
            "p50_goal_met": r.p50_met(),
            "p99_overhead_us": r.p99_overhead_us(),
            "vigil_cpu_goal_met": r.vigil_cpu_met(),
        })).collect::<Vec<_>>(),
    })
}
