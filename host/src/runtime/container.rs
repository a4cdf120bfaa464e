//! Container runtime: runs a backend as a container through the Docker
//! Engine API (bollard).
//!
//! Each backend has at most one container, named `vigil-<backend>` and
//! labelled `vigil.backend=<backend>` and `vigil.managed=true` (plus the
//! operator's `labels`). [`ContainerRuntime::start`] force-removes any
//! previous container of that name, creates a new one from the configured
//! image (entrypoint override `command`, arguments `args`, `env`), starts it
//! and hands back the backend's configured `url`: Vigil speaks MCP to a
//! container over **streamable HTTP on the container's port**, never over an
//! attached stdio stream, so a container can be re-attached to after a
//! gateway restart and probed like any HTTP backend.
//!
//! Reaching the container's port:
//! - `network = "host"`: the container shares the host's network; the server
//!   in it listens on a host port (loopback is enough) and `port` is not
//!   published (there is nothing to publish).
//! - otherwise, with `port` set, that container port is published on
//!   `127.0.0.1:<port>` of the host (same number), never on all interfaces.
//!
//! The engine is found like the Docker CLI finds it: `DOCKER_HOST`
//! (`unix:///path`, `tcp://host:port`, `http://...`), else
//! `unix:///var/run/docker.sock`. Podman's Docker-compatible service works
//! the same way (`scripts/container-engine.sh` starts one for the tests).
//! The connection is made lazily on first use, negotiates the API version
//! down to the engine's, and is retried on later calls if it failed. Any
//! failure to reach or understand the engine is
//! [`RuntimeError::Infrastructure`], naming the socket or host that was
//! tried: it says nothing about the backend and is never a reason to
//! restart it.
//!
//! Liveness: after starting, a task watches the engine's event stream for
//! that container (replayed from shortly before the start, so a death in
//! between is not missed) and, on `die` (after an `oom`, if any), inspects
//! the container for its exit code and `OOMKilled` and resolves
//! [`Started::exited`]. If the stream breaks it polls the container every
//! second instead; if the engine stops answering it drops the sender, which
//! tells the supervisor that liveness is unknown.
//!
//! Images are never pulled: a missing image is [`RuntimeError::Failed`]
//! asking the operator to build or load it into the engine.
//!
//! Exit codes: engines report a main process killed by signal N as exit code
//! `128 + N` (137 for SIGKILL); [`Exit`] carries both the code and that
//! signal.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::errors::Error as EngineError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HostConfig,
    PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptions, EventsOptions, RemoveContainerOptions, StopContainerOptions,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use tokio::sync::oneshot;

use super::{Endpoint, Exit, Inspection, Runtime, RuntimeError, Started, describe_exit};
use crate::config::ContainerSpec;

/// Where the engine is when `DOCKER_HOST` is not set.
const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";
/// Timeout of one ordinary engine API call.
const API_TIMEOUT: Duration = Duration::from_secs(60);
/// Seconds `stop` gives the container's process between SIGTERM and SIGKILL.
const STOP_TIMEOUT_SECS: i32 = 5;
/// How far back the event stream is replayed from, before the start.
const EVENTS_REPLAY: Duration = Duration::from_secs(60);
/// Interval of the polling fallback of the exit watcher.
const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Consecutive failed polls after which liveness is given up as unknown.
const POLL_FAILURES: u32 = 3;

/// The connected engine clients, by address (see `ContainerRuntime::docker`).
static ENGINES: Mutex<BTreeMap<String, Docker>> = Mutex::new(BTreeMap::new());

/// Runs one backend as a container through the Docker Engine API.
pub struct ContainerRuntime {
    backend: String,
    container: String,
    spec: ContainerSpec,
    url: String,
    headers: BTreeMap<String, String>,
    /// The host port `spec.port` is published on: the same number, but
    /// another for a candidate ([`ContainerRuntime::candidate`]).
    host_port: Option<u16>,
    /// Set on a candidate: the label value that marks it as one.
    candidate: Option<String>,
    /// Engine address given explicitly; `None` reads `DOCKER_HOST` at connect time.
    docker_host: Option<String>,
    /// The connected client, once a connection succeeded.
    client: Mutex<Option<Docker>>,
}

impl ContainerRuntime {
    /// Where the backend is reached: its configured URL and headers.
    fn http(&self) -> Endpoint {
        Endpoint::Http {
            url: self.url.clone(),
            headers: self.headers.clone(),
        }
    }

    /// A runtime for `backend`'s container; MCP is spoken to it at `url`
    /// (with `headers`). Does no I/O: the engine is reached on first use.
    pub fn new(
        backend: &str,
        spec: ContainerSpec,
        url: String,
        headers: BTreeMap<String, String>,
    ) -> Self {
        Self {
            backend: backend.to_owned(),
            container: format!("vigil-{backend}"),
            host_port: spec.port,
            spec,
            url,
            headers,
            candidate: None,
            docker_host: None,
            client: Mutex::new(None),
        }
    }

    /// A runtime for a new version of `backend` started beside the one
    /// serving (a blue-green update): its container is `vigil-NAME-TAG`,
    /// labelled `vigil.candidate=TAG`, and publishes `spec.port` on
    /// `host_port` instead, where `url` (already pointing there) reaches
    /// it. Stray candidates are removed by [`ContainerRuntime::sweep`].
    pub fn candidate(
        backend: &str,
        spec: ContainerSpec,
        url: String,
        headers: BTreeMap<String, String>,
        tag: &str,
        host_port: u16,
    ) -> Self {
        Self {
            container: format!("vigil-{backend}-{tag}"),
            host_port: Some(host_port),
            candidate: Some(tag.to_owned()),
            ..Self::new(backend, spec, url, headers)
        }
    }

    /// Force-removes every candidate container of this backend (what an
    /// update interrupted by a stop of Vigil left running); their names.
    pub async fn sweep(&self) -> Result<Vec<String>, RuntimeError> {
        let docker = self.docker().await?;
        let filters = HashMap::from([(
            "label".to_owned(),
            vec![
                format!("vigil.backend={}", self.backend),
                CANDIDATE_LABEL.to_owned(),
            ],
        )]);
        let options = bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let found = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| self.call_error("listing candidates of", e, false))?;
        let mut removed = Vec::new();
        for c in found {
            let Some(id) = c.id else { continue };
            let name = c
                .names
                .and_then(|n| n.into_iter().next())
                .map(|n| n.trim_start_matches('/').to_owned())
                .unwrap_or_else(|| short(&id).to_owned());
            let options = RemoveContainerOptions {
                force: true,
                v: true,
                ..Default::default()
            };
            match docker.remove_container(&id, Some(options)).await {
                Ok(())
                | Err(EngineError::DockerResponseServerError {
                    status_code: 404 | 409,
                    ..
                }) => removed.push(name),
                Err(e) => return Err(self.call_error("removing", e, true)),
            }
        }
        Ok(removed)
    }

    /// Uses this engine address instead of `DOCKER_HOST`
    /// (e.g. `unix:///run/podman/podman.sock`, `tcp://127.0.0.1:2375`).
    pub fn with_docker_host(mut self, host: impl Into<String>) -> Self {
        self.docker_host = Some(host.into());
        self
    }

    /// The container's name: `vigil-<backend>`.
    pub fn container_name(&self) -> &str {
        &self.container
    }

    /// The engine address in use: the explicit one, `DOCKER_HOST`, or the default socket.
    pub fn docker_host(&self) -> String {
        self.docker_host
            .clone()
            .or_else(|| {
                std::env::var("DOCKER_HOST")
                    .ok()
                    .filter(|h| !h.trim().is_empty())
            })
            .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_owned())
    }

    /// The connected client, connecting (and negotiating the API version) if needed.
    async fn docker(&self) -> Result<Docker, RuntimeError> {
        if let Some(docker) = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Ok(docker);
        }
        let host = self.docker_host();
        // One client per engine for the whole process: a runtime made for
        // a new version (an update) finds the version already negotiated
        // (Podman takes a third of a second to answer `GET /version`).
        let known = ENGINES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&host)
            .cloned();
        let docker = match known {
            Some(docker) => docker,
            None => {
                let docker = Docker::connect_with_host(&host)
                    .map_err(|e| self.unreachable(&host, &e))?
                    .with_timeout(API_TIMEOUT);
                // Real Docker Engines refuse a client API version newer than theirs.
                let docker = docker
                    .negotiate_version()
                    .await
                    .map_err(|e| self.unreachable(&host, &e))?;
                ENGINES
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(host, docker.clone());
                docker
            }
        };
        *self.client.lock().unwrap_or_else(|e| e.into_inner()) = Some(docker.clone());
        Ok(docker)
    }

    fn unreachable(&self, host: &str, error: &EngineError) -> RuntimeError {
        RuntimeError::Infrastructure(format!(
            "cannot reach the container engine at {host} (for backend {}): {}; \
             set DOCKER_HOST to the engine's socket or address",
            self.backend,
            engine_message(error)
        ))
    }

    /// An error of an engine call: the engine's own answer is `Failed` when
    /// `answer_is_failure` (the request was about the backend's container and
    /// the engine refused it), anything else is `Infrastructure`.
    fn call_error(&self, what: &str, error: EngineError, answer_is_failure: bool) -> RuntimeError {
        match error {
            EngineError::DockerResponseServerError {
                status_code,
                message,
            } if answer_is_failure => RuntimeError::Failed(format!(
                "{what} container {} failed: {} (engine status {status_code})",
                self.container,
                message.trim()
            )),
            other => RuntimeError::Infrastructure(format!(
                "{what} container {}: the container engine at {} failed: {}",
                self.container,
                self.docker_host(),
                engine_message(&other)
            )),
        }
    }

    fn create_body(&self) -> ContainerCreateBody {
        let spec = &self.spec;
        let mut labels: HashMap<String, String> = spec
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert("vigil.backend".to_owned(), self.backend.clone());
        labels.insert("vigil.managed".to_owned(), "true".to_owned());
        labels.insert(SPEC_LABEL.to_owned(), spec_digest(spec));
        if let Some(tag) = &self.candidate {
            labels.insert(CANDIDATE_LABEL.to_owned(), tag.clone());
        }

        let host_network = spec.network.as_deref() == Some("host");
        let (exposed_ports, port_bindings) = match spec.port {
            Some(port) if !host_network => {
                let key = format!("{port}/tcp");
                let binding = PortBinding {
                    host_ip: Some("127.0.0.1".to_owned()),
                    host_port: Some(self.host_port.unwrap_or(port).to_string()),
                };
                (
                    Some(vec![key.clone()]),
                    Some(HashMap::from([(key, Some(vec![binding]))])),
                )
            }
            _ => (None, None),
        };

        ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint: spec.command.as_ref().map(|command| vec![command.clone()]),
            cmd: (!spec.args.is_empty()).then(|| spec.args.clone()),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            exposed_ports,
            host_config: Some(HostConfig {
                network_mode: spec.network.clone(),
                port_bindings,
                // Vigil alone decides restarts.
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::NO),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Force-removes the container of this backend, if any.
    async fn remove(&self, docker: &Docker) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match docker
            .remove_container(&self.container, Some(options))
            .await
        {
            Ok(()) => Ok(()),
            // Gone already, or being removed by someone else.
            Err(EngineError::DockerResponseServerError {
                status_code: 404 | 409,
                ..
            }) => Ok(()),
            Err(e) => Err(self.call_error("removing", e, true)),
        }
    }

    async fn create(&self, docker: &Docker) -> Result<String, RuntimeError> {
        let options = || CreateContainerOptions {
            name: Some(self.container.clone()),
            ..Default::default()
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match docker
                .create_container(Some(options()), self.create_body())
                .await
            {
                Ok(created) => return Ok(created.id),
                Err(EngineError::DockerResponseServerError {
                    status_code: 404,
                    message,
                }) => {
                    return Err(RuntimeError::Failed(format!(
                        "image {} is not in the container engine at {} ({}): build or load it there \
                         (e.g. `docker build`/`docker load`/`podman import`); Vigil never pulls images",
                        self.spec.image,
                        self.docker_host(),
                        message.trim()
                    )));
                }
                // The old container's name is still being released.
                Err(EngineError::DockerResponseServerError {
                    status_code: 409, ..
                }) if attempt < 5 => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    self.remove(docker).await?;
                }
                Err(e) => return Err(self.call_error("creating", e, true)),
            }
        }
    }

    async fn start_instance(&self) -> Result<Started, RuntimeError> {
        let docker = self.docker().await?;
        self.remove(&docker).await?;
        let id = self.create(&docker).await?;
        let since = SystemTime::now()
            .checked_sub(EVENTS_REPLAY)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        docker
            .start_container(&id, None)
            .await
            .map_err(|e| self.call_error("starting", e, true))?;
        tracing::info!(backend = %self.backend, container = %self.container, id = %short(&id), image = %self.spec.image, "container started");

        let (tx, rx) = oneshot::channel();
        let watcher = Watcher {
            docker,
            backend: self.backend.clone(),
            container: self.container.clone(),
            id: id.clone(),
            since,
        };
        crate::background::spawn(watcher.run(tx));
        Ok(Started {
            endpoint: self.http(),
            exited: rx,
            id,
        })
    }

    /// The container of this backend, if it runs from this spec
    /// ([`SPEC_LABEL`]), watched from now on.
    async fn adopt_instance(&self) -> Result<Option<Started>, RuntimeError> {
        let docker = self.docker().await?;
        let info = match docker.inspect_container(&self.container, None).await {
            Ok(info) => info,
            Err(EngineError::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(None),
            Err(e) => return Err(self.call_error("inspecting", e, false)),
        };
        let running = info.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        let spec = info
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(SPEC_LABEL))
            .cloned();
        let Some(id) = info.id.filter(|_| running) else {
            return Ok(None);
        };
        if spec.as_deref() != Some(spec_digest(&self.spec).as_str()) {
            tracing::info!(backend = %self.backend, container = %self.container, "the running container was made from another configuration: not adopting it");
            return Ok(None);
        }
        let since = SystemTime::now()
            .checked_sub(Duration::from_secs(1))
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let (tx, rx) = oneshot::channel();
        crate::background::spawn(
            Watcher {
                docker,
                backend: self.backend.clone(),
                container: self.container.clone(),
                id: id.clone(),
                since,
            }
            .run(tx),
        );
        tracing::info!(backend = %self.backend, container = %self.container, id = %short(&id), "adopted the running container");
        Ok(Some(Started {
            endpoint: self.http(),
            exited: rx,
            id,
        }))
    }

    async fn stop_instance(&self) -> Result<(), RuntimeError> {
        let docker = self.docker().await?;
        let options = StopContainerOptions {
            t: Some(STOP_TIMEOUT_SECS),
            signal: None,
        };
        match docker.stop_container(&self.container, Some(options)).await {
            // 304: not running.
            Ok(())
            | Err(EngineError::DockerResponseServerError {
                status_code: 304 | 404,
                ..
            }) => {}
            Err(e) => return Err(self.call_error("stopping", e, true)),
        }
        self.remove(&docker).await?;
        tracing::info!(backend = %self.backend, container = %self.container, "container stopped and removed");
        Ok(())
    }

    async fn inspect_instance(&self) -> Result<Inspection, RuntimeError> {
        let docker = self.docker().await?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match docker.inspect_container(&self.container, None).await {
                Ok(info) => return Ok(inspection(&info)),
                Err(EngineError::DockerResponseServerError {
                    status_code: 404, ..
                }) => {
                    return Ok(Inspection {
                        running: false,
                        exit: None,
                        engine_restart_count: None,
                    });
                }
                // Podman reports a container it is tearing down as
                // `stopped`, a state the Docker API (and bollard) does not
                // know; it lasts milliseconds. Ask again before calling the
                // engine broken.
                Err(EngineError::JsonDataError { .. }) if attempt < INSPECT_ATTEMPTS => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(self.call_error("inspecting", e, false)),
            }
        }
    }
}

/// The label that says which configuration a container was made from: a
/// replica taking over supervision adopts a running container only if it
/// is this configuration's ([`spec_digest`]).
const SPEC_LABEL: &str = "vigil.spec";

/// The label of a candidate container (a new version started beside the
/// one serving); its value is the update's tag.
const CANDIDATE_LABEL: &str = "vigil.candidate";

/// A digest of what a container is made from (image, entrypoint,
/// arguments, environment, labels, port, network): hex SHA-256, 32
/// digits. Each part is length-prefixed, so no two specs share one.
fn spec_digest(spec: &ContainerSpec) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut part = |s: &str| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    part(&spec.image);
    part(spec.command.as_deref().unwrap_or("\0none"));
    part(&spec.args.len().to_string());
    spec.args.iter().for_each(|a| part(a));
    for map in [&spec.env, &spec.labels] {
        part(&map.len().to_string());
        for (k, v) in map {
            part(k);
            part(v);
        }
    }
    part(&spec.port.map(|p| p.to_string()).unwrap_or_default());
    part(spec.network.as_deref().unwrap_or(""));
    hex::encode(&h.finalize()[..16])
}

/// Inspections per probe (50 ms apart) when the engine's answer cannot be read.
const INSPECT_ATTEMPTS: u32 = 40;

impl Runtime for ContainerRuntime {
    fn kind(&self) -> &'static str {
        "container"
    }

    fn binds_after_start(&self) -> bool {
        true
    }

    fn replica_local(&self) -> bool {
        false
    }

    fn endpoint(&self) -> Option<Endpoint> {
        Some(self.http())
    }

    fn adopt(&self) -> BoxFuture<'_, Result<Option<Started>, RuntimeError>> {
        Box::pin(self.adopt_instance())
    }

    fn start(&self) -> BoxFuture<'_, Result<Started, RuntimeError>> {
        Box::pin(self.start_instance())
    }

    fn stop(&self) -> BoxFuture<'_, Result<(), RuntimeError>> {
        Box::pin(self.stop_instance())
    }

    fn inspect(&self) -> BoxFuture<'_, Result<Inspection, RuntimeError>> {
        Box::pin(self.inspect_instance())
    }
}

/// What an inspected container says about liveness.
fn inspection(info: &ContainerInspectResponse) -> Inspection {
    let state = info.state.clone().unwrap_or_default();
    let running = state.running.unwrap_or(false);
    let ended = matches!(
        state.status,
        Some(ContainerStateStatusEnum::EXITED | ContainerStateStatusEnum::DEAD)
    );
    Inspection {
        running,
        exit: (!running && ended).then(|| exit(state.exit_code, state.oom_killed.unwrap_or(false))),
        engine_restart_count: info.restart_count.map(|n| n.max(0) as u64),
    }
}

/// An [`Exit`] from a container's exit code: `128 + N` is death by signal N.
fn exit(code: Option<i64>, oom_killed: bool) -> Exit {
    let signal = code
        .filter(|c| (129..=128 + 64).contains(c))
        .map(|c| (c - 128) as i32);
    Exit {
        code,
        signal,
        oom_killed,
        summary: describe_exit(code, signal, oom_killed),
    }
}

/// Engine errors without bollard's wording where a shorter one says it.
fn engine_message(error: &EngineError) -> String {
    match error {
        EngineError::SocketNotFoundError(path) => format!("no socket at {path}"),
        EngineError::DockerResponseServerError {
            status_code,
            message,
        } => {
            format!("status {status_code}: {}", message.trim())
        }
        EngineError::RequestTimeoutError => format!("no answer within {} s", API_TIMEOUT.as_secs()),
        other => {
            // Hyper's errors hide the OS error in their source chain.
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text.push_str(": ");
                    text.push_str(&cause_text);
                }
                source = cause.source();
            }
            text
        }
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Watches one container until it dies, then resolves the `exited` sender.
struct Watcher {
    docker: Docker,
    backend: String,
    container: String,
    id: String,
    /// Unix seconds to replay the event stream from.
    since: u64,
}

enum Watched {
    /// The container died (a `die` event), after an `oom` event or not.
    Died { oom: bool, code: Option<i64> },
    /// The receiver was dropped: nobody is listening any more.
    Abandoned,
    /// The event stream broke or ended.
    StreamLost(String),
}

impl Watcher {
    async fn run(self, tx: oneshot::Sender<Exit>) {
        let mut tx = tx;
        let outcome = tokio::select! {
            outcome = self.events() => outcome,
            () = tx.closed() => Watched::Abandoned,
        };
        let exit = match outcome {
            Watched::Abandoned => return,
            Watched::Died { oom, code } => self.died(oom, code).await,
            Watched::StreamLost(reason) => {
                tracing::debug!(backend = %self.backend, id = %short(&self.id), %reason, "container event stream lost; polling instead");
                tokio::select! {
                    exit = self.poll() => exit,
                    () = tx.closed() => return,
                }
            }
        };
        match exit {
            Some(exit) => {
                tracing::info!(backend = %self.backend, container = %self.container, id = %short(&self.id), summary = %exit.summary, "container ended");
                let _ = tx.send(exit);
            }
            None => {
                tracing::warn!(backend = %self.backend, container = %self.container, "lost track of the container: the engine does not answer; liveness unknown");
                drop(tx);
            }
        }
    }

    /// Follows the engine's events of this container until it dies.
    async fn events(&self) -> Watched {
        // Filtered by container only: engines disagree on the names of
        // event types in filters (Podman's "died" for Docker's "die").
        let filters = HashMap::from([
            ("container".to_owned(), vec![self.id.clone()]),
            ("type".to_owned(), vec!["container".to_owned()]),
        ]);
        let options = EventsOptions {
            since: Some(self.since.to_string()),
            until: None,
            filters: Some(filters),
        };
        // Engines may send nothing, not even headers, until an event happens:
        // no request timeout on the stream.
        let events = self.docker.clone().with_timeout(Duration::MAX);
        let mut stream = events.events(Some(options));
        let mut oom = false;
        loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if event
                        .actor
                        .as_ref()
                        .and_then(|a| a.id.as_deref())
                        .is_some_and(|id| id != self.id)
                    {
                        continue;
                    }
                    match event.action.as_deref() {
                        Some("oom") => oom = true,
                        Some("die" | "died") => {
                            let attributes =
                                event.actor.and_then(|a| a.attributes).unwrap_or_default();
                            let code = ["exitCode", "containerExitCode"]
                                .iter()
                                .find_map(|key| attributes.get(*key)?.parse().ok());
                            return Watched::Died { oom, code };
                        }
                        _ => {}
                    }
                }
                Some(Err(e)) => return Watched::StreamLost(engine_message(&e)),
                None => return Watched::StreamLost("the engine closed the stream".to_owned()),
            }
        }
    }

    /// The exit of a container that died: the engine's state, else the event's code.
    async fn died(&self, oom: bool, code: Option<i64>) -> Option<Exit> {
        match self.docker.inspect_container(&self.id, None).await {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                Some(exit(
                    state.exit_code.or(code),
                    oom || state.oom_killed.unwrap_or(false),
                ))
            }
            Err(_) => Some(exit(code, oom)),
        }
    }

    /// Polls the container every second until it is no longer running.
    /// `None` when the engine stopped answering.
    async fn poll(&self) -> Option<Exit> {
        let mut failures = 0;
        loop {
            match self.docker.inspect_container(&self.id, None).await {
                Ok(info) => {
                    failures = 0;
                    let state = info.state.unwrap_or_default();
                    let alive = state.running.unwrap_or(false)
                        || matches!(
                            state.status,
                            Some(
                                ContainerStateStatusEnum::CREATED
                                    | ContainerStateStatusEnum::RESTARTING
                            )
                        );
                    if !alive {
                        return Some(exit(state.exit_code, state.oom_killed.unwrap_or(false)));
                    }
                }
                Err(EngineError::DockerResponseServerError {
                    status_code: 404, ..
                }) => {
                    return Some(Exit {
                        summary: format!("container {} was removed", self.container),
                        ..Default::default()
                    });
                }
                Err(e) => {
                    failures += 1;
                    tracing::debug!(backend = %self.backend, error = %engine_message(&e), failures, "cannot inspect the container");
                    if failures >= POLL_FAILURES {
                        return None;
                    }
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ContainerSpec {
        ContainerSpec {
            image: "localhost/x:1".to_owned(),
            command: Some("/srv".to_owned()),
            args: vec!["--port".to_owned(), "80".to_owned()],
            env: BTreeMap::from([("A".to_owned(), "1".to_owned())]),
            labels: BTreeMap::from([
                ("team".to_owned(), "x".to_owned()),
                ("vigil.managed".to_owned(), "no".to_owned()),
            ]),
            port: Some(8080),
            network: None,
        }
    }

    #[test]
    fn create_body_publishes_on_loopback_and_labels() {
        let rt = ContainerRuntime::new(
            "b1",
            spec(),
            "http://127.0.0.1:8080/mcp".into(),
            BTreeMap::new(),
        );
        assert_eq!(rt.container_name(), "vigil-b1");
        let body = rt.create_body();
        assert_eq!(body.entrypoint, Some(vec!["/srv".to_owned()]));
        assert_eq!(body.cmd, Some(vec!["--port".to_owned(), "80".to_owned()]));
        assert_eq!(body.env, Some(vec!["A=1".to_owned()]));
        let labels = body.labels.unwrap();
        assert_eq!(labels["vigil.backend"], "b1");
        assert_eq!(labels["vigil.managed"], "true");
        assert_eq!(labels["team"], "x");
        assert_eq!(body.exposed_ports, Some(vec!["8080/tcp".to_owned()]));
        let host = body.host_config.unwrap();
        let binding = &host.port_bindings.unwrap()["8080/tcp"].clone().unwrap()[0];
        assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(binding.host_port.as_deref(), Some("8080"));
        assert_eq!(
            host.restart_policy.unwrap().name,
            Some(RestartPolicyNameEnum::NO)
        );
    }

    #[test]
    fn host_network_publishes_nothing() {
        let mut spec = spec();
        spec.network = Some("host".to_owned());
        spec.command = None;
        spec.args.clear();
        let body = ContainerRuntime::new("b", spec, String::new(), BTreeMap::new()).create_body();
        assert_eq!(body.entrypoint, None);
        assert_eq!(body.cmd, None);
        assert_eq!(body.exposed_ports, None);
        let host = body.host_config.unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("host"));
        assert_eq!(host.port_bindings, None);
    }

    #[test]
    fn exit_codes_above_128_are_signals() {
        let killed = exit(Some(137), false);
        assert_eq!((killed.code, killed.signal), (Some(137), Some(9)));
        assert_eq!(
            killed.summary,
            "exited with code 137: killed by signal 9 (SIGKILL)"
        );
        let oom = exit(Some(137), true);
        assert!(oom.oom_killed && oom.summary.ends_with("out of memory"));
        let plain = exit(Some(1), false);
        assert_eq!(
            (plain.signal, plain.summary.as_str()),
            (None, "exited with code 1")
        );
        assert_eq!(exit(Some(0), false).signal, None);
    }
}
