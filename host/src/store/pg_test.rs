//! A throwaway PostgreSQL for tests: one cluster per test binary, started
//! on first use, and a fresh database per test ([`fresh_database`]).
//!
//! The server binaries are Debian's (`postgresql`; `scripts/test.sh`
//! installs them in its `postgres-env` step): `VIGIL_PG_BINDIR`, else the
//! newest `/usr/lib/postgresql/N/bin`. Without them a test is skipped
//! with a note, or fails when `CI` or `VIGIL_PG_BINDIR` is set, so that a
//! missing setup step never passes for a green run.
//!
//! The cluster lives in `/tmp/vigil-pg-PID` (short: its Unix socket path
//! must fit in 107 bytes; not under a 0700 temp dir, which the `postgres`
//! user could not enter). `initdb` and `postgres` refuse to run as root,
//! so as root they run as Debian's `postgres` user. The server listens on
//! a free port of 127.0.0.1 with fsync off (nothing here must survive a
//! crash), runs in the foreground as a child of a thread that never ends,
//! and gets SIGINT (a fast shutdown) when the test binary exits, through
//! `setpriv --pdeathsig` (which follows the spawning *thread*: a test's
//! own thread would stop it when that test ended). A run removes the
//! directories earlier runs left behind.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The test binary's cluster.
pub(crate) struct Cluster {
    pub(crate) port: u16,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

/// The cluster, started on first use; `None` (after a note, once) when
/// PostgreSQL is not installed and neither `CI` nor `VIGIL_PG_BINDIR` is
/// set.
///
/// # Panics
///
/// When the cluster cannot be started, or PostgreSQL is missing and `CI`
/// or `VIGIL_PG_BINDIR` is set.
pub(crate) fn cluster() -> Option<&'static Cluster> {
    let bindir = match bindir() {
        Ok(b) => b,
        Err(why)
            if std::env::var_os("CI").is_some()
                || std::env::var_os("VIGIL_PG_BINDIR").is_some() =>
        {
            panic!("{why}")
        }
        Err(why) => {
            static NOTE: std::sync::Once = std::sync::Once::new();
            NOTE.call_once(|| eprintln!("note: skipping the PostgreSQL tests: {why}"));
            return None;
        }
    };
    match CLUSTER.get_or_init(|| start(&bindir)) {
        Ok(c) => Some(c),
        Err(why) => panic!("cannot start a PostgreSQL cluster for the tests: {why}"),
    }
}

/// A new, empty database on the test binary's cluster (`None`: skipped,
/// see [`cluster`]).
pub(crate) async fn fresh_database() -> Option<tokio_postgres::Config> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let cluster = cluster()?;
    let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
    let database = cluster.config(&name);
    let (client, conn) = cluster
        .config("postgres")
        .connect(tokio_postgres::NoTls)
        .await
        .expect("connect to the test cluster");
    // The connection is driven beside the statement, and ends with the
    // client.
    let create = async move {
        let created = client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await;
        drop(client);
        created
    };
    let (created, _) = futures::join!(create, conn);
    created.expect("create a test database");
    Some(database)
}

impl Cluster {
    /// How to reach `database` on this cluster.
    pub(crate) fn config(&self, database: &str) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname(database);
        c
    }
}

/// `VIGIL_PG_BINDIR`, else the newest `/usr/lib/postgresql/N/bin` that
/// has the server.
fn bindir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("VIGIL_PG_BINDIR") {
        let dir = PathBuf::from(dir);
        return if dir.join("postgres").exists() {
            Ok(dir)
        } else {
            Err(format!(
                "VIGIL_PG_BINDIR is {} but there is no `postgres` in it",
                dir.display()
            ))
        };
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path())))
        .map(|(version, dir)| (version, dir.join("bin")))
        .filter(|(_, bin)| bin.join("postgres").exists() && bin.join("initdb").exists())
        .max_by_key(|(version, _)| *version);
    newest.map(|(_, bin)| bin).ok_or_else(|| {
        "PostgreSQL is not installed (Debian: apt-get install postgresql, or run scripts/test.sh, \
         whose postgres-env step installs it; or set VIGIL_PG_BINDIR)"
            .into()
    })
}

/// Makes `cmd` run as the `postgres` user when we are root (the server
/// refuses root), giving it `dir`.
fn as_postgres(cmd: &mut Command, dir: &Path) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let user = nix::unistd::User::from_name("postgres")
        .map_err(|e| format!("looking up the postgres user: {e}"))?
        .ok_or("running as root and there is no `postgres` user to run the server as")?;
    std::os::unix::fs::chown(dir, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        .map_err(|e| format!("chown {} to postgres: {e}", dir.display()))?;
    // As root, std also drops the supplementary groups.
    cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    Ok(())
}

fn start(bindir: &Path) -> Result<Cluster, String> {
    sweep();
    let root = PathBuf::from(format!("/tmp/vigil-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir(&root).map_err(|e| format!("create {}: {e}", root.display()))?;
    let mut initdb = Command::new(bindir.join("initdb"));
    initdb
        .args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "--no-instructions",
        ])
        .args(["-E", "UTF8", "--locale=C.UTF-8", "-D"])
        .arg(root.join("data"));
    as_postgres(&mut initdb, &root)?;
    let out = initdb.output().map_err(|e| format!("run initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // A free port can be taken before the server binds it: a few tries.
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        match serve(bindir, &root, port) {
            Ok(()) => return Ok(Cluster { port }),
            Err(why) => last = why,
        }
    }
    Err(last)
}

/// Starts the server on `port` from a thread that never ends, and waits
/// until it accepts connections.
fn serve(bindir: &Path, root: &Path, port: u16) -> Result<(), String> {
    let log_path = root.join(format!("log-{port}"));
    let log = File::create(&log_path).map_err(|e| format!("create the server log: {e}"))?;
    let log2 = log.try_clone().map_err(|e| e.to_string())?;
    let mut cmd = match which("setpriv") {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--pdeathsig", "INT"]).arg(bindir.join("postgres"));
            c
        }
        None => Command::new(bindir.join("postgres")),
    };
    cmd.arg("-D")
        .arg(root.join("data"))
        .args(["-p", &port.to_string(), "-k"])
        .arg(root)
        .args(["-c", "listen_addresses=127.0.0.1", "-F"])
        .args(["-c", "synchronous_commit=off", "-c", "full_page_writes=off"])
        .args(["-c", "max_connections=300"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    as_postgres(&mut cmd, root)?;
    // The thread says once that the server started, and again if it ends.
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name(format!("postgres-{port}"))
        .spawn(move || {
            let mut child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(Err(format!("start postgres: {e}")));
                    return;
                }
            };
            let _ = tx.send(Ok(()));
            let status = child.wait();
            let _ = tx.send(Err(format!("postgres ended: {status:?}")));
            // Parked for good: a server still up must not see its parent
            // thread end.
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| e.to_string())?;
    rx.recv().map_err(|e| e.to_string())??;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = Command::new(bindir.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        if ready {
            return Ok(());
        }
        let ended = rx.try_recv().err() != Some(std::sync::mpsc::TryRecvError::Empty);
        if ended || Instant::now() > deadline {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!("postgres did not start on port {port}:\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("find a free port: {e}"))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.exists())
}

/// Removes the clusters of earlier test runs whose process is gone.
fn sweep() {
    let Ok(entries) = std::fs::read_dir("/tmp") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("vigil-pg-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
