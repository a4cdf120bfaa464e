//! An incremental `text/event-stream` parser, for the lean client: Vigil
//! may answer a POST with a stream of events, the response among them.
//!
//! Contract (the WHATWG event-stream rules, reduced to what MCP uses): lines
//! end with CR LF, LF or CR, in any mix, and may be split anywhere across
//! [`SseParser::feed`] calls; `data` fields are joined with LF; an empty
//! line dispatches the event if it has data (a priming event with an empty
//! `data` or none is not dispatched); comments (`:`), `event`, `id`, `retry`
//! and unknown fields are skipped; a leading byte-order mark is dropped.

/// Parser state across the chunks of one stream.
#[derive(Debug, Default)]
pub struct SseParser {
    /// An incomplete line carried over from the last chunk.
    partial: Vec<u8>,
    /// The data of the event being built (each line followed by LF).
    data: Vec<u8>,
    /// The last chunk ended in CR: an LF starting the next one belongs to it.
    skip_lf: bool,
    /// Past the first bytes (where a byte-order mark may stand).
    started: bool,
}

/// Longest line kept while waiting for its end.
const MAX_LINE: usize = 16 * 1024 * 1024;

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `input`, calling `on_event` with the data of every event it
    /// completes. Fails only on a line longer than 16 MiB.
    pub fn feed(
        &mut self,
        mut input: &[u8],
        mut on_event: impl FnMut(&[u8]),
    ) -> Result<(), String> {
        if !self.started {
            if self.partial.len() + input.len() < 3 && b"\xEF\xBB\xBF".starts_with(input) {
                // Too few bytes to tell a byte-order mark yet.
                self.partial.extend_from_slice(input);
                return Ok(());
            }
            self.started = true;
            if !self.partial.is_empty() {
                let mut head = std::mem::take(&mut self.partial);
                head.extend_from_slice(input);
                let rest = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&head).to_vec();
                return self.feed(&rest, on_event);
            }
            input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
        }
        if self.skip_lf {
            self.skip_lf = false;
            if let [b'\n', rest @ ..] = input {
                input = rest;
            }
        }
        while let Some(end) = input.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (line, terminator) = (&input[..end], input[end]);
            input = &input[end + 1..];
            if terminator == b'\r' {
                match input {
                    [b'\n', rest @ ..] => input = rest,
                    [] => self.skip_lf = true,
                    _ => {}
                }
            }
            if self.partial.is_empty() {
                self.line(line, &mut on_event);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.line(&whole, &mut on_event);
                whole.clear();
                self.partial = whole;
            }
        }
        if self.partial.len() + input.len() > MAX_LINE {
            return Err(format!("an event-stream line longer than {MAX_LINE} bytes"));
        }
        self.partial.extend_from_slice(input);
        Ok(())
    }

    fn line(&mut self, line: &[u8], on_event: &mut impl FnMut(&[u8])) {
        if line.is_empty() {
            // The data minus the LF after its last line; empty data is no
            // message (rmcp's priming event is `id`, `retry` and `data:`).
            if self.data.len() > 1 {
                on_event(&self.data[..self.data.len() - 1]);
            }
            self.data.clear();
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(0) => return, // a comment
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            self.data.extend_from_slice(value);
            self.data.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for c in chunks {
            p.feed(c, |d| got.push(String::from_utf8(d.to_vec()).unwrap()))
                .unwrap();
        }
        got
    }

    const STREAM: &[u8] = b"\xEF\xBB\xBFid: 0\r\nretry: 3000\r\ndata:\r\n\r\n: comment\n\
        event: message\ndata: {\"id\":1,\ndata:  \"x\":2}\n\ndata:last\rdata:line\r\r";

    #[test]
    fn whole_stream() {
        assert_eq!(
            events(&[STREAM]),
            vec!["{\"id\":1,\n \"x\":2}".to_owned(), "last\nline".to_owned()]
        );
    }

    #[test]
    fn split_at_every_byte() {
        let want = events(&[STREAM]);
        for cut in 0..=STREAM.len() {
            let got = events(&[&STREAM[..cut], &STREAM[cut..]]);
            assert_eq!(got, want, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(events(&singles), want);
    }

    #[test]
    fn priming_event_and_unfinished_event_are_not_dispatched() {
        assert!(events(&[b"id: 0\ndata:\n\n"]).is_empty());
        assert!(events(&[b"id: 0\nretry: 10\n\n"]).is_empty());
        assert!(events(&[b"data: no blank line yet\n"]).is_empty());
        assert_eq!(events(&[b"data\ndata: a\n\n"]), vec!["\na".to_owned()]);
    }
}
