//! Finding the servers in a client's file: which of the known shapes it is,
//! where its server blocks are, and VS Code's `inputs`.
//!
//! | shape | servers at | written by |
//! |---|---|---|
//! | [`Format::McpServers`] | `mcpServers` | Claude Desktop (`claude_desktop_config.json`), Cursor (`.cursor/mcp.json`), Claude Code (`.mcp.json`), and most other clients |
//! | [`Format::VsCode`] | `servers` (+ `inputs`) | VS Code's `.vscode/mcp.json` |
//! | [`Format::VsCodeSettings`] | `mcp.servers` (+ `mcp.inputs`) | VS Code's `settings.json` |

use std::path::Path;

use super::json::{self, JsonPath, JsonValue};
use super::{ImportError, Note};

/// Which shape a block of servers has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"mcpServers": {NAME: {...}}}`.
    McpServers,
    /// `{"servers": {NAME: {...}}, "inputs": [...]}`.
    VsCode,
    /// `{"mcp": {"servers": {NAME: {...}}, "inputs": [...]}, ...other settings}`.
    VsCodeSettings,
}

impl Format {
    /// How the format is named in messages and in the generated file.
    pub fn describe(self) -> &'static str {
        match self {
            Format::McpServers => "\"mcpServers\" (Claude Desktop, Cursor, Claude Code)",
            Format::VsCode => "\"servers\" (VS Code's .vscode/mcp.json)",
            Format::VsCodeSettings => "\"mcp\": {\"servers\"} (VS Code's settings.json)",
        }
    }
}

/// A VS Code input: a value VS Code asks the user for and substitutes for
/// `${input:ID}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub id: String,
    pub description: Option<String>,
    pub password: bool,
    pub default: Option<String>,
}

/// One object of servers by name, in file order.
pub struct Block<'a> {
    pub format: Format,
    pub path: JsonPath,
    pub servers: Vec<(String, JsonValue<'a>)>,
}

/// What [`locate`] found.
pub struct Located<'a> {
    pub blocks: Vec<Block<'a>>,
    pub inputs: Vec<Input>,
    /// Keys not read (other settings, unknown `mcp` keys, bad inputs).
    pub notes: Vec<Note>,
}

/// The server blocks and inputs of a parsed file. Fails when there is no
/// block, a block is not an object, or every block is empty: such a file
/// cannot be what the user meant to import.
pub fn locate<'a>(root: Option<JsonValue<'a>>, file: &Path) -> Result<Located<'a>, ImportError> {
    let root = match root {
        Some(JsonValue::Object(o)) => o,
        other => {
            return Err(ImportError::NoServers {
                file: file.to_owned(),
                found: match other {
                    None => "is empty".to_owned(),
                    Some(v) => format!("is {}, not an object", json::kind(&v)),
                },
            });
        }
    };
    let mut found = Located {
        blocks: Vec::new(),
        inputs: Vec::new(),
        notes: Vec::new(),
    };
    let mut others = Vec::new();
    let top = JsonPath::root();
    for (key, value) in root {
        let path = top.key(&key);
        match key.as_ref() {
            "mcpServers" => found
                .blocks
                .push(block(Format::McpServers, path, value, file)?),
            "servers" => found.blocks.push(block(Format::VsCode, path, value, file)?),
            "inputs" => found.inputs.extend(inputs(&path, value, &mut found.notes)),
            "mcp" => {
                let JsonValue::Object(mcp) = value else {
                    return Err(not_object(
                        file,
                        &path,
                        &value,
                        "an object with \"servers\"",
                    ));
                };
                for (key, value) in mcp {
                    let path = path.key(&key);
                    match key.as_ref() {
                        "servers" => found.blocks.push(block(
                            Format::VsCodeSettings,
                            path,
                            value,
                            file,
                        )?),
                        "inputs" => found.inputs.extend(inputs(&path, value, &mut found.notes)),
                        _ => found.notes.push(Note::warning(
                            path,
                            "not imported (only \"servers\" and \"inputs\" of VS Code's \"mcp\" setting are read)",
                        )),
                    }
                }
            }
            _ => others.push(key.into_owned()),
        }
    }
    if found.blocks.is_empty() {
        return Err(ImportError::NoServers {
            file: file.to_owned(),
            found: if others.is_empty() {
                "has no keys".to_owned()
            } else {
                format!("has {}", list(&others))
            },
        });
    }
    if found.blocks.iter().all(|b| b.servers.is_empty()) {
        return Err(ImportError::Empty {
            file: file.to_owned(),
            path: found.blocks[0].path.clone(),
        });
    }
    if !others.is_empty() {
        found.notes.push(Note::info(
            top,
            format!("not imported: {} (not MCP servers)", list(&others)),
        ));
    }
    Ok(found)
}

fn block<'a>(
    format: Format,
    path: JsonPath,
    value: JsonValue<'a>,
    file: &Path,
) -> Result<Block<'a>, ImportError> {
    let JsonValue::Object(servers) = value else {
        return Err(not_object(
            file,
            &path,
            &value,
            "an object of servers by name",
        ));
    };
    Ok(Block {
        format,
        path,
        servers: servers
            .into_iter()
            .map(|(k, v)| (k.into_owned(), v))
            .collect(),
    })
}

fn not_object(file: &Path, path: &JsonPath, value: &JsonValue<'_>, expected: &str) -> ImportError {
    ImportError::Shape {
        file: file.to_owned(),
        path: path.clone(),
        message: format!("expected {expected}, found {}", json::kind(value)),
    }
}

/// VS Code's `inputs`; an entry without an `id` cannot be referenced and
/// is reported.
fn inputs(path: &JsonPath, value: JsonValue<'_>, notes: &mut Vec<Note>) -> Vec<Input> {
    let JsonValue::Array(items) = value else {
        notes.push(Note::warning(
            path.clone(),
            format!(
                "not read: expected an array of inputs, found {}",
                json::kind(&value)
            ),
        ));
        return Vec::new();
    };
    let mut found = Vec::new();
    for (i, item) in items.take_inner().into_iter().enumerate() {
        let at = path.index(i);
        let JsonValue::Object(item) = item else {
            notes.push(Note::warning(
                at,
                format!(
                    "not read: expected an input object, found {}",
                    json::kind(&item)
                ),
            ));
            continue;
        };
        let mut input = Input {
            id: String::new(),
            description: None,
            password: false,
            default: None,
        };
        for (key, value) in item {
            match (key.as_ref(), value) {
                ("id", JsonValue::String(s)) => input.id = s.into_owned(),
                ("description", JsonValue::String(s)) => input.description = Some(s.into_owned()),
                ("password", JsonValue::Boolean(b)) => input.password = b,
                ("default", JsonValue::String(s)) => input.default = Some(s.into_owned()),
                // What VS Code shows; Vigil asks nobody.
                ("type" | "options", _) => {}
                (_, _) => notes.push(Note::info(
                    at.key(&key),
                    "not read (VS Code's prompt settings have no Vigil equivalent)",
                )),
            }
        }
        if input.id.is_empty() {
            notes.push(Note::warning(
                at,
                "not read: an input needs an \"id\" to be referenced as ${input:ID}",
            ));
        } else {
            found.push(input);
        }
    }
    found
}

/// `a, b, c` or `a, b, ... and 7 more`.
fn list(keys: &[String]) -> String {
    const SHOWN: usize = 8;
    let shown: Vec<String> = keys
        .iter()
        .take(SHOWN)
        .map(|k| JsonPath::root().key(k).to_string())
        .collect();
    if keys.len() > SHOWN {
        format!("{} and {} more", shown.join(", "), keys.len() - SHOWN)
    } else {
        shown.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn located(text: &str) -> Result<Located<'_>, ImportError> {
        locate(json::parse(text).unwrap(), Path::new("f.json"))
    }

    #[test]
    fn each_shape_is_found() {
        let l = located(r#"{"mcpServers": {"a": {}}, "globalShortcut": "x"}"#).unwrap();
        assert_eq!(l.blocks[0].format, Format::McpServers);
        assert_eq!(l.blocks[0].path.to_string(), "mcpServers");
        assert_eq!(
            l.notes[0].to_string(),
            "note: (top level): not imported: globalShortcut (not MCP servers)"
        );
        let l = located(
            r#"{"inputs": [{"type": "promptString", "id": "k", "description": "Key", "password": true}], "servers": {"a": {}}}"#,
        )
        .unwrap();
        assert_eq!(l.blocks[0].format, Format::VsCode);
        assert_eq!(
            l.inputs,
            [Input {
                id: "k".into(),
                description: Some("Key".into()),
                password: true,
                default: None
            }]
        );
        assert!(l.notes.is_empty());
        let l = located(
            r#"{"editor.fontSize": 14, "mcp": {"servers": {"a": {}}, "inputs": [], "other": 1}}"#,
        )
        .unwrap();
        assert_eq!(l.blocks[0].format, Format::VsCodeSettings);
        assert_eq!(l.blocks[0].path.to_string(), "mcp.servers");
        let notes: Vec<String> = l.notes.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            notes,
            [
                "warning: mcp.other: not imported (only \"servers\" and \"inputs\" of VS Code's \"mcp\" setting are read)",
                "note: (top level): not imported: [\"editor.fontSize\"] (not MCP servers)",
            ]
        );
    }

    #[test]
    fn a_file_without_servers_says_what_was_expected() {
        let e = located(r#"{"servers_": {}, "other": 1}"#).err().unwrap();
        assert_eq!(
            e.to_string(),
            "f.json: no MCP servers in it: expected a top-level \"mcpServers\" (Claude Desktop, Cursor, Claude Code), \"servers\" (VS Code's .vscode/mcp.json) or \"mcp\": {\"servers\"} (VS Code's settings.json) object; the file has servers_, other"
        );
        let e = located("[1, 2]").err().unwrap();
        assert!(
            e.to_string()
                .ends_with("the file is an array, not an object"),
            "{e}"
        );
        let e = located(r#"{"mcpServers": []}"#).err().unwrap();
        assert_eq!(
            e.to_string(),
            "f.json: mcpServers: expected an object of servers by name, found an array"
        );
        let e = located(r#"{"mcpServers": {}}"#).err().unwrap();
        assert_eq!(
            e.to_string(),
            "f.json: mcpServers: holds no servers: nothing to import"
        );
    }

    #[test]
    fn inputs_without_an_id_are_reported() {
        let l =
            located(r#"{"servers": {"a": {}}, "inputs": [{"type": "promptString"}, 3]}"#).unwrap();
        assert!(l.inputs.is_empty());
        let notes: Vec<String> = l.notes.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            notes,
            [
                "warning: inputs[0]: not read: an input needs an \"id\" to be referenced as ${input:ID}",
                "warning: inputs[1]: not read: expected an input object, found a number",
            ]
        );
    }
}
