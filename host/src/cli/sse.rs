//! A server-sent-events parser over byte chunks, as the HTML standard
//! reads `text/event-stream`: lines end in CRLF, LF or CR (a chunk may end
//! between CR and LF, or inside a UTF-8 character), `field: value` lines
//! build an event, a blank line ends it, `:` starts a comment (keep-alive),
//! several `data:` lines join with `\n`, an event without `event:` is a
//! `message`, one without data is not dispatched, and a stream that ends
//! mid-event drops that event.
//!
//! Pure: [`SseParser::push`] takes whatever bytes arrived and returns the
//! events they completed, so tests can cut a stream anywhere.

use std::time::Duration;

/// The longest event accepted (all its lines together), so a stream that
/// never sends a line end cannot fill the memory.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:`, or `message` when the event had none.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` given in this event, if any (the standard's "last event
    /// ID" carries over to later events; this does not).
    pub id: Option<String>,
}

/// The stream broke the parser's limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event of more than {} MiB: not Vigil's event stream", MAX_EVENT_BYTES >> 20)]
pub struct TooLarge;

/// Parser state between chunks.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends no second line.
    after_cr: bool,
    /// Some byte was seen (a leading byte-order mark is dropped).
    started: bool,
    event: Option<String>,
    data: String,
    /// Whether a `data` field came (an empty one counts).
    has_data: bool,
    id: Option<String>,
    retry: Option<Duration>,
}

// === impl SseParser ===

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// The last `retry:` the stream asked for (the reconnection delay).
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Feeds `chunk`; returns the events it completed, in order.
    ///
    /// # Errors
    ///
    /// [`TooLarge`] once an event outgrows [`MAX_EVENT_BYTES`]; the parser
    /// is then of no further use.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, TooLarge> {
        if self.started {
            return self.feed(chunk);
        }
        // A leading byte-order mark is dropped; it may itself arrive split.
        const BOM: &[u8] = b"\xEF\xBB\xBF";
        let mut head = std::mem::take(&mut self.line);
        head.extend_from_slice(chunk);
        if head.len() < BOM.len() && BOM.starts_with(&head) {
            self.line = head;
            return Ok(Vec::new());
        }
        self.started = true;
        let skip = if head.starts_with(BOM) { BOM.len() } else { 0 };
        self.feed(&head[skip..])
    }

    fn feed(&mut self, mut rest: &[u8]) -> Result<Vec<SseEvent>, TooLarge> {
        let mut out = Vec::new();
        if rest.is_empty() {
            return Ok(out);
        }
        if std::mem::take(&mut self.after_cr) && rest[0] == b'\n' {
            rest = &rest[1..];
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            self.check_size()?;
            let cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(e) = self.line_done(&line) {
                out.push(e);
            }
        }
        self.line.extend_from_slice(rest);
        self.check_size()?;
        Ok(out)
    }

    fn check_size(&self) -> Result<(), TooLarge> {
        if self.line.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(TooLarge);
        }
        Ok(())
    }

    /// One whole line (without its end); a blank one dispatches.
    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // An id with NUL is ignored, as the standard says.
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let id = self.id.take();
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent {
            event: event
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "message".to_owned()),
            data: std::mem::take(&mut self.data),
            id,
        })
    }
}
