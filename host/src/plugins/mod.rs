//! WebAssembly plugins: readiness probes and alert notifiers that operators
//! drop into `[plugins] dir` as `NAME.wasm` (+ optional `NAME.toml`), run
//! sandboxed under wasmtime. The contract is `wit/plugin.wit`.
//!
//! - `engine.rs`: the one engine (pooling allocator, epoch ticker) and the
//!   on-disk cache of compiled code.
//! - `inspect.rs`: what a component is (kind, `vigil:plugin` version,
//!   imports) before anything of it runs.
//! - `manifest.rs`: `NAME.toml`.
//! - `sandbox.rs`: one call's store (limits, deadline, WASI without files or
//!   sockets, HTTP to allowed hosts only); `host_impl.rs`: Vigil's side of
//!   the plugin's imports.
//! - this file: [`Plugins`], the registry: loading the directory (a new
//!   version replaces the old one only once it validated), calling probes,
//!   counting failures and disabling a plugin that keeps failing.
//!
//! A trap, a deadline or memory exhaustion ends that call only; for a probe
//! it means "cannot tell" (`unknown`), never a restart of the backend.

mod bindings;
mod budget;
pub mod engine;
mod host_impl;
mod http_limits;
pub mod inspect;
mod log_rate;
pub mod manifest;
pub mod notify;
mod sandbox;
pub mod scaffold;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::{InstancePre, Linker};

use engine::PluginEngine;
use inspect::Inspection;
use manifest::Manifest;
pub use sandbox::{LimitHit, Target};

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Probe,
    Notifier,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Probe => "probe",
            Kind::Notifier => "notifier",
        })
    }
}

/// A probe plugin's verdict, mapped from its `report`.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Healthy,
    Degraded(String),
    Unhealthy(String),
    /// The probe could not tell, or the plugin failed (trap, deadline,
    /// memory, missing): never a reason to restart a backend.
    Unknown(String),
    /// The plugin says nothing about the backend: it is disabled after
    /// repeated failures (logged, and shown in the API), or the plugin
    /// directory has not finished its first load yet.
    Silent(String),
}

/// One probe call's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeResult {
    pub verdict: Verdict,
    pub latency: Option<Duration>,
    pub detail: Option<String>,
}

/// The states a [`PluginInfo`] can be in.
pub const ACTIVE: &str = "active";
pub const DISABLED: &str = "disabled";
pub const REJECTED: &str = "rejected";
pub const STATES: [&str; 3] = [ACTIVE, DISABLED, REJECTED];

/// What `GET /api/v1/plugins` shows of a plugin.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub kind: Option<Kind>,
    /// The `vigil:plugin` version it was built against.
    pub version: Option<String>,
    /// `active`, `disabled` or `rejected`.
    pub state: &'static str,
    /// Why it is disabled or rejected.
    pub reason: Option<String>,
    pub file: String,
    pub sha256: Option<String>,
    pub calls: u64,
    pub failures: u64,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    /// Milliseconds of the last call.
    pub last_duration_ms: Option<u64>,
    /// Calls that ran into one of the plugin's limits.
    pub limit_hits: u64,
    /// The last limit hit: what happened, and the key to raise.
    pub last_limit: Option<String>,
    #[serde(with = "crate::health::unix_ms")]
    pub loaded_at: SystemTime,
    /// Whether the compiled code came from the on-disk cache.
    pub from_cache: bool,
}

/// A validated, instantiable plugin.
struct Loaded {
    name: String,
    file: PathBuf,
    sha256: String,
    inspection: Inspection,
    manifest: Manifest,
    pre: InstancePre<sandbox::State>,
    loaded_at: SystemTime,
    from_cache: bool,
    stats: Mutex<Stats>,
    budget: Arc<budget::Budget>,
}

#[derive(Default)]
struct Stats {
    calls: u64,
    failures: u64,
    consecutive: u32,
    last_error: Option<String>,
    last_duration: Option<Duration>,
    limit_hits: u64,
    last_limit: Option<String>,
    /// Why the plugin was disabled (too many consecutive failures).
    disabled: Option<String>,
}

/// A file that did not validate (and no older version of it runs).
struct Rejected {
    file: PathBuf,
    reason: String,
    at: SystemTime,
}

pub struct Plugins {
    engine: PluginEngine,
    linker: Linker<sandbox::State>,
    dir: PathBuf,
    loaded: RwLock<BTreeMap<String, Arc<Loaded>>>,
    rejected: RwLock<BTreeMap<String, Rejected>>,
    /// Set once the first scan of the directory finished: until then a
    /// plugin not loaded yet is not "missing".
    scanned: std::sync::atomic::AtomicBool,
}

/// Why the plugin system could not start.
#[derive(Debug, thiserror::Error)]
#[error("plugins: {0}")]
pub struct PluginsError(String);

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Plugins {
    /// The registry of `dir`, compiled code cached under `cache`. Loads
    /// nothing yet: see [`Plugins::scan`].
    pub fn new(dir: PathBuf, cache: Option<PathBuf>) -> Result<Arc<Self>, PluginsError> {
        let engine = PluginEngine::new(cache).map_err(PluginsError)?;
        let linker = sandbox::linker(&engine).map_err(PluginsError)?;
        Ok(Arc::new(Self {
            engine,
            linker,
            dir,
            loaded: RwLock::default(),
            rejected: RwLock::default(),
            scanned: Default::default(),
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Brings the registry in line with the directory: loads new and
    /// changed `.wasm` files (a changed file replaces the running version
    /// only once it validated), drops plugins whose file is gone. Compiling
    /// runs on the blocking pool.
    pub async fn scan(self: &Arc<Self>) {
        let mut seen = std::collections::BTreeSet::new();
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read the plugin directory");
                return;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        for file in files {
            let Some(name) = file.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            seen.insert(name.clone());
            let this = self.clone();
            let f = file.clone();
            let n = name.clone();
            let outcome = tokio::task::spawn_blocking(move || this.load_file(&n, &f))
                .await
                .unwrap_or_else(|e| Err(format!("loading panicked: {e}")));
            self.settle(name, file, outcome);
        }
        let gone: Vec<String> = read(&self.loaded)
            .keys()
            .filter(|n| !seen.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            write(&self.loaded).remove(&name);
            tracing::info!(plugin = %name, "plugin removed (its file is gone)");
        }
        write(&self.rejected).retain(|n, _| seen.contains(n));
        self.scanned
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Records one file's load outcome.
    fn settle(&self, name: String, file: PathBuf, outcome: Result<Option<Loaded>, String>) {
        match outcome {
            Ok(None) => {} // unchanged
            Ok(Some(p)) => {
                tracing::info!(plugin = %name, kind = %p.inspection.kind, version = %p.inspection.version, cached = p.from_cache, "plugin loaded");
                write(&self.rejected).remove(&name);
                write(&self.loaded).insert(name, Arc::new(p));
            }
            Err(reason) => {
                let running = read(&self.loaded).get(&name).cloned();
                match running {
                    Some(old) => {
                        tracing::error!(plugin = %name, file = %file.display(), %reason, "new version of the plugin refused; the previous version keeps running");
                        lock(&old.stats).last_error =
                            Some(format!("new version refused: {reason}"));
                    }
                    None => {
                        tracing::error!(plugin = %name, file = %file.display(), %reason, "plugin refused")
                    }
                }
                write(&self.rejected).insert(
                    name,
                    Rejected {
                        file,
                        reason,
                        at: SystemTime::now(),
                    },
                );
            }
        }
    }

    /// Reads, compiles and validates one plugin; `Ok(None)` when the same
    /// content already runs.
    fn load_file(&self, name: &str, file: &Path) -> Result<Option<Loaded>, String> {
        let bytes =
            std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let manifest_file = file.with_extension("toml");
        let manifest = Manifest::load(&manifest_file).map_err(|e| e.to_string())?;
        if let Some(cur) = read(&self.loaded).get(name)
            && cur.sha256 == sha256
            && cur.manifest == manifest
        {
            return Ok(None);
        }
        self.validate(name, file, bytes, sha256, manifest).map(Some)
    }

    fn validate(
        &self,
        name: &str,
        file: &Path,
        bytes: Vec<u8>,
        sha256: String,
        manifest: Manifest,
    ) -> Result<Loaded, String> {
        let Validated {
            inspection,
            pre,
            from_cache,
        } = validate(&self.engine, &self.linker, &bytes, &manifest)?;
        Ok(Loaded {
            name: name.to_owned(),
            file: file.to_owned(),
            sha256,
            inspection,
            budget: Arc::new(budget::Budget::new(&manifest)),
            manifest,
            pre,
            loaded_at: SystemTime::now(),
            from_cache,
            stats: Mutex::default(),
        })
    }

    /// Every plugin, loaded or rejected, by name.
    pub fn list(&self) -> Vec<PluginInfo> {
        let mut out: BTreeMap<String, PluginInfo> = BTreeMap::new();
        for (name, p) in read(&self.loaded).iter() {
            let s = lock(&p.stats);
            out.insert(
                name.clone(),
                PluginInfo {
                    name: name.clone(),
                    kind: Some(p.inspection.kind),
                    version: Some(p.inspection.version.clone()),
                    state: if s.disabled.is_some() {
                        DISABLED
                    } else {
                        ACTIVE
                    },
                    reason: s.disabled.clone(),
                    file: p.file.display().to_string(),
                    sha256: Some(p.sha256.clone()),
                    calls: s.calls,
                    failures: s.failures,
                    consecutive_failures: s.consecutive,
                    last_error: s.last_error.clone(),
                    last_duration_ms: s.last_duration.map(|d| d.as_millis() as u64),
                    limit_hits: s.limit_hits,
                    last_limit: s.last_limit.clone(),
                    loaded_at: p.loaded_at,
                    from_cache: p.from_cache,
                },
            );
        }
        for (name, r) in read(&self.rejected).iter() {
            if out.contains_key(name) {
                continue; // an older version runs; its last_error says why
            }
            out.insert(
                name.clone(),
                PluginInfo {
                    name: name.clone(),
                    kind: None,
                    version: None,
                    state: REJECTED,
                    reason: Some(r.reason.clone()),
                    file: r.file.display().to_string(),
                    sha256: None,
                    calls: 0,
                    failures: 0,
                    consecutive_failures: 0,
                    last_error: Some(r.reason.clone()),
                    last_duration_ms: None,
                    limit_hits: 0,
                    last_limit: None,
                    loaded_at: r.at,
                    from_cache: false,
                },
            );
        }
        out.into_values().collect()
    }

    /// Runs probe plugin `name` against `target` with `args` over its
    /// manifest's config. Never fails: a missing, disabled or failing
    /// plugin is an `Unknown` verdict saying why. Reasons do not repeat the
    /// plugin's name: the caller prefixes it.
    pub async fn probe(
        &self,
        name: &str,
        target: Target,
        args: &BTreeMap<String, String>,
    ) -> ProbeResult {
        let unknown = |why: String| ProbeResult {
            verdict: Verdict::Unknown(why),
            latency: None,
            detail: None,
        };
        let Some(p) = read(&self.loaded).get(name).cloned() else {
            if !self.scanned.load(std::sync::atomic::Ordering::Acquire) {
                return ProbeResult {
                    verdict: Verdict::Silent("the plugin directory is still loading".into()),
                    latency: None,
                    detail: None,
                };
            }
            let why = match read(&self.rejected).get(name) {
                Some(r) => format!("refused: {}", r.reason),
                None => format!("no such plugin in {}", self.dir.display()),
            };
            return unknown(why);
        };
        if p.inspection.kind != Kind::Probe {
            return unknown(format!("it is a {}, not a probe", p.inspection.kind));
        }
        if let Some(why) = &lock(&p.stats).disabled {
            return ProbeResult {
                verdict: Verdict::Silent(format!("disabled: {why}")),
                latency: None,
                detail: None,
            };
        }
        let mut config: BTreeMap<String, String> = p.manifest.config.clone();
        config.extend(args.iter().map(|(k, v)| (k.clone(), v.clone())));
        let label = format!("{name}@{}", target.name);
        let store = sandbox::store(
            &self.engine,
            &p.manifest,
            label,
            config.into_iter().collect(),
            Some(target),
            p.budget.clone(),
        );
        let pre = p.pre.clone();
        let Call {
            outcome,
            took,
            limit,
        } = run_call(&p, store, async move |store| {
            let instance = bindings::probe::ProbePre::new(pre)?
                .instantiate_async(&mut *store)
                .await?;
            instance.vigil_plugin_prober().call_check(store).await
        })
        .await;
        let max = p.manifest.limits.max_string;
        match outcome {
            Ok(report) => {
                self.record(&p, Ok(()), took, limit.as_ref());
                use bindings::probe::vigil::plugin::types::Status;
                let cut = |s: String| sandbox::bounded(s, max);
                ProbeResult {
                    verdict: match report.status {
                        Status::Healthy => Verdict::Healthy,
                        Status::Degraded(r) => Verdict::Degraded(cut(r)),
                        Status::Unhealthy(r) => Verdict::Unhealthy(cut(r)),
                        Status::Unknown(r) => Verdict::Unknown(cut(r)),
                    },
                    latency: report
                        .latency_ms
                        .map(|ms| Duration::from_millis(u64::from(ms))),
                    detail: report.detail.map(cut),
                }
            }
            Err(why) => {
                self.record(&p, Err(why.clone()), took, limit.as_ref());
                unknown(format!("the call failed: {why}"))
            }
        }
    }

    /// The active notifiers and their filters.
    pub fn notifiers(&self) -> Vec<(String, manifest::Filter)> {
        read(&self.loaded)
            .values()
            .filter(|p| p.inspection.kind == Kind::Notifier && lock(&p.stats).disabled.is_none())
            .map(|p| (p.name.clone(), p.manifest.filter.clone()))
            .collect()
    }

    /// Delivers `event` through notifier `name` once (the caller retries).
    pub async fn notify(&self, name: &str, event: &notify::HealthEvent) -> Result<(), String> {
        let p = read(&self.loaded)
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no notifier plugin '{name}'"))?;
        if let Some(why) = &lock(&p.stats).disabled {
            return Err(format!("notifier '{name}' is disabled: {why}"));
        }
        use bindings::probe::vigil::plugin::types;
        let t = &event.transition;
        let wit = types::Event {
            backend: t.backend.clone(),
            from_state: t.from.as_str().into(),
            to_state: t.to.as_str().into(),
            reason: t.reason.clone(),
            at_ms: crate::health::unix_ms::to_ms(t.at).max(0) as u64,
            generation: event.generation,
            severity: match event.severity {
                manifest::Severity::Info => types::Severity::Info,
                manifest::Severity::Warning => types::Severity::Warning,
                manifest::Severity::Critical => types::Severity::Critical,
            },
        };
        let store = sandbox::store(
            &self.engine,
            &p.manifest,
            name.to_owned(),
            p.manifest.config.clone().into_iter().collect(),
            None,
            p.budget.clone(),
        );
        let pre = p.pre.clone();
        let Call {
            outcome,
            took,
            limit,
        } = run_call(&p, store, async move |store| {
            let instance = bindings::notifier::NotifierPre::new(pre)?
                .instantiate_async(&mut *store)
                .await?;
            instance
                .vigil_plugin_notify_sink()
                .call_notify(store, &wit)
                .await
        })
        .await;
        match outcome {
            // A trap, deadline or memory exhaustion: the plugin's fault.
            Err(why) => {
                self.record(&p, Err(why.clone()), took, limit.as_ref());
                Err(why)
            }
            // The plugin ran and says delivery failed (receiver down, say):
            // not a plugin failure, but the caller retries.
            Ok(Err(why)) => {
                self.record(&p, Ok(()), took, limit.as_ref());
                let why = sandbox::bounded(why, p.manifest.limits.max_string);
                lock(&p.stats).last_error = Some(why.clone());
                Err(why)
            }
            Ok(Ok(())) => {
                self.record(&p, Ok(()), took, limit.as_ref());
                Ok(())
            }
        }
    }

    /// Counts a call; disables the plugin after its manifest's number of
    /// consecutive failures.
    fn record(
        &self,
        p: &Loaded,
        outcome: Result<(), String>,
        took: Duration,
        limit: Option<&LimitHit>,
    ) {
        crate::metrics::get().plugin_call(&p.name, outcome.is_ok(), took);
        let mut s = lock(&p.stats);
        s.calls += 1;
        s.last_duration = Some(took);
        if let Some(hit) = limit {
            s.limit_hits += 1;
            s.last_limit = Some(hit.to_string());
        }
        match outcome {
            Ok(()) => s.consecutive = 0,
            Err(why) => {
                s.failures += 1;
                s.consecutive += 1;
                tracing::warn!(plugin = %p.name, error = %why, consecutive = s.consecutive, "plugin call failed");
                s.last_error = Some(why.clone());
                if s.consecutive >= p.manifest.limits.failures && s.disabled.is_none() {
                    let reason = format!("{} consecutive failures, the last: {why}", s.consecutive);
                    tracing::error!(plugin = %p.name, %reason, "plugin disabled (replace its file or edit its manifest to load it again)");
                    s.disabled = Some(reason);
                }
            }
        }
    }
}

/// A component that passed every check, ready to instantiate.
struct Validated {
    inspection: Inspection,
    pre: InstancePre<sandbox::State>,
    from_cache: bool,
}

/// Compiles (or loads from the cache), inspects, checks against the
/// manifest's kind and links `bytes`: what the directory and `vigil plugin
/// check` both require.
fn validate(
    engine: &PluginEngine,
    linker: &Linker<sandbox::State>,
    bytes: &[u8],
    manifest: &Manifest,
) -> Result<Validated, String> {
    let (component, from_cache) = engine.compile(bytes)?;
    let inspection = inspect::inspect(engine.engine(), &component)?;
    if let Some(k) = manifest.kind
        && k != inspection.kind
    {
        return Err(format!(
            "its manifest says kind = \"{k}\" but the component is a {}",
            inspection.kind
        ));
    }
    let pre = linker
        .instantiate_pre(&component)
        .map_err(|e| format!("cannot be linked: {e:#}"))?;
    Ok(Validated {
        inspection,
        pre,
        from_cache,
    })
}

/// What `vigil plugin check` reports of a valid plugin.
#[derive(Debug)]
pub struct Checked {
    pub inspection: Inspection,
    pub manifest: Manifest,
    pub sha256: String,
}

/// Validates a plugin file (and its manifest) as the plugin directory
/// would, without running any of it: `vigil plugin check`.
pub fn check_file(file: &Path, manifest: Option<&Path>) -> Result<Checked, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let manifest_file = manifest
        .map(Path::to_owned)
        .unwrap_or_else(|| file.with_extension("toml"));
    let manifest = Manifest::load(&manifest_file).map_err(|e| e.to_string())?;
    let engine = PluginEngine::new(None)?;
    let linker = sandbox::linker(&engine)?;
    let Validated { inspection, .. } = validate(&engine, &linker, &bytes, &manifest)?;
    Ok(Checked {
        inspection,
        manifest,
        sha256: hex::encode(Sha256::digest(&bytes)),
    })
}

/// Runs one call of `p` in `store`: instantiation and the export, both
/// under the manifest's limits (a memory cap or deadline can be hit while
/// instantiating, too). The epoch deadline stops guest code; the timeout
/// bounds time spent waiting in host calls (a slow backend or HTTP server).
async fn run_call<T>(
    p: &Loaded,
    mut store: wasmtime::Store<sandbox::State>,
    call: impl AsyncFnOnce(&mut wasmtime::Store<sandbox::State>) -> wasmtime::Result<T>,
) -> Call<T> {
    let deadline = p.manifest.limits.deadline;
    let t0 = tokio::time::Instant::now();
    let outcome = match tokio::time::timeout(deadline + engine::TICK * 2, call(&mut store)).await {
        Ok(r) => r.map_err(|e| describe_trap(&e, deadline)),
        Err(_) => Err(format!(
            "did not finish within its deadline of {}",
            humantime::format_duration(deadline)
        )),
    };
    // A verdict built on a timeout the deadline imposed is the deadline's.
    let outcome = match store.data_mut().cut_short.take() {
        Some(why) if outcome.is_ok() => Err(format!(
            "ran into its deadline of {}: {why}",
            humantime::format_duration(deadline)
        )),
        _ => outcome,
    };
    Call {
        outcome,
        took: t0.elapsed(),
        limit: store.data_mut().limit_hit.take(),
    }
}

/// What [`run_call`] saw of one call.
struct Call<T> {
    outcome: Result<T, String>,
    took: Duration,
    /// The first limit the call ran into, if any.
    limit: Option<LimitHit>,
}

/// What a failed call says: the deadline, the memory cap, or the trap.
fn describe_trap(e: &wasmtime::Error, deadline: Duration) -> String {
    if let Some(trap) = e.downcast_ref::<wasmtime::Trap>() {
        return match trap {
            wasmtime::Trap::Interrupt => format!(
                "stopped at its CPU deadline of {}",
                humantime::format_duration(deadline)
            ),
            wasmtime::Trap::UnreachableCodeReached => {
                "trapped: the plugin panicked or aborted (wasm `unreachable`)".into()
            }
            other => format!("trapped: {other}"),
        };
    }
    // The chain's first line is "error while executing at wasm backtrace"
    // with frames: operators want the cause.
    let cause = e.root_cause().to_string();
    let chain = format!("{e:#}");
    if chain.contains("memory") && (chain.contains("limit") || chain.contains("grow")) {
        return format!("ran out of its memory limit ({cause})");
    }
    cause
}
