//! `vigil import`: the MCP servers a desktop client already runs, turned
//! into `[[backends]]` that `vigil check` accepts and `vigil serve` runs.
//!
//! A new user has the server list of Claude Desktop, Cursor, Claude Code
//! (`"mcpServers"`) or VS Code (`"servers"`, or `"mcp": {"servers"}` in its
//! settings). [`import_file`] reads it and gives the TOML text plus a
//! [`Note`] for everything not carried over exactly: each unknown or
//! unsupported field with its JSON path, each renamed server, each entry
//! Vigil cannot run (with why and what to do), each literal value that
//! looks like a secret. Nothing is dropped without a note.
//!
//! Secrets stay references: `${env:NAME}`, `${NAME}` and `${input:ID}` in
//! the file become Vigil's `${NAME}` (see `config/expand.rs`), which Vigil
//! expands from its own environment when it loads the config.
//!
//! The steps are pure functions, each in its module: `json` parses the
//! text (JSON with comments) keeping paths; `source` finds the shape and
//! its server blocks; `entry` maps one server (with `refs` for the
//! reference syntax and `secrets` for literal credentials); `names` makes
//! names valid and unique; `render` writes the TOML. Only
//! [`import_file`] and [`write_config`] touch the file system; nothing here
//! reads the environment or the network.

mod entry;
mod json;
mod names;
mod output;
mod refs;
mod render;
mod secrets;
mod source;

use std::fmt;
use std::io::Read as _;
use std::path::{Path, PathBuf};

pub use json::JsonPath;
pub use output::{OutputError, write_config};
pub use source::Format;

/// Largest file read. MCP client configs are a few KiB; this only keeps a
/// wrong path (a log, `/dev/zero`) from being read whole.
pub const MAX_FILE_BYTES: u64 = 8 << 20;

/// How much a [`Note`] asks of the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Done differently than written, and fine (a renamed server, an
    /// `${input:ID}` that is now a variable).
    Note,
    /// Not carried over, or carried over with a risk: read it.
    Warning,
}

/// Something the user should know about one place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub level: Level,
    pub path: JsonPath,
    pub message: String,
}

impl Note {
    pub(crate) fn info(path: JsonPath, message: impl Into<String>) -> Self {
        Self {
            level: Level::Note,
            path,
            message: message.into(),
        }
    }

    pub(crate) fn warning(path: JsonPath, message: impl Into<String>) -> Self {
        Self {
            level: Level::Warning,
            path,
            message: message.into(),
        }
    }

    /// `warning: FILE: PATH: message`, as printed on stderr.
    pub fn in_file(&self, file: &Path) -> String {
        format!(
            "{}: {}: {}: {}",
            self.level,
            file.display(),
            self.path,
            self.message
        )
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Note => "note",
            Level::Warning => "warning",
        })
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.level, self.path, self.message)
    }
}

/// A file that cannot be imported; each message names the file, the place
/// and what was expected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: larger than {} MiB, which no MCP client config is: is it the right file?",
        file.display(),
        MAX_FILE_BYTES >> 20
    )]
    TooLarge { file: PathBuf },
    #[error("{}:{line}: not UTF-8 text: save the file as UTF-8", file.display())]
    NotUtf8 { file: PathBuf, line: usize },
    #[error("{}:{line}:{column}: not valid JSON: {message}", file.display())]
    Syntax {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{}: no MCP servers in it: expected a top-level \"mcpServers\" (Claude Desktop, Cursor, Claude Code), \"servers\" (VS Code's .vscode/mcp.json) or \"mcp\": {{\"servers\"}} (VS Code's settings.json) object; the file {found}",
        file.display()
    )]
    NoServers { file: PathBuf, found: String },
    #[error("{}: {path}: {message}", file.display())]
    Shape {
        file: PathBuf,
        path: JsonPath,
        message: String,
    },
    #[error("{}: {path}: holds no servers: nothing to import", file.display())]
    Empty { file: PathBuf, path: JsonPath },
    /// Every entry was skipped; `notes` say why.
    #[error(
        "{}: none of its {count} server(s) could be imported (the warnings say why)",
        file.display()
    )]
    NothingImported {
        file: PathBuf,
        count: usize,
        notes: Vec<Note>,
    },
}

/// An imported file.
#[derive(Debug, Clone)]
pub struct Import {
    /// The `vigil.toml` text.
    pub toml: String,
    /// Every note, in file order.
    pub notes: Vec<Note>,
    /// The backends' names, in file order.
    pub backends: Vec<String>,
    /// Entries not imported.
    pub skipped: usize,
    /// Environment variables the config reads, in first-use order.
    pub vars: Vec<String>,
    /// Whether it holds literal values that look like secrets.
    pub literal_secrets: bool,
}

/// Where the text came from.
pub struct Source<'a> {
    /// The file, as the user named it (for messages and the header).
    pub file: &'a Path,
    /// The workspace folder, for `${workspaceFolder}` (see [`workspace_of`]).
    pub workspace: Option<&'a Path>,
}

/// Reads and imports `file`.
pub fn import_file(file: &Path) -> Result<Import, ImportError> {
    let text = read(file)?;
    let workspace = workspace_of(file);
    import_text(
        &text,
        &Source {
            file,
            workspace: workspace.as_deref(),
        },
    )
}

/// The folder a `.vscode/` or `.cursor/` file belongs to: what VS Code and
/// Cursor call `${workspaceFolder}`.
pub fn workspace_of(file: &Path) -> Option<PathBuf> {
    let dir = file.canonicalize().ok()?.parent()?.to_owned();
    let name = dir.file_name()?.to_str()?;
    matches!(name, ".vscode" | ".cursor")
        .then(|| dir.parent().map(Path::to_owned))
        .flatten()
}

/// The text of `file`, at most [`MAX_FILE_BYTES`] of it, as UTF-8.
pub fn read(file: &Path) -> Result<String, ImportError> {
    let read_err = |source| ImportError::Read {
        file: file.to_owned(),
        source,
    };
    let too_large = || ImportError::TooLarge {
        file: file.to_owned(),
    };
    let f = std::fs::File::open(file).map_err(read_err)?;
    if f.metadata()
        .is_ok_and(|m| m.is_file() && m.len() > MAX_FILE_BYTES)
    {
        return Err(too_large());
    }
    // Room for the limit and one byte more, reserved once: an endless
    // stream (a device, a pipe) fills it and stops, with no doubling
    // copies on the way.
    let mut bytes = Vec::with_capacity(MAX_FILE_BYTES as usize + 1);
    f.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        ImportError::NotUtf8 {
            file: file.to_owned(),
            line: valid.iter().filter(|b| **b == b'\n').count() + 1,
        }
    })
}

/// Imports config text (see the module doc).
pub fn import_text(text: &str, src: &Source<'_>) -> Result<Import, ImportError> {
    let file = src.file;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root = json::parse(text).map_err(|e| ImportError::Syntax {
        file: file.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let located = source::locate(root, file)?;
    let mut formats = Vec::new();
    let mut mapped = Vec::new();
    for block in located.blocks {
        if !formats.contains(&block.format) {
            formats.push(block.format);
        }
        let resolver = refs::Resolver {
            inputs: &located.inputs,
            workspace: src.workspace,
            bare_is_env: block.format == Format::McpServers,
        };
        for (name, value) in block.servers {
            let path = block.path.key(&name);
            mapped.push(entry::map(&name, path, value, &resolver));
        }
    }
    let mut backends: Vec<entry::Backend> = Vec::new();
    let mut skipped = Vec::new();
    let mut notes = located.notes;
    for m in &mapped {
        match m {
            Ok(b) => backends.push(b.clone()),
            Err(s) => skipped.push(s.clone()),
        }
    }
    if backends.is_empty() {
        notes.extend(skipped.iter().map(entry::Skipped::note));
        return Err(ImportError::NothingImported {
            file: file.to_owned(),
            count: skipped.len(),
            notes,
        });
    }
    let names = name_backends(&mut backends);
    // Notes in file order: each entry's, imported or not.
    let mut imported = backends.iter();
    for m in &mapped {
        match m {
            Ok(_) => {
                if let Some(b) = imported.next() {
                    notes.extend(b.notes.iter().cloned());
                }
            }
            Err(s) => notes.push(s.note()),
        }
    }
    let mut vars: Vec<String> = Vec::new();
    for v in backends.iter().flat_map(|b| &b.vars) {
        if !vars.contains(v) {
            vars.push(v.clone());
        }
    }
    let named: Vec<render::Named<'_>> = backends
        .iter()
        .zip(&names)
        .map(|(backend, name)| render::Named { name, backend })
        .collect();
    let toml = render::render(&render::Document {
        file: &file.display().to_string(),
        formats: &formats,
        backends: &named,
        skipped: &skipped,
        vars: &vars,
    });
    Ok(Import {
        toml,
        notes,
        literal_secrets: backends.iter().any(|b| b.literal_secrets),
        backends: names,
        skipped: skipped.len(),
        vars,
    })
}

/// Vigil names for `backends` (see `names.rs`), with a note first among a
/// renamed backend's notes.
fn name_backends(backends: &mut [entry::Backend]) -> Vec<String> {
    let own: Vec<String> = backends.iter().map(|b| b.name.clone()).collect();
    let assigned = names::assign(&own);
    let holder = |wanted: &str| {
        assigned
            .iter()
            .position(|(n, _)| n == wanted)
            .map(|i| backends[i].path.to_string())
            .unwrap_or_default()
    };
    let mut renames = Vec::new();
    for (i, (name, why)) in assigned.iter().enumerate() {
        let message = match why {
            None => continue,
            Some(names::Renamed::Mapped) => {
                format!("named `{name}`: a Vigil name holds only letters, digits, `-` and `_`")
            }
            Some(names::Renamed::Taken { wanted }) => {
                let made = if *wanted == own[i] {
                    format!("`{wanted}`")
                } else {
                    format!("`{wanted}` (its name made valid)")
                };
                format!("named `{name}`: {made} is taken by {}", holder(wanted))
            }
        };
        renames.push((i, message));
    }
    for (i, message) in renames {
        let path = backends[i].path.clone();
        backends[i].notes.insert(0, Note::info(path, message));
    }
    assigned.into_iter().map(|(n, _)| n).collect()
}

#[cfg(test)]
mod tests;
