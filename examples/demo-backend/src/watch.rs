//! The `--tools-file`: its format, its parser, and the loop that polls it and
//! swaps the dynamic tool set when its contents change.
//!
//! ```json
//! {"notify": true, "tools": [{"name": "extra", "description": "An extra tool"}]}
//! ```
//!
//! - A missing file means no dynamic tools.
//! - A file that does not parse is reported on stderr and the previous set is
//!   kept.
//! - Entries with an empty name, a repeated name, or the name of a built-in
//!   tool are skipped with a warning.
//! - `notify` (default `true`) decides whether a change is announced with
//!   `notifications/tools/list_changed`; when the file disappears the last
//!   value read is used.

use std::{io, path::PathBuf, sync::Arc, time::Duration};

use rmcp::model::{JsonObject, Tool};
use serde::Deserialize;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::hub::Hub;

/// How often the tools file is read.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// A tool declared in the tools file. It accepts any object holding its
/// `required` arguments and answers `"<name>: <compact json of arguments>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamicTool {
    pub name: String,
    pub description: String,
    /// Arguments a call must carry (else: JSON-RPC invalid params).
    pub required: Vec<String>,
}

/// The tools file after parsing and validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolsFile {
    pub notify: bool,
    pub tools: Vec<DynamicTool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToolsFile {
    #[serde(default = "default_notify")]
    notify: bool,
    #[serde(default)]
    tools: Vec<RawTool>,
}

#[derive(Debug, Deserialize)]
struct RawTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    required: Vec<String>,
}

fn default_notify() -> bool {
    true
}

// === impl DynamicTool ===

impl DynamicTool {
    /// The MCP definition of this tool: any object with the required
    /// arguments is accepted.
    pub fn to_tool(&self) -> Tool {
        let mut schema = JsonObject::new();
        schema.insert("type".into(), "object".into());
        schema.insert("additionalProperties".into(), true.into());
        if !self.required.is_empty() {
            schema.insert("required".into(), self.required.clone().into());
        }
        Tool::new(self.name.clone(), self.description.clone(), schema)
    }
}

// === impl ToolsFile ===

impl ToolsFile {
    /// Parses the contents of a tools file. Entries named in `reserved` (the
    /// built-in tools) and invalid entries are skipped with a warning.
    pub fn parse(text: &str, reserved: &[String]) -> Result<Self, serde_json::Error> {
        let raw: RawToolsFile = serde_json::from_str(text)?;
        let mut tools: Vec<DynamicTool> = Vec::with_capacity(raw.tools.len());
        for (index, tool) in raw.tools.into_iter().enumerate() {
            let name = tool.name.trim().to_owned();
            if name.is_empty() {
                tracing::warn!("tools file: tools[{index}].name: must not be empty; skipped");
            } else if reserved.contains(&name) {
                tracing::warn!(
                    "tools file: tools[{index}].name: {name:?} is a built-in tool; skipped"
                );
            } else if tools.iter().any(|seen| seen.name == name) {
                tracing::warn!("tools file: tools[{index}].name: {name:?} is repeated; skipped");
            } else {
                let description = tool
                    .description
                    .filter(|description| !description.trim().is_empty())
                    .unwrap_or_else(|| format!("Dynamic tool {name} from the tools file"));
                tools.push(DynamicTool {
                    name,
                    description,
                    required: tool.required,
                });
            }
        }
        Ok(Self {
            notify: raw.notify,
            tools,
        })
    }
}

/// Watches one tools file and keeps the hub's dynamic tools in step with it.
#[derive(Debug)]
pub struct ToolsWatcher {
    path: PathBuf,
    reserved: Vec<String>,
    /// The bytes last read, or `None` while the file is missing.
    last_bytes: Option<Vec<u8>>,
    notify: bool,
}

// === impl ToolsWatcher ===

impl ToolsWatcher {
    /// A watcher of `path`; `reserved` are the built-in tool names.
    pub fn new(path: PathBuf, reserved: Vec<String>) -> Self {
        Self {
            path,
            reserved,
            last_bytes: None,
            notify: default_notify(),
        }
    }

    /// Reads the file once, at start-up: the initial dynamic tools.
    pub async fn load(&mut self) -> Vec<DynamicTool> {
        let tools = self.read().await.unwrap_or_default();
        if self.last_bytes.is_none() {
            tracing::info!("tools file {} does not exist (yet)", self.path.display());
        }
        tools
    }

    /// Polls the file every 100 ms until `shutdown` fires, updating `hub`.
    pub async fn run(mut self, hub: Arc<Hub>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {
                    let Some(tools) = self.read().await else { continue };
                    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
                    let names = names.join(", ");
                    if hub.replace_dynamic_tools(tools) {
                        tracing::info!(notify = self.notify, "dynamic tools are now [{names}]");
                        if self.notify {
                            hub.notify_tools_changed();
                        }
                    }
                }
            }
        }
    }

    /// Reads the file; returns the new tool set if the contents changed and
    /// parsed (or the file disappeared), `None` if nothing changed or the
    /// new contents are invalid (which is logged once per edit).
    async fn read(&mut self) -> Option<Vec<DynamicTool>> {
        let bytes = match tokio::fs::read(&self.path).await {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if self.last_bytes.take().is_some() {
                    tracing::info!("tools file {} removed", self.path.display());
                    return Some(Vec::new());
                }
                return None;
            }
            Err(error) => {
                tracing::error!("tools file {}: {error}", self.path.display());
                return None;
            }
        };
        if self.last_bytes.as_ref() == Some(&bytes) {
            return None;
        }
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|error| error.to_string())
            .and_then(|text| {
                ToolsFile::parse(text, &self.reserved).map_err(|error| error.to_string())
            });
        self.last_bytes = Some(bytes);
        match parsed {
            Ok(file) => {
                self.notify = file.notify;
                Some(file.tools)
            }
            Err(error) => {
                tracing::error!(
                    "tools file {}: {error}; keeping the previous tools",
                    self.path.display()
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reserved() -> Vec<String> {
        vec!["echo".to_owned()]
    }

    #[test]
    fn parses_tools_and_notify() {
        let file = ToolsFile::parse(
            r#"{"notify": false, "tools": [{"name": "x", "description": "X"}]}"#,
            &reserved(),
        )
        .expect("valid file");
        assert!(!file.notify);
        assert_eq!(
            file.tools,
            vec![DynamicTool {
                name: "x".into(),
                description: "X".into(),
                required: vec![],
            }]
        );
    }

    #[test]
    fn notify_defaults_to_true_and_tools_to_empty() {
        let file = ToolsFile::parse("{}", &reserved()).expect("valid file");
        assert!(file.notify);
        assert!(file.tools.is_empty());
    }

    #[test]
    fn skips_builtin_empty_and_repeated_names() {
        let file = ToolsFile::parse(
            r#"{"tools": [{"name": "echo"}, {"name": " "}, {"name": "a"}, {"name": "a"}]}"#,
            &reserved(),
        )
        .expect("valid file");
        let names: Vec<_> = file.tools.iter().map(|tool| tool.name.as_str()).collect();
        assert_eq!(names, ["a"]);
        assert!(!file.tools[0].description.is_empty());
    }

    #[test]
    fn rejects_malformed_files() {
        assert!(ToolsFile::parse("{not json", &reserved()).is_err());
        assert!(ToolsFile::parse(r#"{"tools": [{}]}"#, &reserved()).is_err());
        assert!(ToolsFile::parse(r#"{"tools": 3}"#, &reserved()).is_err());
    }
}
