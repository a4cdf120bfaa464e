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
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
            if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
                .await
                .is_ok()
            {
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

/// A scratch directory under the system temp dir, removed when dropped.
pub struct WorkDir(PathBuf);

impl WorkDir {
    pub fn create() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("vigil-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Self(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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
        None,
        work.path().join("backend.log"),
    )?;
    crate::load::wait_ready(
        &mut backend,
        &url,
        "echo",
        std::time::Duration::from_secs(30),
    )
    .await?;
    Ok((backend, url))
}
