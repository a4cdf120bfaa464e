//! Why a plugin file was refused, and telling the operator once per change.
//!
//! Every scan of the directory reads every `.wasm` again, and a file that
//! stays bad is refused again. Logging each of those refusals filled the
//! log with the same ERROR (the watcher used to rescan about every 200 ms,
//! woken by the scan's own reads). So the scanner remembers, per refused
//! plugin, what it said: the kind of refusal and a [`Fingerprint`] of the
//! plugin's files, and logs a refusal again only when either changed (the
//! file was edited or replaced, its manifest too, or the refusal is of
//! another kind) or the file left the directory and came back (the
//! scanner forgets plugins whose file is gone, as it forgets their
//! rejection). The memory is the registry's list of rejected plugins, so
//! it holds at most one entry per `.wasm` in the directory.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::files::ReadError;
use super::manifest::ManifestError;

/// Why a plugin file was refused. The messages are what the API's `reason`
/// and the log show.
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    /// The read did not end within the scan's read timeout.
    #[error("reading {} took longer than {} (a hung file system?)", .file.display(), humantime::format_duration(*.timeout))]
    ReadTimeout { file: PathBuf, timeout: Duration },
    /// The `.wasm` is not a regular file, too large, gone or unreadable.
    #[error("cannot read {}: {error}", .file.display())]
    Unreadable { file: PathBuf, error: ReadError },
    /// Its manifest (`NAME.toml`) cannot be read or is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// It was read but is not a plugin this Vigil can run (not a
    /// component, another world or version, too many memories, ...).
    #[error("{0}")]
    Invalid(String),
    /// The task reading or loading it failed (a panic).
    #[error("{what}: {error}")]
    Crashed { what: &'static str, error: String },
}

/// What kind of refusal a [`Refusal`] is: a refusal of the same file state
/// for another reason is logged again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RefusalKind {
    ReadTimeout,
    Vanished,
    NotRegular,
    TooLarge,
    Io,
    Manifest,
    Invalid,
    Crashed,
}

impl Refusal {
    pub(super) fn kind(&self) -> RefusalKind {
        match self {
            Refusal::ReadTimeout { .. } => RefusalKind::ReadTimeout,
            Refusal::Unreadable { error, .. } => match error {
                ReadError::NotFound => RefusalKind::Vanished,
                ReadError::NotRegular(_) => RefusalKind::NotRegular,
                ReadError::TooLarge { .. } => RefusalKind::TooLarge,
                ReadError::Io(_) => RefusalKind::Io,
            },
            Refusal::Manifest(_) => RefusalKind::Manifest,
            Refusal::Invalid(_) => RefusalKind::Invalid,
            Refusal::Crashed { .. } => RefusalKind::Crashed,
        }
    }
}

/// One state of a plugin's files, told apart without reading them: what
/// `stat` says of the `.wasm` and of its manifest (following symlinks;
/// `None` when absent), and the `.wasm`'s content hash when it was read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Fingerprint {
    wasm: Option<Stamp>,
    manifest: Option<Stamp>,
    sha256: Option<String>,
}

/// What `stat` says of one file that changes when the file does: which
/// file it is (device, inode), its type and permissions, size and times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mode: u32,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

impl Fingerprint {
    /// The stamps of `file` and of its manifest `manifest`. Never opens
    /// them (a FIFO is fine), but a `stat` can hang on a hung file system
    /// like a read: call it where the read runs, under its timeout.
    pub(super) fn of(file: &Path, manifest: &Path) -> Fingerprint {
        Fingerprint {
            wasm: Stamp::of(file),
            manifest: Stamp::of(manifest),
            sha256: None,
        }
    }

    /// The same, with the `.wasm`'s content hash (a rewrite that keeps the
    /// size within one tick of the file system's clock is still a change).
    pub(super) fn with_content(self, sha256: &str) -> Fingerprint {
        Fingerprint {
            sha256: Some(sha256.to_owned()),
            ..self
        }
    }
}

/// A refusal and the state of the files it was about (`None` when the
/// read never finished, so that state is unknown).
#[derive(Debug)]
pub(super) struct Refused {
    pub(super) why: Refusal,
    pub(super) files: Option<Fingerprint>,
}

impl Refused {
    pub(super) fn new(why: impl Into<Refusal>, files: Option<Fingerprint>) -> Refused {
        Refused {
            why: why.into(),
            files,
        }
    }

    /// What was said about the file: the same again is not logged again.
    pub(super) fn said(&self) -> Said {
        Said {
            kind: self.why.kind(),
            files: self.files.clone(),
        }
    }
}

/// What the scanner logged about a refused plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Said {
    kind: RefusalKind,
    files: Option<Fingerprint>,
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::prelude::*;

    use super::super::Plugins;
    use super::*;
    use crate::private_fs::tests::TempDir;

    /// The smallest valid component (the preamble alone): it compiles, but
    /// implements neither world, so it is refused after reading.
    const EMPTY_COMPONENT: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
    /// A core module's preamble, as long: not a component at all.
    const CORE_MODULE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

    #[derive(Clone, Default)]
    struct Collect(Arc<Mutex<Vec<u8>>>);

    impl Write for Collect {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Collect {
        type Writer = Collect;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Collect {
        /// The ERROR lines logged so far about `plugin`.
        fn refusals(&self, plugin: &str) -> usize {
            let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
            text.lines()
                .filter(|l| {
                    l.contains("ERROR")
                        && l.contains("plugin refused")
                        && l.contains(&format!("plugin={plugin} "))
                })
                .count()
        }
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// A rescan of an unchanged refused file logs nothing; a change of it
    /// (content, size, kind, manifest), or its leaving and coming back, is
    /// logged once. The API shows every refusal all along.
    #[tokio::test]
    async fn a_refused_file_is_logged_once_per_change() {
        let log = Collect::default();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(log.clone()),
        );
        let _guard = tracing::subscriber::set_default(subscriber);
        let d = TempDir::new("plugins-refused");
        let plugins = Plugins::new(d.path().to_owned(), None, Some(1), 64).unwrap();
        let (bad, fifo, big) = (
            d.path().join("bad.wasm"),
            d.path().join("fifo.wasm"),
            d.path().join("big.wasm"),
        );
        std::fs::write(&bad, EMPTY_COMPONENT).unwrap();
        mkfifo(&fifo);
        std::fs::write(&big, [0u8; 100]).unwrap();
        let refusals = || ["bad", "fifo", "big"].map(|p| log.refusals(p));
        let reason = |name: &str| {
            let all = plugins.list();
            let p = all.iter().find(|p| p.name == name).expect(name);
            assert_eq!(p.state, super::super::REJECTED, "{p:?}");
            p.reason.clone().unwrap()
        };

        plugins.scan().await;
        assert_eq!(refusals(), [1, 1, 1], "each refusal logged");
        // Rescans of the same files: shown, not logged again.
        plugins.scan().await;
        plugins.scan().await;
        assert_eq!(
            refusals(),
            [1, 1, 1],
            "a rescan logged an unchanged file again"
        );
        assert!(reason("fifo").contains("is a FIFO"), "{}", reason("fifo"));
        assert!(reason("big").contains("more than the 64 bytes allowed"));

        // Another content of the same size, refused for the same kind of
        // reason: a change, logged once.
        std::fs::write(&bad, CORE_MODULE).unwrap();
        plugins.scan().await;
        plugins.scan().await;
        assert_eq!(refusals(), [2, 1, 1]);
        assert!(reason("bad").contains("a core WebAssembly module"));
        // Its manifest added (and refused): another change, another kind.
        std::fs::write(d.path().join("bad.toml"), "kind = \"probe\"\nnot toml").unwrap();
        plugins.scan().await;
        plugins.scan().await;
        assert_eq!(refusals(), [3, 1, 1]);
        assert!(reason("bad").contains("bad.toml"), "{}", reason("bad"));

        // Grown, still too large: logged again; the FIFO replaced by a
        // directory: logged again.
        std::fs::write(&big, [0u8; 200]).unwrap();
        std::fs::remove_file(&fifo).unwrap();
        std::fs::create_dir(&fifo).unwrap();
        plugins.scan().await;
        plugins.scan().await;
        assert_eq!(refusals(), [3, 2, 2]);
        assert!(reason("fifo").contains("is a directory"));

        // Gone: forgotten. Back unchanged: logged again, once.
        std::fs::remove_file(&big).unwrap();
        plugins.scan().await;
        assert!(plugins.list().iter().all(|p| p.name != "big"));
        std::fs::write(&big, [0u8; 200]).unwrap();
        plugins.scan().await;
        plugins.scan().await;
        assert_eq!(refusals(), [3, 2, 3]);
    }

    #[test]
    fn kinds_come_from_the_error_not_its_text() {
        let file = PathBuf::from("x.wasm");
        let unreadable = |error| Refusal::Unreadable {
            file: file.clone(),
            error,
        };
        assert_eq!(
            unreadable(ReadError::NotRegular("a FIFO (named pipe)")).kind(),
            RefusalKind::NotRegular
        );
        assert_eq!(
            unreadable(ReadError::TooLarge {
                size: 2,
                max: 1,
                hint: ""
            })
            .kind(),
            RefusalKind::TooLarge
        );
        assert_eq!(
            unreadable(ReadError::NotFound).kind(),
            RefusalKind::Vanished
        );
        let timeout = Refusal::ReadTimeout {
            file,
            timeout: Duration::from_secs(10),
        };
        assert_eq!(timeout.kind(), RefusalKind::ReadTimeout);
        assert_eq!(
            timeout.to_string(),
            "reading x.wasm took longer than 10s (a hung file system?)"
        );
    }
}
