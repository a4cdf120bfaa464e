//! [`StoreError`]: what every store implementation fails with, whatever
//! its database. Callers match on [`StoreError::kind`], never on the
//! message; the message and the [`fix`](StoreError::fix) are written by
//! the implementation when it builds the error, where it still knows its
//! own error codes (SQLite's "not a database" becomes "move it away").

use std::error::Error;
use std::fmt;

/// What kind of failure a [`StoreError`] is, for a caller that acts on it.
///
/// An implementation classifies its own errors by their type or code when
/// it builds the error, never by their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store cannot be opened or reached, or was busy for too long:
    /// its file cannot be opened, a lock was held past the timeout, a
    /// database server is down. Trying again later may work.
    Unavailable,
    /// A path the store lives at cannot be created or is not private to
    /// Vigil's user (see [`crate::private_fs`]).
    Path,
    /// The store holds what this build cannot use: a file that is not a
    /// database or is damaged, a schema written by a newer Vigil.
    Corrupt,
    /// The disk (or the server's) failed or is full.
    Io,
    /// A write conflicted with what is stored (a constraint, a concurrent
    /// writer that won).
    Conflict,
    /// Anything else: a statement the database refused, a store task that
    /// panicked.
    Other,
}

impl StoreErrorKind {
    /// A short name for logs and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Path => "path",
            StoreErrorKind::Corrupt => "corrupt",
            StoreErrorKind::Io => "io",
            StoreErrorKind::Conflict => "conflict",
            StoreErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure of the state store: its [`kind`](Self::kind), what failed
/// (`store at /var/lib/vigil/vigil.db: file is not a database`), and what
/// an operator does about it ([`fix`](Self::fix)).
///
/// The cause is kept as a boxed [`source`](Error::source), so the
/// database's own error stays reachable by type (`downcast_ref`) without
/// naming any database in this type or its signatures.
pub struct StoreError {
    kind: StoreErrorKind,
    /// Printed before the cause: `store`, `store at PATH`; none when the
    /// cause's text says it all (a path error names its path).
    context: Option<String>,
    fix: Option<String>,
    source: Box<dyn Error + Send + Sync + 'static>,
}

// === impl StoreError ===

impl StoreError {
    /// A failure of `kind` caused by `source` (an error, or a message).
    pub fn new(kind: StoreErrorKind, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        StoreError {
            kind,
            context: None,
            fix: None,
            source: source.into(),
        }
    }

    /// Printed before the cause, as `{context}: {cause}`.
    #[must_use]
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// What an operator does about it (see [`fix`](Self::fix)).
    #[must_use]
    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// What an operator does about it, for the message that refuses to
    /// start; `None` when the error's own text already says it.
    pub fn fix(&self) -> Option<&str> {
        self.fix.as_deref()
    }
}

impl From<crate::private_fs::PrivateError> for StoreError {
    /// A store path that cannot be created or is not private: the text
    /// names the path; the fix says how to make it usable.
    fn from(e: crate::private_fs::PrivateError) -> Self {
        use crate::private_fs::PrivateError as P;
        let fix = match &e {
            P::Create { path, .. } | P::Stat { path, .. } => Some(format!(
                "make {} a directory the user Vigil runs as can write, or point `data_dir` elsewhere",
                path.display()
            )),
            P::Chmod { path, .. } => Some(format!(
                "run Vigil as the owner of {}, or point `data_dir` elsewhere",
                path.display()
            )),
            _ => None,
        };
        StoreError {
            kind: StoreErrorKind::Path,
            context: None,
            fix,
            source: Box::new(e),
        }
    }
}

/// `{context}: {cause}`, or the cause alone.
impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.context {
            Some(c) => write!(f, "{c}: {}", self.source),
            None => write!(f, "{}", self.source),
        }
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError")
            .field("kind", &self.kind)
            .field("context", &self.context)
            .field("fix", &self.fix)
            .field("source", &self.source)
            .finish()
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_the_context_then_the_cause_and_the_kind_is_kept() {
        let e = StoreError::new(StoreErrorKind::Io, "disk I/O error")
            .context("store")
            .with_fix("check the disk");
        assert_eq!(e.to_string(), "store: disk I/O error");
        assert_eq!(e.kind(), StoreErrorKind::Io);
        assert_eq!(e.fix(), Some("check the disk"));
        assert_eq!(e.source().unwrap().to_string(), "disk I/O error");
        let bare = StoreError::new(StoreErrorKind::Other, "no context");
        assert_eq!(
            (bare.to_string().as_str(), bare.fix()),
            ("no context", None)
        );
    }

    #[test]
    fn the_cause_stays_reachable_by_type() {
        let io = std::io::Error::other("gone");
        let e = StoreError::new(StoreErrorKind::Unavailable, io);
        assert!(e.source().unwrap().is::<std::io::Error>());
    }
}
