//! Paths that only the user Vigil runs as may change: the state store
//! under `data_dir` and the compiled-plugin cache.
//!
//! Why they must be private:
//! - the store holds quarantines, restart counts and the audit log: another
//!   user who can write it can release a backend an operator held, or
//!   forge the log, and one who can read it learns what ran and who acted;
//! - the cache holds machine code that Vigil loads without compiling it
//!   again (wasmtime's `Component::deserialize_file` is `unsafe` for this
//!   reason): a cache another user can write is code execution in Vigil.
//!
//! The rule, in one place ([`existing`]): a path is private when it is
//! owned by Vigil's effective user, or by root (who can change anything
//! anyway), and neither its group nor others may write it. What Vigil
//! creates here it creates owner-only — 0700 for directories, 0600 for
//! files — and sets that mode explicitly after creating, so the process
//! umask (even 000) does not matter.
//!
//! What to do with an existing path that is *not* private depends on what
//! it holds, so callers choose with [`Loose`]:
//! - [`Loose::Tighten`] (the store's own files, which hold data only): a
//!   path Vigil's user owns is narrowed to owner-only and reported as
//!   [`Outcome::Tightened`] for the caller to log; one another user owns is
//!   refused. Only for paths that are Vigil's alone: tightening a shared
//!   directory (`/tmp`, a home directory) would break its other users.
//! - [`Loose::Refuse`] (the cache, which holds code): refused, never
//!   tightened — what is in it may already have been replaced, and
//!   tightening would make Vigil trust it.
//!
//! Every refusal names the path, what is wrong, and the command that fixes
//! it.

use std::fmt;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A directory or a file: what is expected, and its owner-only mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

impl Kind {
    /// The mode Vigil gives what it creates: owner-only.
    pub fn mode(self) -> u32 {
        match self {
            Kind::Dir => 0o700,
            Kind::File => 0o600,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Dir => "directory",
            Kind::File => "file",
        }
    }
}

/// What to do with an existing path that group or others may access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loose {
    /// Narrow it to owner-only when Vigil's user owns it (data: the store).
    Tighten,
    /// Refuse it when group or others may write it (code: the cache).
    Refuse,
}

/// What a call did with a path that is now private.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It did not exist; it was created owner-only.
    Created,
    /// It existed and was private already.
    Private,
    /// It existed with mode `from` (which group or others could access)
    /// and was narrowed to owner-only. Callers log this.
    Tightened { from: u32 },
}

/// Why a path cannot be used as a private one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateError {
    #[error("cannot create {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot read {}: {source}", path.display())]
    Stat { path: PathBuf, source: io::Error },
    #[error("{} is not a {}: move it away or choose another path", path.display(), kind.noun())]
    NotA { path: PathBuf, kind: Kind },
    #[error("cannot restrict {} to its owner (chmod {:o}): {source}", path.display(), kind.mode())]
    Chmod {
        path: PathBuf,
        kind: Kind,
        source: io::Error,
    },
    #[error(
        "{} is owned by uid {owner}, not by uid {me} that Vigil runs as, so that user can change it: \
         `chown {me} {}` (or choose a path uid {me} owns)",
        path.display(),
        path.display()
    )]
    ForeignOwner { path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{} can be written by {} (mode {}), so another user can change what Vigil reads from it: `chmod {:o} {}`{}",
        path.display(),
        Writers(*mode),
        Mode(*mode),
        kind.mode(),
        path.display(),
        match kind {
            Kind::Dir => " if only Vigil uses it, else choose a directory of Vigil's own",
            Kind::File => "",
        }
    )]
    Writable {
        path: PathBuf,
        kind: Kind,
        mode: u32,
    },
}

impl PrivateError {
    /// The path the error is about.
    pub fn path(&self) -> &Path {
        match self {
            PrivateError::Create { path, .. }
            | PrivateError::Stat { path, .. }
            | PrivateError::NotA { path, .. }
            | PrivateError::Chmod { path, .. }
            | PrivateError::ForeignOwner { path, .. }
            | PrivateError::Writable { path, .. } => path,
        }
    }
}

/// A mode as `chmod` and `ls -l` users read it: `0755`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mode(pub u32);

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0 & 0o7777)
    }
}

/// Who besides the owner may write, from a mode's bits.
struct Writers(u32);

impl fmt::Display for Writers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match (self.0 & 0o020 != 0, self.0 & 0o002 != 0) {
            (true, true) => "its group and others",
            (true, false) => "its group",
            _ => "others",
        })
    }
}

/// `path` as a private directory: created 0700 (with any missing parents,
/// also 0700 before the umask) when absent, else judged by `loose`.
pub fn dir(path: &Path, loose: Loose) -> Result<Outcome, PrivateError> {
    if let Some(outcome) = existing(path, Kind::Dir, loose)? {
        return Ok(outcome);
    }
    DirBuilder::new()
        .recursive(true)
        .mode(Kind::Dir.mode())
        .create(path)
        .map_err(|source| PrivateError::Create {
            path: path.to_owned(),
            source,
        })?;
    // The umask may have narrowed the mode (it cannot widen it); set it
    // exactly, then judge the result like any existing directory, which
    // also catches a directory another user created in between.
    chmod(path, Kind::Dir)?;
    existing(path, Kind::Dir, loose)?;
    Ok(Outcome::Created)
}

/// `path` as a private file: created empty with mode 0600 when absent (never
/// following a symlink planted in its place), else judged by `loose`.
pub fn file(path: &Path, loose: Loose) -> Result<Outcome, PrivateError> {
    if let Some(outcome) = existing(path, Kind::File, loose)? {
        return Ok(outcome);
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(Kind::File.mode())
        .open(path)
    {
        Ok(f) => {
            set_mode(&f, path, Kind::File)?;
            Ok(Outcome::Created)
        }
        // Created by someone else since `existing` looked: judge that one.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => existing(path, Kind::File, loose)?
            .ok_or_else(|| PrivateError::Create {
                path: path.to_owned(),
                source: e,
            }),
        Err(source) => Err(PrivateError::Create {
            path: path.to_owned(),
            source,
        }),
    }
}

/// An existing `path` judged by `loose`, or `Ok(None)` when there is none.
///
/// The rule: the owner must be Vigil's effective user or root, or it is
/// [`PrivateError::ForeignOwner`]. What Vigil's user owns is narrowed to
/// owner-only under [`Loose::Tighten`]; under [`Loose::Refuse`], and for
/// what root owns (which Vigil cannot change unless it is root), a path
/// its group or others may write is [`PrivateError::Writable`].
pub fn existing(path: &Path, kind: Kind, loose: Loose) -> Result<Option<Outcome>, PrivateError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PrivateError::Stat {
                path: path.to_owned(),
                source,
            });
        }
    };
    let is_kind = match kind {
        Kind::Dir => meta.is_dir(),
        Kind::File => meta.is_file(),
    };
    if !is_kind {
        return Err(PrivateError::NotA {
            path: path.to_owned(),
            kind,
        });
    }
    let (owner, me, mode) = (meta.uid(), euid(), meta.mode() & 0o7777);
    if owner != me && owner != 0 {
        return Err(PrivateError::ForeignOwner {
            path: path.to_owned(),
            owner,
            me,
        });
    }
    let writable = mode & 0o022 != 0;
    if owner == me && loose == Loose::Tighten {
        if mode & 0o077 == 0 {
            return Ok(Some(Outcome::Private));
        }
        chmod(path, kind)?;
        return Ok(Some(Outcome::Tightened { from: mode }));
    }
    if writable {
        return Err(PrivateError::Writable {
            path: path.to_owned(),
            kind,
            mode,
        });
    }
    Ok(Some(Outcome::Private))
}

/// Writes `bytes` to `path` as a private file (0600 whatever the umask),
/// replacing a file there: the first half of write-then-rename.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(Kind::File.mode())
        .open(path)?;
    // An existing file keeps its mode on open: set it.
    f.set_permissions(Permissions::from_mode(Kind::File.mode()))?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// The effective user id, whose paths Vigil trusts.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn chmod(path: &Path, kind: Kind) -> Result<(), PrivateError> {
    fs::set_permissions(path, Permissions::from_mode(kind.mode())).map_err(|source| {
        PrivateError::Chmod {
            path: path.to_owned(),
            kind,
            source,
        }
    })
}

fn set_mode(f: &fs::File, path: &Path, kind: Kind) -> Result<(), PrivateError> {
    f.set_permissions(Permissions::from_mode(kind.mode()))
        .map_err(|source| PrivateError::Chmod {
            path: path.to_owned(),
            kind,
            source,
        })
}

/// Also gives other modules' tests a private temp directory (`TempDir`).
#[cfg(test)]
pub(crate) mod tests;
