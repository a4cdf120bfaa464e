//! Config errors that say what is wrong, where, and how to fix it.

use std::fmt;
use std::path::PathBuf;

/// One problem found in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Key path such as `backends[2].command`; empty for file-level problems.
    pub key: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// Every problem found in a config file, with the file it came from.
///
/// Prints one problem per line, like
/// `vigil.toml: backends[2].command: must not be empty for a stdio backend`.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub kind: ConfigErrorKind,
}

/// What kind of failure a [`ConfigError`] is.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigErrorKind {
    /// The file could not be read.
    Read(std::io::Error),
    /// The file was read but is not acceptable.
    Invalid(Vec<Problem>),
}

impl ConfigError {
    pub(crate) fn invalid(file: impl Into<PathBuf>, problems: Vec<Problem>) -> Self {
        Self {
            file: file.into(),
            kind: ConfigErrorKind::Invalid(problems),
        }
    }

    /// The problems, empty when the file could not be read.
    pub fn problems(&self) -> &[Problem] {
        match &self.kind {
            ConfigErrorKind::Invalid(p) => p,
            ConfigErrorKind::Read(_) => &[],
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match &self.kind {
            ConfigErrorKind::Read(e) => write!(f, "{file}: cannot read config file: {e}"),
            ConfigErrorKind::Invalid(problems) => {
                for (i, p) in problems.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    write!(f, "{file}")?;
                    if let Some(line) = p.line {
                        write!(f, ":{line}")?;
                    }
                    if !p.key.is_empty() {
                        write!(f, ": {}", p.key)?;
                    }
                    write!(f, ": {}", p.message)?;
                }
                Ok(())
            }
        }
    }
}
