//! The container runtime against a real Docker-API engine.
//!
//! Needs `DOCKER_HOST` pointing at an engine that has the demo backend's
//! image. On a Debian machine (as root):
//!
//! ```sh
//! eval "$(bash scripts/container-engine.sh)"   # Podman's Docker API service; sets DOCKER_HOST
//! bash scripts/container-image.sh              # localhost/vigil-demo-backend:test
//! cargo test -p vigil --test container_runtime
//! ```
//!
//! Without them the tests that need an engine fail (they never skip).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::errors::Error as EngineError;
use bollard::query_parameters::{KillContainerOptions, RemoveContainerOptions};
use vigil::config::ContainerSpec;
use vigil::runtime::container::ContainerRuntime;
use vigil::runtime::{Endpoint, Runtime, RuntimeError};

/// The demo backend's image (`VIGIL_TEST_IMAGE`, as for scripts/container-image.sh).
fn image() -> String {
    std::env::var("VIGIL_TEST_IMAGE")
        .unwrap_or_else(|_| "localhost/vigil-demo-backend:test".to_owned())
}
const SETUP: &str = "run `eval \"$(bash scripts/container-engine.sh)\"` and `bash scripts/container-image.sh` first";

/// Logs of the runtime with `RUST_LOG` (e.g. `RUST_LOG=vigil=debug`), shown for failing tests.
fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The engine from `DOCKER_HOST`, checked to answer and to hold the image.
async fn engine() -> Docker {
    logs();
    let host = match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.trim().is_empty() => host,
        _ => panic!(
            "DOCKER_HOST is not set: these tests need a Docker-API container engine; {SETUP}"
        ),
    };
    let docker = Docker::connect_with_host(&host).unwrap_or_else(|e| {
        panic!("cannot connect to the engine at DOCKER_HOST={host}: {e}; {SETUP}")
    });
    let docker = docker.negotiate_version().await.unwrap_or_else(|e| {
        panic!("the engine at DOCKER_HOST={host} does not answer: {e}; {SETUP}")
    });
    let image = image();
    if let Err(e) = docker.inspect_image(&image).await {
        panic!("image {image} is not in the engine at {host} ({e}); {SETUP}");
    }
    docker
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A backend name unique to this test run.
fn backend_name(test: &str) -> String {
    format!("ct-{test}-{}", std::process::id())
}

/// Removes the backend's container when the test ends, passed or not.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let name = self.0.clone();
        // A runtime of its own: this may run while the test's runtime unwinds.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok(docker) = Docker::connect_with_defaults() {
                    let options = RemoveContainerOptions {
                        force: true,
                        ..Default::default()
                    };
                    let _ = docker.remove_container(&name, Some(options)).await;
                }
            });
        })
        .join();
    }
}

fn demo_runtime(backend: &str, port: u16) -> (ContainerRuntime, String) {
    let url = format!("http://127.0.0.1:{port}/mcp");
    let spec = ContainerSpec {
        image: image(),
        command: None,
        args: [
            "--transport",
            "http",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--name",
            "c1",
        ]
        .map(String::from)
        .to_vec(),
        env: BTreeMap::from([("RUST_LOG".to_owned(), "info".to_owned())]),
        labels: BTreeMap::from([("vigil.test".to_owned(), "container_runtime".to_owned())]),
        port: None,
        network: Some("host".to_owned()),
    };
    (
        ContainerRuntime::new(backend, spec, url.clone(), BTreeMap::new()),
        url,
    )
}

/// Polls until an MCP `initialize` at `url` answers with the demo's serverInfo.
async fn wait_for_mcp(url: &str) {
    let client = reqwest::Client::new();
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "container-runtime-test", "version": "0" }
        }
    })
    .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < deadline {
        let answer = client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.clone())
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match answer {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                if status.is_success() && text.contains("serverInfo") && text.contains("\"c1\"") {
                    return;
                }
                last = format!("status {status}: {text}");
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no MCP initialize answer at {url} within 30 s; last: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_starts_serves_mcp_dies_and_restarts() {
    let docker = engine().await;
    let backend = backend_name("life");
    let (rt, url) = demo_runtime(&backend, free_port());
    let _cleanup = Cleanup(rt.container_name().to_owned());
    assert_eq!(rt.kind(), "container");
    assert!(rt.owns_lifecycle());

    // Start: the configured url comes back, the container serves MCP there.
    let started = rt.start().await.expect("start");
    match &started.endpoint {
        Endpoint::Http { url: got, headers } => {
            assert_eq!(got, &url);
            assert!(headers.is_empty());
        }
        Endpoint::Stdio { .. } => panic!("a container is reached over HTTP"),
    }
    wait_for_mcp(&url).await;

    let info = docker
        .inspect_container(&started.id, None)
        .await
        .expect("inspect by id");
    assert_eq!(
        info.name.as_deref().map(|n| n.trim_start_matches('/')),
        Some(rt.container_name())
    );
    let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(labels.get("vigil.backend"), Some(&backend));
    assert_eq!(
        labels.get("vigil.managed").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("vigil.test").map(String::as_str),
        Some("container_runtime")
    );

    let seen = rt.inspect().await.expect("inspect");
    assert!(seen.running, "{seen:?}");
    assert_eq!(seen.exit, None);
    assert_eq!(seen.engine_restart_count, Some(0));

    // Killed behind Vigil's back: the exit is reported with its signal.
    docker
        .kill_container(
            &started.id,
            Some(KillContainerOptions {
                signal: "SIGKILL".to_owned(),
            }),
        )
        .await
        .expect("kill");
    let exit = tokio::time::timeout(Duration::from_secs(20), started.exited)
        .await
        .expect("exit reported within 20 s")
        .expect("exit reported, not liveness lost");
    assert_eq!(exit.code, Some(137), "{exit:?}");
    assert_eq!(exit.signal, Some(9), "{exit:?}");
    assert!(!exit.oom_killed, "{exit:?}");
    assert_eq!(
        exit.summary,
        "exited with code 137: killed by signal 9 (SIGKILL)"
    );

    let seen = rt.inspect().await.expect("inspect after kill");
    assert!(!seen.running, "{seen:?}");
    let recorded = seen.exit.expect("inspect reports the exit");
    assert_eq!((recorded.code, recorded.signal), (Some(137), Some(9)));

    // Start again: a new container replaces the dead one.
    let again = rt.start().await.expect("second start");
    assert_ne!(again.id, started.id);
    wait_for_mcp(&url).await;
    assert!(rt.inspect().await.expect("inspect").running);
    match docker.inspect_container(&started.id, None).await {
        Err(EngineError::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        other => panic!("the first container should be gone: {other:?}"),
    }

    // Stop removes it; its end is reported; stopping again is fine.
    rt.stop().await.expect("stop");
    let exit = tokio::time::timeout(Duration::from_secs(20), again.exited)
        .await
        .expect("exit after stop reported within 20 s")
        .expect("exit after stop reported");
    assert!(!exit.summary.is_empty());
    match docker.inspect_container(rt.container_name(), None).await {
        Err(EngineError::DockerResponseServerError {
            status_code: 404, ..
        }) => {}
        other => panic!("stop should remove the container: {other:?}"),
    }
    let seen = rt.inspect().await.expect("inspect after stop");
    assert!(!seen.running);
    assert_eq!(seen.exit, None);
    assert_eq!(seen.engine_restart_count, None);
    rt.stop()
        .await
        .expect("stopping a missing container is fine");
}

/// Without host networking, `port` is published on the host's loopback only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_is_published_on_loopback() {
    let docker = engine().await;
    let backend = backend_name("publish");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let spec = ContainerSpec {
        image: image(),
        command: None,
        args: [
            "--transport",
            "http",
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--name",
            "c1",
        ]
        .map(String::from)
        .to_vec(),
        env: BTreeMap::new(),
        labels: BTreeMap::new(),
        port: Some(port),
        network: Some("bridge".to_owned()),
    };
    let rt = ContainerRuntime::new(&backend, spec, url.clone(), BTreeMap::new());
    let _cleanup = Cleanup(rt.container_name().to_owned());
    let started = rt.start().await.expect("start");
    let info = docker
        .inspect_container(&started.id, None)
        .await
        .expect("inspect");
    let host = info.host_config.expect("host config");
    assert_eq!(host.network_mode.as_deref(), Some("bridge"));
    let bindings = host.port_bindings.unwrap_or_default();
    let binding = bindings
        .get(&format!("{port}/tcp"))
        .cloned()
        .flatten()
        .and_then(|b| b.into_iter().next())
        .unwrap_or_else(|| panic!("no binding of {port}/tcp: {bindings:?}"));
    assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(binding.host_port, Some(port.to_string()));
    wait_for_mcp(&url).await;
    rt.stop().await.expect("stop");
}

#[tokio::test]
async fn missing_image_fails_and_asks_to_build_it() {
    let _docker = engine().await;
    let backend = backend_name("noimage");
    let _cleanup = Cleanup(format!("vigil-{backend}"));
    let spec = ContainerSpec {
        image: format!("localhost/vigil-no-such-image:{}", std::process::id()),
        command: None,
        args: vec![],
        env: BTreeMap::new(),
        labels: BTreeMap::new(),
        port: None,
        network: Some("host".to_owned()),
    };
    let rt = ContainerRuntime::new(
        &backend,
        spec,
        "http://127.0.0.1:1/mcp".to_owned(),
        BTreeMap::new(),
    );
    match rt.start().await {
        Err(RuntimeError::Failed(message)) => {
            eprintln!("start without the image: {message}");
            assert!(message.contains("vigil-no-such-image"), "{message}");
            assert!(message.contains("build or load"), "{message}");
        }
        Err(other) => panic!("expected Failed, got {other:?}"),
        Ok(_) => panic!("started without an image"),
    }
}

#[tokio::test]
async fn entrypoint_that_cannot_run_fails_the_start() {
    let _docker = engine().await;
    let backend = backend_name("badcmd");
    let (rt, _) = demo_runtime(&backend, free_port());
    let _cleanup = Cleanup(rt.container_name().to_owned());
    let spec = ContainerSpec {
        image: image(),
        command: Some("/no-such-program".to_owned()),
        args: vec![],
        env: BTreeMap::new(),
        labels: BTreeMap::new(),
        port: None,
        network: Some("host".to_owned()),
    };
    let rt = ContainerRuntime::new(
        &backend,
        spec,
        "http://127.0.0.1:1/mcp".to_owned(),
        BTreeMap::new(),
    );
    match rt.start().await {
        Err(RuntimeError::Failed(message)) => {
            eprintln!("start of a missing program: {message}");
            assert!(message.contains("no-such-program"), "{message}");
        }
        Err(other) => panic!("expected Failed, got {other:?}"),
        Ok(started) => {
            // Some engines start it and report the exit at once.
            let exit = tokio::time::timeout(Duration::from_secs(20), started.exited)
                .await
                .expect("exit within 20 s")
                .expect("exit reported");
            eprintln!("start of a missing program exited: {exit:?}");
            assert!(exit.code.is_some_and(|c| c != 0), "{exit:?}");
        }
    }
    assert!(!rt.inspect().await.expect("inspect").running);
    rt.stop().await.expect("stop");
}

#[tokio::test]
async fn unreachable_engine_is_an_infrastructure_error() {
    logs();
    let socket = format!("/nonexistent-vigil-test-{}/docker.sock", std::process::id());
    let host = format!("unix://{socket}");
    let (rt, _) = demo_runtime(&backend_name("noengine"), free_port());
    let rt = rt.with_docker_host(host.clone());
    assert_eq!(rt.docker_host(), host);

    match rt.start().await {
        Err(RuntimeError::Infrastructure(message)) => {
            eprintln!("start without an engine: {message}");
            assert!(message.contains(&socket), "{message}")
        }
        Err(other) => panic!("expected Infrastructure, got {other:?}"),
        Ok(_) => panic!("started without an engine"),
    }
    match rt.inspect().await {
        Err(RuntimeError::Infrastructure(message)) => {
            assert!(message.contains(&socket), "{message}")
        }
        other => panic!("expected Infrastructure, got {other:?}"),
    }
    assert!(matches!(
        rt.stop().await,
        Err(RuntimeError::Infrastructure(_))
    ));
}

/// A socket file that exists but where nobody answers is unreachable too.
#[tokio::test]
async fn dead_socket_is_an_infrastructure_error() {
    let dir = std::env::temp_dir().join(format!("vigil-dead-socket-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("docker.sock");
    let _ = std::fs::remove_file(&socket);
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap()); // leaves the file, closes the socket
    let (rt, _) = demo_runtime(&backend_name("deadsock"), free_port());
    let rt = rt.with_docker_host(format!("unix://{}", socket.display()));
    let result = rt.inspect().await;
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Err(RuntimeError::Infrastructure(message)) => {
            eprintln!("inspect with a dead socket: {message}");
            assert!(message.contains(&socket.display().to_string()), "{message}")
        }
        other => panic!("expected Infrastructure, got {other:?}"),
    }
}

/// A unix-socket proxy in front of the engine, to break the runtime's
/// connections to it on purpose.
struct EngineProxy {
    path: std::path::PathBuf,
    accept: tokio::task::JoinHandle<()>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl EngineProxy {
    fn start(engine: &str, name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("vigil-engine-proxy-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("engine.sock");
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let engine = engine.to_owned();
        let tracked = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let engine = engine.clone();
                let task = tokio::spawn(async move {
                    if let Some(path) = engine.strip_prefix("unix://") {
                        if let Ok(mut outbound) = tokio::net::UnixStream::connect(path).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    } else {
                        let address = engine
                            .trim_start_matches("tcp://")
                            .trim_start_matches("http://");
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(address).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    }
                });
                tracked.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            path,
            accept,
            connections,
        }
    }

    fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Breaks every open connection (the event stream too); new ones still work.
    fn cut(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Stops answering: open connections break, new ones are refused.
    fn close(&self) {
        self.accept.abort();
        self.cut();
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        self.close();
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_event_stream_falls_back_to_polling_and_lost_engine_to_unknown() {
    let docker = engine().await;
    let host = std::env::var("DOCKER_HOST").unwrap();

    // The event stream breaks but the engine still answers: a kill is seen by polling.
    let proxy = EngineProxy::start(&host, "poll");
    let (rt, url) = demo_runtime(&backend_name("poll"), free_port());
    let rt = rt.with_docker_host(proxy.host());
    let _cleanup = Cleanup(rt.container_name().to_owned());
    let started = rt.start().await.expect("start through the proxy");
    wait_for_mcp(&url).await;
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(500)).await;
    docker
        .kill_container(
            &started.id,
            Some(KillContainerOptions {
                signal: "SIGKILL".to_owned(),
            }),
        )
        .await
        .expect("kill");
    let exit = tokio::time::timeout(Duration::from_secs(20), started.exited)
        .await
        .expect("exit seen by polling within 20 s")
        .expect("exit seen by polling");
    assert_eq!((exit.code, exit.signal), (Some(137), Some(9)), "{exit:?}");
    assert!(rt.inspect().await.is_ok());
    rt.stop().await.expect("stop through the proxy");

    // The engine stops answering: the sender is dropped (liveness unknown),
    // and inspect is an infrastructure error; the container itself lives on.
    let proxy = EngineProxy::start(&host, "lost");
    let (rt, url) = demo_runtime(&backend_name("lost"), free_port());
    let rt = rt.with_docker_host(proxy.host());
    let _cleanup = Cleanup(rt.container_name().to_owned());
    let started = rt.start().await.expect("start through the proxy");
    wait_for_mcp(&url).await;
    proxy.close();
    let lost = tokio::time::timeout(Duration::from_secs(20), started.exited)
        .await
        .expect("liveness given up within 20 s");
    assert!(
        lost.is_err(),
        "the sender should be dropped without an exit: {lost:?}"
    );
    assert!(matches!(
        rt.inspect().await,
        Err(RuntimeError::Infrastructure(_))
    ));
    let info = docker
        .inspect_container(&started.id, None)
        .await
        .expect("the container is still there");
    assert_eq!(info.state.and_then(|s| s.running), Some(true));
    wait_for_mcp(&url).await;
}
