//! Calling plugins: a probe's check, a notifier's delivery. Each call is
//! admitted ([`super::admission`]), gets a fresh store and instance, runs
//! under its manifest's limits ([`super::runner`] decides on which thread),
//! and is counted: failures (a trap, the deadline, the memory cap) count
//! against the plugin and disable it after `limits.failures` in a row;
//! calls shed for want of host capacity never do.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{
    Kind, LimitHit, Loaded, Plugins, ProbeResult, Target, Verdict, World, bindings, engine,
    limiter, lock, manifest, notify, read, sandbox,
};

impl Plugins {
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
        let World::Probe(pre) = p.pre.clone() else {
            return unknown(format!("it is a {}, not a probe", p.inspection.kind));
        };
        let q = p.clone();
        let job = async move {
            run_call(&q, store, async move |store| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.vigil_plugin_prober().call_check(store).await
            })
            .await
        };
        let Call {
            outcome,
            took,
            limit,
        } = match self.call(&p, job).await {
            Ok(call) => call,
            Err(hit) => {
                return ProbeResult {
                    verdict: Verdict::Silent(format!("not run: {hit}")),
                    latency: None,
                    detail: None,
                };
            }
        };
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
        let World::Notifier(pre) = p.pre.clone() else {
            return Err(format!(
                "'{name}' is a {}, not a notifier",
                p.inspection.kind
            ));
        };
        let q = p.clone();
        let job = async move {
            run_call(&q, store, async move |store| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance
                    .vigil_plugin_notify_sink()
                    .call_notify(store, &wit)
                    .await
            })
            .await
        };
        let Call {
            outcome,
            took,
            limit,
        } = self
            .call(&p, job)
            .await
            .map_err(|hit| format!("not run: {hit}"))?;
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

    /// Admits `job`, one call of `p`, and runs it on the plugin threads.
    /// `Err`: it was shed (counted and shown, never a failure of the
    /// plugin's). The job owns its admission: a caller that stops waiting
    /// frees nothing early, the call still ends by its deadline.
    async fn call<T: Send + 'static>(
        &self,
        p: &Arc<Loaded>,
        job: impl Future<Output = Call<T>> + Send + 'static,
    ) -> Result<Call<T>, LimitHit> {
        let wait = p.manifest.limits.deadline;
        let ticket = match self
            .admission
            .admit(&p.budget.calls, p.manifest.limits.concurrency, wait)
            .await
        {
            Ok(t) => t,
            Err(hit) => {
                self.shed(p, &hit);
                return Err(hit);
            }
        };
        let job = async move {
            let _ticket = ticket;
            job.await
        };
        Ok(self.runner.run(job).await.unwrap_or_else(|why| Call {
            outcome: Err(why),
            took: Duration::ZERO,
            limit: None,
        }))
    }

    /// Counts a call that was not run for want of capacity.
    fn shed(&self, p: &Loaded, hit: &LimitHit) {
        let mut s = lock(&p.stats);
        s.shed += 1;
        s.limit_hits += 1;
        s.last_limit = Some(hit.to_string());
        let now = tokio::time::Instant::now();
        if let Some(more) = s.shed_log.admit(now) {
            tracing::warn!(plugin = %p.name, limit = %hit.key, shed = s.shed, more, "plugin call shed: {}", hit.detail);
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
        Ok(r) => r.map_err(|e| match resource_limit(&e, &p.manifest.limits) {
            Some(hit) => {
                let why = format!("ran out of host resources: {hit}");
                store.data_mut().hit_limit(hit.key, hit.detail);
                why
            }
            None => describe_trap(&e, deadline),
        }),
        // Guest code that ran into a tick just before: it was spinning,
        // and the thread it ran on was busy with other work (the epoch
        // check never came round). Otherwise it was waiting in a host call.
        Err(_)
            if store
                .data()
                .last_guest_tick
                .is_some_and(|at| at.elapsed() <= engine::TICK * 5) =>
        {
            Err(format!(
                "stopped at its CPU deadline of {}",
                humantime::format_duration(deadline)
            ))
        }
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
        limit: store.data().limit_hit.take(),
    }
}

/// What [`run_call`] saw of one call.
struct Call<T> {
    outcome: Result<T, String>,
    took: Duration,
    /// The first limit the call ran into, if any.
    limit: Option<LimitHit>,
}

/// The host-resource limit a trap `e` is, if it is one: the resource
/// table refusing one more entry, or a header map past its size.
fn resource_limit(e: &wasmtime::Error, limits: &manifest::Limits) -> Option<LimitHit> {
    use wasmtime::component::ResourceTableError;
    e.chain().find_map(|c| {
        if let Some(ResourceTableError::Full) = c.downcast_ref::<ResourceTableError>() {
            return Some(LimitHit {
                key: "limits.host_resources",
                detail: format!(
                    "it held {} host resources (headers, requests, bodies, streams, pollables) at once",
                    limits.host_resources
                ),
            });
        }
        if let Some(wasmtime_wasi_http::FieldMapError::TotalSizeTooBig) = c.downcast_ref() {
            return Some(LimitHit {
                key: "host headers per map",
                detail: format!(
                    "it put more than {} KiB into one header map",
                    sandbox::HEADERS_SIZE >> 10
                ),
            });
        }
        None
    })
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
    if let Some(limit) = e
        .chain()
        .find_map(|c| c.downcast_ref::<limiter::MemoryLimit>())
    {
        return limit.to_string();
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
