//! A backend process's stderr: read to the end, whatever it holds.
//!
//! The pipe is read as bytes until the child closes it (it exited): a
//! reader that stopped early would close the pipe, and the child's next
//! write to stderr would end it (EPIPE, or SIGPIPE for C, Go and shell
//! programs). So:
//!
//! - bytes are split into lines by [`LineSplitter`], which keeps at most
//!   [`MAX_LINE`] bytes of a line, marks a cut line with how many bytes it
//!   dropped, and discards the rest until the next newline: a line without
//!   a newline costs no more memory than [`MAX_LINE`];
//! - lines are decoded lossily (an invalid byte becomes U+FFFD);
//! - logging runs apart from reading, behind a bounded queue: when logging
//!   falls behind, lines are dropped from the log (and counted there), never
//!   left unread in the pipe. The tail kept for error reasons gets every line.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::process::StderrTail;

/// Longest part of a stderr line kept, in bytes.
pub const MAX_LINE: usize = 4096;
/// Bytes read from the pipe at a time.
const CHUNK: usize = 64 * 1024;
/// Lines waiting to be logged before further ones are dropped from the log.
const QUEUED: usize = 1024;
/// Pause before reading again after a read error (not the end of the pipe).
const RETRY: Duration = Duration::from_secs(1);

/// Splits a byte stream into lines of at most [`MAX_LINE`] bytes (see the
/// module doc). Feed it with [`LineSplitter::feed`]; take what is left at
/// the end of the stream with [`LineSplitter::finish`].
#[derive(Debug, Default)]
pub struct LineSplitter {
    /// The current line's kept bytes (at most `MAX_LINE`).
    line: Vec<u8>,
    /// Bytes of the current line beyond `MAX_LINE`, dropped.
    dropped: u64,
}

impl LineSplitter {
    /// Splits `bytes`, calling `emit` with each line it completes (without
    /// its `\n` or `\r\n`).
    pub fn feed(&mut self, mut bytes: &[u8], mut emit: impl FnMut(String)) {
        while !bytes.is_empty() {
            let (part, done) = match memchr::memchr(b'\n', bytes) {
                Some(i) => (&bytes[..i], Some(i + 1)),
                None => (bytes, None),
            };
            let room = MAX_LINE - self.line.len();
            let kept = part.len().min(room);
            self.line.extend_from_slice(&part[..kept]);
            self.dropped += (part.len() - kept) as u64;
            match done {
                Some(next) => {
                    emit(self.take());
                    bytes = &bytes[next..];
                }
                None => break,
            }
        }
    }

    /// The last line, if the stream ended without a newline after it.
    pub fn finish(mut self) -> Option<String> {
        (!self.line.is_empty() || self.dropped > 0).then(|| self.take())
    }

    /// The current line, decoded and marked if cut; starts the next one.
    fn take(&mut self) -> String {
        let mut line = std::mem::take(&mut self.line);
        let mut dropped = std::mem::take(&mut self.dropped);
        if dropped == 0 {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return String::from_utf8_lossy(&line).into_owned();
        }
        // Cut inside a character: drop its first bytes too, rather than
        // show a replacement character that was not in the line.
        if let Err(e) = std::str::from_utf8(&line)
            && e.error_len().is_none()
        {
            dropped += (line.len() - e.valid_up_to()) as u64;
            line.truncate(e.valid_up_to());
        }
        format!(
            "{}… [{dropped} bytes dropped]",
            String::from_utf8_lossy(&line)
        )
    }
}

/// What the reader hands the logger.
#[derive(Debug, PartialEq, Eq)]
enum Queued {
    Line(String),
    /// Lines read while the queue was full.
    Skipped(u64),
}

/// Reads `stderr` to its end, keeping every line in `tail` and logging it
/// under `vigil::backend::stderr`. Returns when the child closed the pipe.
pub async fn pump(backend: Arc<str>, stderr: impl AsyncRead + Unpin, tail: StderrTail) {
    let (tx, rx) = mpsc::channel(QUEUED);
    let logger = crate::background::spawn(log_lines(backend.clone(), rx));
    drain(&backend, stderr, tail, tx).await;
    let _ = logger.await;
}

/// The reading half of [`pump`]: never waits for the logger while the pipe
/// is open.
async fn drain(
    backend: &str,
    mut stderr: impl AsyncRead + Unpin,
    tail: StderrTail,
    queue: mpsc::Sender<Queued>,
) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; CHUNK];
    let mut skipped = 0u64;
    let offer = |line: String, skipped: &mut u64| {
        tail.push(line.clone());
        if *skipped > 0 && queue.try_send(Queued::Skipped(*skipped)).is_ok() {
            *skipped = 0;
        }
        if *skipped > 0 || queue.try_send(Queued::Line(line)).is_err() {
            *skipped += 1;
        }
    };
    let mut failed = false;
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => splitter.feed(&buf[..n], |line| offer(line, &mut skipped)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Not the end: the pipe stays open and is read again.
                if !failed {
                    tracing::warn!(%backend, error = %e, "cannot read the backend's stderr; trying again");
                    failed = true;
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    }
    if let Some(line) = splitter.finish() {
        offer(line, &mut skipped);
    }
    // The pipe is closed: now the logger may be waited for.
    if skipped > 0 {
        let _ = queue.send(Queued::Skipped(skipped)).await;
    }
}

async fn log_lines(backend: Arc<str>, mut rx: mpsc::Receiver<Queued>) {
    while let Some(q) = rx.recv().await {
        match q {
            Queued::Line(line) => {
                tracing::info!(target: "vigil::backend::stderr", backend = %backend, "{line}")
            }
            Queued::Skipped(n) => {
                tracing::warn!(target: "vigil::backend::stderr", backend = %backend, skipped = n, "{n} stderr lines not logged: the backend wrote faster than the log is written")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |l| out.push(l));
        }
        out.extend(s.finish());
        out
    }

    #[test]
    fn lines_are_split_across_chunks_without_their_line_ends() {
        assert_eq!(
            split(&[b"one\ntw", b"o\r\n", b"\nthree"]),
            ["one", "two", "", "three"]
        );
        assert_eq!(split(&[b"x\n"]), ["x"]);
        assert!(split(&[]).is_empty());
    }

    #[test]
    fn invalid_utf8_is_replaced_and_reading_goes_on() {
        assert_eq!(
            split(&[b"before \xff after\n", b"next\n"]),
            ["before \u{fffd} after", "next"]
        );
    }

    #[test]
    fn a_long_line_is_cut_marked_and_followed_by_the_next() {
        let long = vec![b'x'; 3 * MAX_LINE + 7];
        let mut chunks: Vec<&[u8]> = long.chunks(1000).collect();
        chunks.push(b"\nafter\n");
        let lines = split(&chunks);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            format!(
                "{}… [{} bytes dropped]",
                "x".repeat(MAX_LINE),
                2 * MAX_LINE + 7
            )
        );
        assert_eq!(lines[1], "after");
    }

    #[test]
    fn a_line_of_exactly_max_line_bytes_is_not_cut() {
        let line = vec![b'y'; MAX_LINE];
        assert_eq!(split(&[&line, b"\n"]), ["y".repeat(MAX_LINE)]);
    }

    #[test]
    fn a_cut_inside_a_character_drops_the_whole_character() {
        // 'é' is two bytes; the cut falls between them.
        let mut line = vec![b'a'; MAX_LINE - 1];
        line.extend_from_slice("é and more".as_bytes());
        line.push(b'\n');
        let lines = split(&[&line]);
        assert_eq!(
            lines,
            [format!(
                "{}… [{} bytes dropped]",
                "a".repeat(MAX_LINE - 1),
                "é and more".len()
            )]
        );
    }

    #[test]
    fn an_unterminated_endless_line_holds_at_most_max_line_bytes() {
        let mut s = LineSplitter::default();
        let chunk = vec![b'z'; CHUNK];
        for _ in 0..64 {
            s.feed(&chunk, |_| panic!("no line ends"));
            assert!(s.line.len() <= MAX_LINE && s.line.capacity() <= 2 * MAX_LINE);
        }
        assert_eq!(s.dropped, 64 * CHUNK as u64 - MAX_LINE as u64);
    }

    #[tokio::test]
    async fn the_pipe_is_read_to_its_end_while_logging_is_stuck() {
        // The logger never takes a line: the queue fills after 4.
        let (tx, mut rx) = mpsc::channel(4);
        let (mut child, ours) = tokio::io::duplex(1024);
        let tail = StderrTail::default();
        let reader = tokio::spawn(drain_owned(ours, tail.clone(), tx));
        // 10,000 lines through a 1 KiB pipe: written only if read.
        let writer = async move {
            for n in 0..10_000 {
                child
                    .write_all(format!("line {n}\n").as_bytes())
                    .await
                    .unwrap();
            }
        };
        tokio::time::timeout(Duration::from_secs(30), writer)
            .await
            .expect("the reader stopped reading while the log was stuck");
        let mut got = Vec::new();
        while let Some(q) = rx.recv().await {
            got.push(q);
        }
        reader.await.unwrap();
        // Logged while the logger was stuck: what fitted in the queue.
        assert_eq!(
            got[..4],
            [0, 1, 2, 3].map(|n| Queued::Line(format!("line {n}")))
        );
        assert!(matches!(got[4], Queued::Skipped(_)), "{got:?}");
        // Every line is either logged or counted as skipped.
        let accounted: u64 = got
            .iter()
            .map(|q| match q {
                Queued::Line(_) => 1,
                Queued::Skipped(n) => *n,
            })
            .sum();
        assert_eq!(accounted, 10_000);
        assert_eq!(tail.last().as_deref(), Some("line 9999"));
    }

    async fn drain_owned(r: tokio::io::DuplexStream, tail: StderrTail, tx: mpsc::Sender<Queued>) {
        drain("t", r, tail, tx).await
    }
}
