//! The lean client of a stdio MCP server: the bench starts the server as
//! its child and drives its pipes itself, as a gateway in front of it does
//! (the direct baseline of the `lean-stdio` pair).
//!
//! Contract: [`Peer::start`] spawns the program with piped stdin and stdout
//! (stderr to a log file), sends `initialize` (protocol 2025-11-25), checks
//! the version answered and sends `notifications/initialized`. Any number
//! of callers then share the pipe ([`Caller`], one per client session of
//! the load): each request is one line written whole under a lock, with an
//! id of its own; one reader task reads the answer lines and hands each to
//! the caller waiting for its id. A line that answers no waiting request is
//! dropped. When stdout ends, every waiting call fails, and so does every
//! later one. The child is killed when the peer is dropped.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow, bail};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::oneshot;

use super::client::{PROTOCOL_VERSION, check_echo, find_result};

type Waiting = HashMap<u64, oneshot::Sender<Vec<u8>>>;

/// One stdio server process and its pipes.
pub struct Peer {
    child: Mutex<Child>,
    pid: Option<u32>,
    stdin: tokio::sync::Mutex<ChildStdin>,
    /// Calls waiting for their answer, by id; `None` once stdout ended.
    waiting: Arc<Mutex<Option<Waiting>>>,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
    log: std::path::PathBuf,
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Peer {
    /// Starts `program args` and completes the MCP handshake.
    pub async fn start(program: &Path, args: &[&str], log: &Path) -> anyhow::Result<Arc<Self>> {
        let err = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {}", program.display()))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let waiting = Arc::new(Mutex::new(Some(Waiting::new())));
        let reader = tokio::spawn(read_answers(stdout, waiting.clone()));
        let peer = Arc::new(Self {
            pid: child.id(),
            child: Mutex::new(child),
            stdin: tokio::sync::Mutex::new(stdin),
            waiting,
            next_id: AtomicU64::new(1),
            reader,
            log: log.to_path_buf(),
        });
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{{"name":"vigil-bench-lean","version":"{}"}}}}}}"#,
            env!("CARGO_PKG_VERSION")
        );
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            peer.request(0, &mut line.into_bytes()),
        )
        .await
        .map_err(|_| anyhow!("no answer to initialize within 10 s"))?
        .context("initialize")?;
        let range = find_result(&answer, 0, 0)?.ok_or_else(|| anyhow!("not our answer"))?;
        let version =
            serde_json::from_slice::<serde_json::Value>(&answer[range])?["protocolVersion"]
                .as_str()
                .map(str::to_owned);
        if version.as_deref() != Some(PROTOCOL_VERSION) {
            bail!("the server answered protocol version {version:?}, not {PROTOCOL_VERSION}");
        }
        peer.write(&mut br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec())
            .await?;
        Ok(peer)
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Fails, with the end of its stderr log, if the process has exited.
    pub fn check_alive(&self) -> anyhow::Result<()> {
        let status = self
            .child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .try_wait()?;
        if let Some(status) = status {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "the stdio backend exited ({status}); last stderr lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }

    /// Writes `json` as one line (the newline is added to it).
    async fn write(&self, json: &mut Vec<u8>) -> anyhow::Result<()> {
        json.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(json).await.context("writing to stdin")?;
        Ok(())
    }

    /// Sends request `id` (its JSON, without the newline) and waits for the
    /// line that answers it.
    async fn request(&self, id: u64, json: &mut Vec<u8>) -> anyhow::Result<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        match self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            Some(w) => w.insert(id, tx),
            None => bail!("the stdio backend's stdout has ended"),
        };
        if let Err(e) = self.write(json).await {
            if let Some(w) = self
                .waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                w.remove(&id);
            }
            return Err(e);
        }
        rx.await
            .map_err(|_| anyhow!("the stdio backend's stdout ended before the answer"))
    }
}

/// Reads answer lines until stdout ends, handing each to its caller.
async fn read_answers(stdout: ChildStdout, waiting: Arc<Mutex<Option<Waiting>>>) {
    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    loop {
        let mut line = Vec::with_capacity(512);
        match stdout.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let Some(id) = answer_id(&line) else {
            continue;
        };
        let tx = waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|w| w.remove(&id));
        if let Some(tx) = tx {
            let _ = tx.send(line);
        }
    }
    // Dropping the senders fails every waiting call.
    waiting.lock().unwrap_or_else(|p| p.into_inner()).take();
}

/// The numeric id of a response line (`None`: a request, a notification,
/// or no number).
fn answer_id(line: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        id: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow)]
        method: Option<&'a serde_json::value::RawValue>,
    }
    let head: Head<'_> = serde_json::from_slice(line).ok()?;
    if head.method.is_some() {
        return None;
    }
    head.id?.get().parse().ok()
}

/// One client session of the load on a shared [`Peer`].
pub struct Caller {
    peer: Arc<Peer>,
    json: Vec<u8>,
}

impl Caller {
    pub fn new(peer: Arc<Peer>) -> Self {
        Self {
            peer,
            json: Vec::with_capacity(512),
        }
    }

    /// Calls `tool` with `{"text": text}` and checks the echo.
    pub async fn call_echo(&mut self, tool: &str, text: &str) -> anyhow::Result<()> {
        let id = self.peer.next_id.fetch_add(1, Ordering::Relaxed);
        self.json.clear();
        let _ = write!(
            self.json,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"#
        );
        serde_json::to_writer(&mut self.json, tool)?;
        self.json.extend_from_slice(br#","arguments":{"text":"#);
        serde_json::to_writer(&mut self.json, text)?;
        self.json.extend_from_slice(b"}}}");
        let answer = self.peer.request(id, &mut self.json).await?;
        let range = find_result(&answer, id, 0)?
            .ok_or_else(|| anyhow!("the line handed over does not answer request {id}"))?;
        check_echo(&answer[range], text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_answers() {
        assert_eq!(
            answer_id(br#"{"jsonrpc":"2.0","id":12,"result":{}}"#),
            Some(12)
        );
        assert_eq!(
            answer_id(br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#),
            None
        );
        assert_eq!(
            answer_id(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            None
        );
        assert_eq!(answer_id(b"nope"), None);
    }
}
