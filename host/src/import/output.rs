//! Writing the imported config: never over an existing file unless asked,
//! never half-written, private when it holds secrets.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Why the config was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    #[error("{}: already exists: pass --force to replace it, or choose another --out", path.display())]
    Exists { path: PathBuf },
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes `text` to `path`. Without `force` an existing file is refused
/// (checked by the create itself, so no race with another writer); with
/// it the file is replaced whole through a temporary file in the same
/// directory. `private` makes the file readable by its owner only (0600):
/// for a config holding literal secrets.
pub fn write_config(
    path: &Path,
    text: &str,
    force: bool,
    private: bool,
) -> Result<(), OutputError> {
    let failed = |source| OutputError::Write {
        path: path.to_owned(),
        source,
    };
    if !force {
        let mut f = create_new(path, private).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                OutputError::Exists {
                    path: path.to_owned(),
                }
            } else {
                failed(e)
            }
        })?;
        return f.write_all(text.as_bytes()).map_err(failed);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "vigil.toml".to_owned());
    let tmp = path.with_file_name(format!(".{name}.import-{}.tmp", std::process::id()));
    let written = (|| {
        let _ = std::fs::remove_file(&tmp);
        let mut f = create_new(&tmp, private)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(failed)
}

fn create_new(path: &Path, private: bool) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_file_is_kept_unless_forced() {
        let dir = std::env::temp_dir().join(format!("vigil-import-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("vigil.toml");
        write_config(&out, "a = 1\n", false, false).unwrap();
        let e = write_config(&out, "a = 2\n", false, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: already exists: pass --force to replace it, or choose another --out",
                out.display()
            )
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a = 1\n");
        write_config(&out, "a = 3\n", true, true).unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a = 3\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&out).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "a file with secrets is private: {mode:o}");
        }
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
