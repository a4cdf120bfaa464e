//! The log writer that masks every line before it is written.
//!
//! Wraps the writer of `tracing_subscriber`'s fmt layer, so every log line
//! is masked, Vigil's own and those of the libraries it uses (rmcp logs
//! the JSON-RPC errors it answers, reqwest errors name URLs), in the human
//! and the JSON format alike.
//!
//! The fmt layer formats one event into a buffer and hands it over with a
//! single `write_all`, so each `write` call here is one whole event: it is
//! masked as a whole (a secret is never split across two calls) and taken
//! whole (the returned length is the input's), while the masked text is
//! written to the inner writer.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

use super::Redactor;

/// A [`MakeWriter`] whose writers mask with `redactor` before writing to
/// `inner`'s.
#[derive(Debug, Clone)]
pub struct Masking<M> {
    redactor: Redactor,
    inner: M,
}

impl<M> Masking<M> {
    pub fn new(redactor: Redactor, inner: M) -> Self {
        Self { redactor, inner }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Masking<M> {
    type Writer = Masked<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Masked {
            redactor: self.redactor.clone(),
            inner: self.inner.make_writer(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        Masked {
            redactor: self.redactor.clone(),
            inner: self.inner.make_writer_for(meta),
        }
    }
}

/// One event's writer (see the module doc).
pub struct Masked<W> {
    redactor: Redactor,
    inner: W,
}

impl<W: Write> Write for Masked<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.inner.write_all(self.redactor.mask(text).as_bytes())?,
            // The fmt layer writes strings; anything else is written as
            // text too, its invalid bytes replaced.
            Err(_) => {
                let text = String::from_utf8_lossy(buf);
                self.inner.write_all(self.redactor.mask(&text).as_bytes())?
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::prelude::*;

    use super::*;
    use crate::redact::Secrets;

    /// A `MakeWriter` collecting everything written, for assertions.
    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<u8>>>);

    impl Write for Collect {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Collect {
        type Writer = Collect;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn logged(json: bool, log: impl FnOnce()) -> String {
        let out = Collect::default();
        let redactor = Redactor::new(Secrets::new(["header-key-3456", "env-token-2468"]));
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Masking::new(redactor, out.clone()));
        let fmt = if json {
            fmt.json().boxed()
        } else {
            fmt.boxed()
        };
        let subscriber = tracing_subscriber::registry().with(fmt);
        tracing::subscriber::with_default(subscriber, log);
        let bytes = out.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    fn log_some() {
        tracing::info!(target: "vigil::backend::stderr", backend = "login", "cannot log in with env-token-2468");
        tracing::warn!(error = ?"refused: x-api-key='header-key-3456'", "response error");
        tracing::info!(instance = %"http://u:pw@h:1/mcp?api_key=k1", "backend up");
    }

    #[test]
    fn human_lines_are_masked() {
        let out = logged(false, log_some);
        assert!(
            out.contains("cannot log in with *** backend=\"login\""),
            "{out}"
        );
        assert!(out.contains(r#"error="refused: x-api-key='***'""#), "{out}");
        assert!(
            out.contains("instance=http://***@h:1/mcp?api_key=***"),
            "{out}"
        );
        assert!(!out.contains("env-token-2468") && !out.contains("header-key-3456"));
        assert_eq!(out.lines().count(), 3, "{out}");
    }

    #[test]
    fn json_lines_are_masked() {
        let out = logged(true, log_some);
        for line in out.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let text = v.to_string();
            assert!(
                !text.contains("env-token-2468")
                    && !text.contains("header-key-3456")
                    && !text.contains("pw@"),
                "{text}"
            );
        }
        assert!(out.contains("cannot log in with ***"), "{out}");
    }
}
