//! The key that seals session ids: random, kept under `data_dir` so a
//! restart keeps the ids it issued valid (`[cluster]` will supply a key
//! shared by replicas).

use std::path::{Path, PathBuf};

use super::session_id::Key;
use crate::private_fs;

/// The key's file under `data_dir`.
pub use crate::config::SESSION_KEY_FILE as FILE;

/// Why the key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Private(#[from] private_fs::PrivateError),
    #[error("{}: holds {len} bytes, not a 32-byte key: delete it to have a new one made (clients then open new sessions)", path.display())]
    Length { path: PathBuf, len: usize },
    #[error("no random bytes for a key: {0}")]
    Random(#[from] getrandom::Error),
}

/// The key in `data_dir`, made (32 random bytes, a file only Vigil's user
/// can read) when there is none.
pub fn load_or_create(data_dir: &Path) -> Result<Key, KeyError> {
    let path = data_dir.join(FILE);
    let io = |source| KeyError::Io {
        path: path.clone(),
        source,
    };
    if private_fs::existing(&path, private_fs::Kind::File, private_fs::Loose::Tighten)?.is_some() {
        let bytes = std::fs::read(&path).map_err(io)?;
        return Key::try_from(bytes.as_slice()).map_err(|_| KeyError::Length {
            path: path.clone(),
            len: bytes.len(),
        });
    }
    private_fs::dir(data_dir, private_fs::Loose::Tighten)?;
    let mut key: Key = [0; 32];
    getrandom::fill(&mut key)?;
    // Written aside, then renamed: a crash leaves no half key.
    let partial = data_dir.join(crate::config::SESSION_KEY_PARTIAL);
    private_fs::write(&partial, &key).map_err(io)?;
    std::fs::rename(&partial, &path).map_err(io)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_fs::tests::TempDir;

    #[test]
    fn the_key_is_made_once_and_read_back() {
        let dir = TempDir::new("session-key");
        let data = dir.path().join("data");
        let first = load_or_create(&data).unwrap();
        assert_eq!(load_or_create(&data).unwrap(), first, "a restart keeps it");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(data.join(FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_damaged_key_is_an_error_that_says_what_to_do() {
        let dir = TempDir::new("session-key-damaged");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let path = dir.path().join(FILE);
        private_fs::write(&path, b"short").unwrap();
        let e = load_or_create(dir.path()).unwrap_err();
        assert!(matches!(e, KeyError::Length { len: 5, .. }), "{e}");
        assert!(e.to_string().contains("delete it"), "{e}");
    }
}
