//! Reading what the plugin directory holds: regular files only, never
//! blocking, and never more than a cap. Used for `NAME.wasm`, `NAME.toml`
//! and by `vigil plugin check`.
//!
//! Why: anyone who can write the directory chooses what Vigil reads.
//! `std::fs::read` of a FIFO named `x.wasm` waits for a writer forever
//! (and with it the directory watcher: nothing would load or unload
//! again), and of a 1 GiB sparse file allocates 1 GiB before any check
//! can refuse it. So [`read`]:
//!
//! 1. looks at what the path names (following symlinks: a link to a
//!    regular file is fine) and refuses anything but a regular file
//!    without opening it (opening a device can have effects of its own);
//! 2. opens it with `O_NONBLOCK` (a FIFO swapped in meanwhile still does
//!    not block the open) and `O_NOCTTY`, and checks the opened descriptor
//!    again with `fstat`: what is read is what was checked;
//! 3. refuses a file larger than the cap by its size, before reading;
//! 4. reads at most cap + 1 bytes, so a file growing while it is read is
//!    refused too, never read whole.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Default largest plugin file (`[plugins] max_file_bytes`): the largest
/// plugin we ship an example of, the componentize-py probe (a CPython
/// inside), is about 18 MiB; this leaves it room to grow threefold.
pub const DEFAULT_MAX_PLUGIN: u64 = 64 << 20;
/// Most `[plugins] max_file_bytes` may be: the file is read into memory
/// whole and compiled, so past this the cap would protect nothing.
pub const MOST_MAX_PLUGIN: u64 = 1 << 30;
/// Largest manifest (`NAME.toml`) read: a manifest is a few hundred bytes;
/// this leaves room for long `[config]` values.
pub const MAX_MANIFEST: u64 = 64 << 10;

/// Why a plugin file was not read. The messages say "it": callers name the
/// file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Nothing there (a manifest may be absent).
    #[error("it does not exist")]
    NotFound,
    #[error("it is {0}, not a regular file: only regular files (or symlinks to them) are read")]
    NotRegular(&'static str),
    #[error("it is {size} bytes, more than the {max} bytes allowed{hint}")]
    TooLarge {
        /// What `fstat` said, or `max + 1` when it grew while read.
        size: u64,
        max: u64,
        /// How to raise the cap, if it can be.
        hint: &'static str,
    },
    #[error("{0}")]
    Io(io::Error),
}

/// The contents of `path`, a regular file of at most `max` bytes. `hint`
/// ends the too-large message (say, which key raises the cap).
pub fn read(path: &Path, max: u64, hint: &'static str) -> Result<Vec<u8>, ReadError> {
    let io = |e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => ReadError::NotFound,
        _ => ReadError::Io(e),
    };
    regular(&std::fs::metadata(path).map_err(io)?.file_type())?;
    let mut file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    regular(&meta.file_type())?;
    let too_large = |size: u64| ReadError::TooLarge { size, max, hint };
    if meta.len() > max {
        return Err(too_large(meta.len()));
    }
    // Sized from fstat (already at most `max`), never from the cap.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.by_ref()
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max + 1));
    }
    Ok(bytes)
}

/// Refuses what is not a regular file, naming what it is.
fn regular(t: &std::fs::FileType) -> Result<(), ReadError> {
    if t.is_file() {
        return Ok(());
    }
    Err(ReadError::NotRegular(if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_fs::tests::TempDir;
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    #[test]
    fn a_regular_file_and_a_symlink_to_one_are_read() {
        let d = TempDir::new("files-regular");
        let f = d.path().join("p.wasm");
        std::fs::write(&f, b"\0asm").unwrap();
        assert_eq!(read(&f, 4, "").unwrap(), b"\0asm");
        let link = d.path().join("link.wasm");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read(&link, 1 << 20, "").unwrap(), b"\0asm");
        std::fs::write(&f, b"").unwrap();
        assert_eq!(read(&f, 0, "").unwrap(), b"");
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let d = TempDir::new("files-fifo");
        let f = d.path().join("x.wasm");
        mkfifo(&f);
        // No writer ever opens it: a plain read would wait forever. Run in
        // a thread so a regression fails the test instead of hanging it.
        let (tx, rx) = std::sync::mpsc::channel();
        let p = f.clone();
        std::thread::spawn(move || tx.send(read(&p, 1 << 20, "").map(|_| ())));
        let got = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("reading a FIFO blocked");
        let e = got.unwrap_err().to_string();
        assert!(
            e.contains("is a FIFO (named pipe), not a regular file"),
            "{e}"
        );
        // Nor through a symlink.
        let link = d.path().join("y.toml");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let e = read(&link, 1 << 20, "").unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
    }

    #[test]
    fn a_sparse_file_over_the_cap_is_refused_without_reading_it() {
        let d = TempDir::new("files-sparse");
        let f = d.path().join("big.wasm");
        File::create(&f).unwrap().set_len(1 << 30).unwrap();
        let t0 = Instant::now();
        let e = read(&f, 64 << 20, "; raise [plugins] max_file_bytes")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "it is 1073741824 bytes, more than the 67108864 bytes allowed; raise [plugins] max_file_bytes"
        );
        // Refused by its size: reading 1 GiB of zeros would take far longer.
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        // One byte over is over.
        std::fs::write(&f, b"12345").unwrap();
        assert!(matches!(
            read(&f, 4, ""),
            Err(ReadError::TooLarge {
                size: 5,
                max: 4,
                ..
            })
        ));
    }

    #[test]
    fn a_directory_named_like_a_plugin_is_refused() {
        let d = TempDir::new("files-dir");
        let f = d.path().join("x.wasm");
        std::fs::create_dir(&f).unwrap();
        let e = read(&f, 1 << 20, "").unwrap_err().to_string();
        assert!(e.contains("is a directory, not a regular file"), "{e}");
    }

    #[test]
    fn a_device_is_refused_without_opening_it() {
        let e = read(Path::new("/dev/zero"), 1 << 20, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a character device"), "{e}");
    }

    #[test]
    fn missing_is_not_found() {
        assert!(matches!(
            read(Path::new("/nonexistent/x.toml"), 10, ""),
            Err(ReadError::NotFound)
        ));
    }
}
