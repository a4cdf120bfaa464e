//! The server processes under test: start, watch, stop; free ports; a
//! scratch directory for the config and the logs.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, bail};

/// A child server process, killed when dropped (also on error paths).
pub struct Server {
    name: &'static str,
    child: tokio::process::Child,
    log: PathBuf,
}

impl Server {
    /// `vigil serve --config CONFIG`, its output in `log`.
    pub fn vigil(
        program: &Path,
        config: &Path,
        pin: Option<&[usize]>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let args = [
            "serve".to_owned(),
            "--config".to_owned(),
            config.display().to_string(),
        ];
        Self::spawn("vigil", program, &args, &[], pin, log)
    }

    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        pin: Option<&[usize]>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let out = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true);
        if let Some(cpus) = pin {
            let set = cpu_set(cpus)?;
            // SAFETY: the closure only makes one syscall (sched_setaffinity)
            // on a value prepared before fork.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        Ok(Self { name, child, log })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Fails, with the end of the process's log, if it has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); last log lines:\n{}",
                self.name,
                self.log_tail(20)
            );
        }
        Ok(())
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// SIGKILL, and reap it.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then SIGKILL if it has not exited within two seconds.
    pub async fn stop(self) {
        self.stop_within(Duration::from_secs(2)).await
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop_within(mut self, grace: Duration) {
        if let Some(pid) = self.child.id() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
            if tokio::time::timeout(grace, self.child.wait()).await.is_ok() {
                return;
            }
        }
        let _ = self.child.kill().await;
    }
}

fn cpu_set(cpus: &[usize]) -> anyhow::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            bail!("CPU {cpu} is out of range");
        }
        // SAFETY: cpu < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    Ok(set)
}

/// Pins this process's current thread (and so every thread it starts
/// afterwards) to `cpus`.
pub fn pin_current_process(cpus: &[usize]) -> anyhow::Result<()> {
    let set = cpu_set(cpus)?;
    // SAFETY: a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// Pins process `pid`'s main thread (all of a single-threaded process) to
/// `cpus`.
pub fn pin_process(pid: u32, cpus: &[usize]) -> anyhow::Result<()> {
    let set = cpu_set(cpus)?;
    // SAFETY: a valid cpu_set_t of the size passed.
    let r = unsafe {
        libc::sched_setaffinity(
            pid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot pin process {pid} to CPUs {cpus:?}"));
    }
    Ok(())
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> anyhow::Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind a loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// `PROGRAM --version`, first line.
pub async fn version(program: &Path) -> Option<String> {
    let out = tokio::process::Command::new(program)
        .arg("--version")
        .output()
        .await
        .ok()?;
    String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .next()
        .map(str::to_owned)
}

/// A directory for a run's files: a scratch one under the system temp dir,
/// removed when dropped, or a given one, kept.
pub struct WorkDir {
    path: PathBuf,
    remove: bool,
}

impl WorkDir {
    pub fn create() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("vigil-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self {
            path: dir,
            remove: true,
        })
    }

    /// An existing directory, left in place when dropped.
    pub fn at(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            remove: false,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The directory for a run's files: `given` (created if needed), or a fresh
/// scratch directory that lives as long as the returned guard.
pub fn log_dir(given: Option<&Path>) -> anyhow::Result<(PathBuf, Option<WorkDir>)> {
    match given {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
            Ok((d.to_path_buf(), None))
        }
        None => {
            let scratch = WorkDir::create()?;
            Ok((scratch.path().to_path_buf(), Some(scratch)))
        }
    }
}

/// Starts `vigil-demo-backend --transport http` of `bin_dir` on a free
/// loopback port (log in `work`) and waits until it lists `echo`; returns
/// it with its `/mcp` URL.
pub async fn demo_backend(bin_dir: &Path, work: &WorkDir) -> anyhow::Result<(Server, String)> {
    demo_backend_pinned(bin_dir, work, None).await
}

/// [`demo_backend`], pinned to `pin`.
pub async fn demo_backend_pinned(
    bin_dir: &Path,
    work: &WorkDir,
    pin: Option<&[usize]>,
) -> anyhow::Result<(Server, String)> {
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut backend = Server::spawn(
        "vigil-demo-backend",
        &bin_dir.join("vigil-demo-backend"),
        &[
            "--transport".into(),
            "http".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--name".into(),
            "demo".into(),
        ],
        &[("RUST_LOG", "warn")],
        pin,
        work.path().join("backend.log"),
    )?;
    crate::load::wait_ready(&mut backend, &url, "echo", Duration::from_secs(30)).await?;
    Ok((backend, url))
}

/// Starts this binary's hidden `lean-backend` subcommand (the lean MCP
/// backend, see `lean/backend.rs`) on a free loopback port, pinned to
/// `pin` (log `lean-backend.log` in `work`), and waits until it lists
/// `echo` to rmcp's client; returns it with its `/mcp` URL.
pub async fn lean_backend(
    work: &WorkDir,
    pin: Option<&[usize]>,
) -> anyhow::Result<(Server, String)> {
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let exe = std::env::current_exe().context("cannot find this binary for the lean backend")?;
    let mut backend = Server::spawn(
        "lean backend",
        &exe,
        &[
            "lean-backend".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ],
        &[],
        pin,
        work.path().join("lean-backend.log"),
    )?;
    crate::load::wait_ready(&mut backend, &url, "echo", Duration::from_secs(30)).await?;
    Ok((backend, url))
}

/// The backend `demo` of a bench gateway.
pub enum BackendSpec<'a> {
    /// Over streamable HTTP at `url`.
    Http { url: &'a str, keep_alive: bool },
    /// A process Vigil starts, over stdio.
    Stdio {
        command: &'a Path,
        args: &'a [&'a str],
    },
}

/// The `vigil.toml` of a bench gateway: `listen` on `port`, `log_level =
/// "warn"`, the control API on `api_port` (0: any free one), `backend` as
/// the backend `demo` with `protocol`. `top` is put among the top-level
/// keys (e.g. `request_timeout = "5s"`), `tables` before the backend (e.g.
/// a `[health]` section).
pub fn vigil_config_for(
    port: u16,
    api_port: u16,
    backend: &BackendSpec<'_>,
    protocol: &str,
    top: &str,
    tables: &str,
) -> String {
    let backend = match backend {
        BackendSpec::Http { url, keep_alive } => {
            format!("transport = \"http\"\nurl = \"{url}\"\nkeep_alive = {keep_alive}\n")
        }
        BackendSpec::Stdio { command, args } => format!(
            "transport = \"stdio\"\ncommand = {:?}\nargs = {:?}\n",
            command.display().to_string(),
            args
        ),
    };
    format!(
        "listen = \"127.0.0.1:{port}\"\nlog_level = \"warn\"\n{top}\n[api]\nlisten = \"127.0.0.1:{api_port}\"\n\n{tables}\n\
         [[backends]]\nname = \"demo\"\n{backend}protocol = \"{protocol}\"\n"
    )
}

/// The lean backend over stdio as Vigil starts it: this binary's
/// `lean-backend --stdio`.
pub fn lean_stdio_command() -> anyhow::Result<(PathBuf, [&'static str; 2])> {
    let exe = std::env::current_exe().context("cannot find this binary for the lean backend")?;
    Ok((exe, ["lean-backend", "--stdio"]))
}

/// The one child process of Vigil `vigil` (its stdio backend), once it
/// is there (up to `within`).
pub async fn only_child(vigil: u32, within: Duration) -> anyhow::Result<u32> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let children = children_of(vigil);
        match children.as_slice() {
            [one] => return Ok(*one),
            [] if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            [] => bail!("Vigil (pid {vigil}) started no backend process"),
            more => bail!(
                "Vigil (pid {vigil}) runs {} backend processes ({more:?}), not one",
                more.len()
            ),
        }
    }
}

/// `vigil_requests_forwarded_total` of `method` from the control API's
/// `/metrics` at `api` (`http://127.0.0.1:PORT`): (raw, typed).
pub async fn forwarded(api: &str, method: &str) -> anyhow::Result<(u64, u64)> {
    let text = reqwest::get(format!("{api}/metrics"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("GET {api}/metrics"))?
        .text()
        .await?;
    Ok(parse_forwarded(&text, method))
}

/// (raw, typed) of `vigil_requests_forwarded_total{method=…,path=…}` in
/// a Prometheus text exposition (0 for a series not there yet).
fn parse_forwarded(text: &str, method: &str) -> (u64, u64) {
    let (mut raw, mut typed) = (0, 0);
    let want = format!("method=\"{method}\"");
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("vigil_requests_forwarded_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        if !labels.split(',').any(|l| l.trim() == want) {
            continue;
        }
        let Ok(n) = value.trim().parse::<f64>() else {
            continue;
        };
        if labels.split(',').any(|l| l.trim() == "path=\"raw\"") {
            raw += n as u64;
        } else if labels.split(',').any(|l| l.trim() == "path=\"typed\"") {
            typed += n as u64;
        }
    }
    (raw, typed)
}

/// Processes whose parent is `pid` (`/proc/*/stat`, field 4).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// A process's memory and open sockets once they stop moving (two
/// readings 500 ms apart agree), or after 30 s: the sessions' connections
/// and tasks have settled.
pub async fn quiescent(pid: u32) -> (crate::probes::ProcStatus, u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut last = (crate::probes::proc_status(pid), sockets(pid));
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = (crate::probes::proc_status(pid), sockets(pid));
        let still = now.1 == last.1 && (now.0.rss_mib - last.0.rss_mib).abs() < 0.5;
        last = now;
        if still || tokio::time::Instant::now() >= deadline {
            return last;
        }
    }
}

/// Open sockets of `pid` (its `/proc/PID/fd` links to `socket:[…]`).
fn sockets(pid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_counters() {
        let text = "# HELP vigil_requests_forwarded Routed requests\n\
                    # TYPE vigil_requests_forwarded counter\n\
                    vigil_requests_forwarded_total{method=\"tools/call\",path=\"raw\"} 7\n\
                    vigil_requests_forwarded_total{path=\"typed\",method=\"tools/call\"} 2\n\
                    vigil_requests_forwarded_total{method=\"prompts/get\",path=\"raw\"} 5\n";
        assert_eq!(parse_forwarded(text, "tools/call"), (7, 2));
        assert_eq!(parse_forwarded(text, "resources/read"), (0, 0));
    }

    #[test]
    fn configs() {
        let backend = BackendSpec::Http {
            url: "http://b/mcp",
            keep_alive: true,
        };
        let http = vigil_config_for(1, 0, &backend, "auto", "", "");
        assert!(http.contains("[api]\nlisten = \"127.0.0.1:0\""));
        assert!(http.contains(
            "transport = \"http\"\nurl = \"http://b/mcp\"\nkeep_alive = true\nprotocol = \"auto\""
        ));
        let stdio = vigil_config_for(
            1,
            2,
            &BackendSpec::Stdio {
                command: Path::new("/x/vigil-bench"),
                args: &["lean-backend", "--stdio"],
            },
            "auto",
            "",
            "",
        );
        assert!(stdio.contains("[api]\nlisten = \"127.0.0.1:2\""));
        assert!(stdio.contains(
            "name = \"demo\"\ntransport = \"stdio\"\ncommand = \"/x/vigil-bench\"\nargs = [\"lean-backend\", \"--stdio\"]\nprotocol = \"auto\"\n"
        ));
    }
}
