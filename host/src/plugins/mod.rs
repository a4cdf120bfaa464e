//! WebAssembly plugins: readiness probes and alert notifiers that operators
//! drop into `[plugins] dir` as `NAME.wasm` (+ optional `NAME.toml`), run
//! sandboxed under wasmtime. The contract is `wit/plugin.wit`.
//!
//! - `engine.rs`: the one engine (pooling allocator, epoch ticker) and the
//!   on-disk cache of compiled code.
//! - `inspect.rs`: what a component is (kind, `vigil:plugin` version,
//!   imports) before anything of it runs.
//! - `manifest.rs`: `NAME.toml`; `allow.rs`: its `[http] allowed_hosts`.
//! - `files.rs`: reading the directory's files (regular files only, never
//!   blocking, up to a cap); `refused.rs`: why a file was refused, logged
//!   once per change of the file.
//! - `sandbox.rs`: one call's store (limits, deadline, WASI without files or
//!   sockets, HTTP to allowed hosts only); `host_impl.rs`: Vigil's side of
//!   the plugin's imports.
//! - `calls.rs`: calling a probe or notifier: admission, the thread it runs
//!   on (`runner.rs`), counting failures and disabling a plugin that keeps
//!   failing; `admission.rs`, `budget.rs`, `limiter.rs`, `http_limits.rs`,
//!   `log_rate.rs`: the limits a call runs under.
//! - this file: [`Plugins`], the registry: loading the directory (a new
//!   version replaces the old one only once it validated) and what
//!   `/api/v1/plugins` shows.
//!
//! A trap, a deadline or memory exhaustion ends that call only; for a probe
//! it means "cannot tell" (`unknown`), never a restart of the backend.

mod admission;
mod allow;
mod bindings;
mod budget;
mod calls;
pub mod engine;
pub mod files;
mod host_impl;
mod http_limits;
pub mod inspect;
mod limiter;
mod log_rate;
pub mod manifest;
pub mod notify;
mod refused;
mod runner;
mod sandbox;
pub mod scaffold;
pub mod watch;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::Linker;

use engine::PluginEngine;
use inspect::Inspection;
use manifest::Manifest;
use refused::{Fingerprint, Refusal, Refused, Said};
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
    /// Calls not run because the plugin's own turns
    /// (`limits.concurrency`) or the host's slots stayed busy for the
    /// call's whole deadline. Never counted as failures.
    pub shed: u64,
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
    pre: World,
    loaded_at: SystemTime,
    from_cache: bool,
    stats: Mutex<Stats>,
    budget: Arc<budget::Budget>,
}

struct Stats {
    calls: u64,
    failures: u64,
    consecutive: u32,
    last_error: Option<String>,
    last_duration: Option<Duration>,
    limit_hits: u64,
    last_limit: Option<String>,
    /// Calls not run for want of capacity, and their log lines' limit.
    shed: u64,
    shed_log: crate::log_limit::LogLimit,
    /// Why the plugin was disabled (too many consecutive failures).
    disabled: Option<String>,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            calls: 0,
            failures: 0,
            consecutive: 0,
            last_error: None,
            last_duration: None,
            limit_hits: 0,
            last_limit: None,
            shed: 0,
            shed_log: crate::log_limit::LogLimit::new(Duration::from_secs(10)),
            disabled: None,
        }
    }
}

/// A file that did not validate (an older version of it may run).
struct Rejected {
    file: PathBuf,
    reason: String,
    /// When it was first refused in this state (see `said`).
    at: SystemTime,
    /// What was logged about it: the same refusal of the same files is
    /// not logged again (`refused.rs`).
    said: Said,
}

pub struct Plugins {
    engine: PluginEngine,
    linker: Linker<sandbox::State>,
    /// The threads calls run on, apart from the gateway's.
    runner: runner::Runner,
    admission: admission::Admission,
    dir: PathBuf,
    /// `[plugins] max_file_bytes`: larger `.wasm` files are refused unread.
    max_file_bytes: u64,
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
    /// The registry of `dir`, compiled code cached under `cache`, plugin
    /// files of at most `max_file_bytes`, calls run on `threads` plugin
    /// threads (`None`: the default). Loads nothing yet: see
    /// [`Plugins::scan`].
    pub fn new(
        dir: PathBuf,
        cache: Option<PathBuf>,
        threads: Option<usize>,
        max_file_bytes: u64,
    ) -> Result<Arc<Self>, PluginsError> {
        let engine = PluginEngine::new(cache).map_err(PluginsError)?;
        let linker = sandbox::linker(&engine).map_err(PluginsError)?;
        let runner = runner::Runner::new(threads.unwrap_or_else(runner::default_threads))
            .map_err(PluginsError)?;
        Ok(Arc::new(Self {
            engine,
            linker,
            runner,
            admission: admission::Admission::default(),
            dir,
            max_file_bytes,
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
    /// only once it validated), drops plugins whose file is gone.
    ///
    /// Nothing here may hold the watcher for good: files are read by
    /// [`files::read`] (regular files only, `O_NONBLOCK`, at most the cap),
    /// on the blocking pool, and a listing or read that still takes longer
    /// than [`READ_TIMEOUT`] (a hung network mount) is given up on: the
    /// directory is left as it is, or that file is refused, and the scan
    /// goes on. Compiling runs on the blocking pool too, without a timeout:
    /// a large component may take seconds, and it ends.
    pub async fn scan(self: &Arc<Self>) {
        let mut seen = std::collections::BTreeSet::new();
        let dir = self.dir.clone();
        let listed = tokio::time::timeout(
            READ_TIMEOUT,
            tokio::task::spawn_blocking(move || wasm_files(&dir)),
        )
        .await;
        let files = match listed {
            Ok(Ok(Ok(files))) => files,
            Ok(Ok(Err(e))) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot read the plugin directory");
                return;
            }
            Ok(Err(e)) => {
                tracing::error!(dir = %self.dir.display(), error = %e, "listing the plugin directory failed");
                return;
            }
            Err(_) => {
                tracing::error!(dir = %self.dir.display(), timeout = ?READ_TIMEOUT, "listing the plugin directory takes too long (a hung file system?); trying again at the next change");
                return;
            }
        };
        for file in files {
            let Some(name) = file.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
                continue;
            };
            seen.insert(name.clone());
            let outcome = self.load_file(&name, &file).await;
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

    /// Records one file's load outcome. A refusal is logged once per
    /// change of the file (or of the kind of refusal), not at every scan:
    /// see `refused.rs`.
    fn settle(&self, name: String, file: PathBuf, outcome: Result<Option<Loaded>, Refused>) {
        match outcome {
            Ok(None) => {
                // Unchanged, or back to the version that runs.
                write(&self.rejected).remove(&name);
            }
            Ok(Some(p)) => {
                tracing::info!(plugin = %name, kind = %p.inspection.kind, version = %p.inspection.version, cached = p.from_cache, "plugin loaded");
                write(&self.rejected).remove(&name);
                write(&self.loaded).insert(name, Arc::new(p));
            }
            Err(refused) => {
                let said = refused.said();
                let reason = refused.why.to_string();
                let before = read(&self.rejected)
                    .get(&name)
                    .filter(|r| r.said == said)
                    .map(|r| r.at);
                let running = read(&self.loaded).get(&name).cloned();
                if let Some(old) = &running {
                    lock(&old.stats).last_error = Some(format!("new version refused: {reason}"));
                }
                if before.is_none() {
                    match running {
                        Some(_) => {
                            tracing::error!(plugin = %name, file = %file.display(), %reason, "new version of the plugin refused; the previous version keeps running");
                        }
                        None => {
                            tracing::error!(plugin = %name, file = %file.display(), %reason, "plugin refused")
                        }
                    }
                }
                write(&self.rejected).insert(
                    name,
                    Rejected {
                        file,
                        reason,
                        at: before.unwrap_or_else(SystemTime::now),
                        said,
                    },
                );
            }
        }
    }

    /// Reads, compiles and validates one plugin; `Ok(None)` when the same
    /// content already runs. Reading and compiling run on the blocking
    /// pool; the read is bounded by [`READ_TIMEOUT`] (see [`Plugins::scan`]).
    async fn load_file(
        self: &Arc<Self>,
        name: &str,
        file: &Path,
    ) -> Result<Option<Loaded>, Refused> {
        let (f, max) = (file.to_owned(), self.max_file_bytes);
        let (files, read_outcome) = tokio::time::timeout(
            READ_TIMEOUT,
            tokio::task::spawn_blocking(move || {
                let files = Fingerprint::of(&f, &f.with_extension("toml"));
                (files, read_plugin(&f, max))
            }),
        )
        .await
        .map_err(|_| {
            Refused::new(
                Refusal::ReadTimeout {
                    file: file.to_owned(),
                    timeout: READ_TIMEOUT,
                },
                None,
            )
        })?
        .map_err(|e| {
            Refused::new(
                Refusal::Crashed {
                    what: "reading failed",
                    error: e.to_string(),
                },
                None,
            )
        })?;
        let (bytes, manifest) =
            read_outcome.map_err(|why| Refused::new(why, Some(files.clone())))?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        if let Some(cur) = read(&self.loaded).get(name)
            && cur.sha256 == sha256
            && cur.manifest == manifest
        {
            return Ok(None);
        }
        let files = files.with_content(&sha256);
        let (this, n, f) = (self.clone(), name.to_owned(), file.to_owned());
        tokio::task::spawn_blocking(move || this.validate(&n, &f, bytes, sha256, manifest))
            .await
            .unwrap_or_else(|e| {
                Err(Refusal::Crashed {
                    what: "loading panicked",
                    error: e.to_string(),
                })
            })
            .map(Some)
            .map_err(|why| Refused::new(why, Some(files)))
    }

    fn validate(
        &self,
        name: &str,
        file: &Path,
        bytes: Vec<u8>,
        sha256: String,
        manifest: Manifest,
    ) -> Result<Loaded, Refusal> {
        let Validated {
            inspection,
            pre,
            from_cache,
        } = validate(&self.engine, &self.linker, &bytes, &manifest).map_err(Refusal::Invalid)?;
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
                    shed: s.shed,
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
                    shed: 0,
                    loaded_at: r.at,
                    from_cache: false,
                },
            );
        }
        out.into_values().collect()
    }
}

/// A component that passed every check, ready to instantiate.
struct Validated {
    inspection: Inspection,
    pre: World,
    from_cache: bool,
}

/// A plugin linked and type-checked against its world once, at load, so a
/// call only instantiates.
#[derive(Clone)]
enum World {
    Probe(bindings::probe::ProbePre<sandbox::State>),
    Notifier(bindings::notifier::NotifierPre<sandbox::State>),
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
    limiter::check(&component, manifest.limits.memory)?;
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
    let typed = |e: wasmtime::Error| {
        format!(
            "its exports do not match the {} world: {e:#}",
            inspection.kind
        )
    };
    let pre = match inspection.kind {
        Kind::Probe => World::Probe(bindings::probe::ProbePre::new(pre).map_err(typed)?),
        Kind::Notifier => {
            World::Notifier(bindings::notifier::NotifierPre::new(pre).map_err(typed)?)
        }
    };
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
/// would, without running any of it: `vigil plugin check`. `max_file_bytes`
/// as `[plugins] max_file_bytes`.
pub fn check_file(
    file: &Path,
    manifest: Option<&Path>,
    max_file_bytes: u64,
) -> Result<Checked, String> {
    let bytes = read_wasm(file, max_file_bytes)?;
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

/// Longest the scan waits for the plugin directory's listing or for one
/// file's read (files are regular files, read without blocking, so only a
/// hung file system takes this long).
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The `.wasm` paths in `dir`, sorted.
fn wasm_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    files.sort();
    Ok(files)
}

/// How to raise the cap a plugin file was over.
const MAX_FILE_HINT: &str = "; raise [plugins] max_file_bytes (for `vigil plugin check`: --max-file-bytes) if the plugin really is this large";

/// A plugin file's bytes (see `files.rs`), or why not.
fn read_wasm(file: &Path, max: u64) -> Result<Vec<u8>, String> {
    files::read(file, max, MAX_FILE_HINT).map_err(|error| {
        Refusal::Unreadable {
            file: file.to_owned(),
            error,
        }
        .to_string()
    })
}

/// A plugin's file and its manifest (`NAME.toml` beside it), read.
fn read_plugin(file: &Path, max: u64) -> Result<(Vec<u8>, Manifest), Refusal> {
    let bytes = files::read(file, max, MAX_FILE_HINT).map_err(|error| Refusal::Unreadable {
        file: file.to_owned(),
        error,
    })?;
    let manifest = Manifest::load(&file.with_extension("toml"))?;
    Ok((bytes, manifest))
}
