//! Client variable references, rewritten in Vigil's `${NAME}` syntax (see
//! `config/expand.rs`), so secrets stay in the environment.
//!
//! | in the client's file | in `vigil.toml` |
//! |---|---|
//! | `${env:NAME}` (VS Code, Cursor) | `${NAME}` |
//! | `${NAME}`, `${NAME:-default}` (Claude Code) | kept |
//! | `${input:ID}` (VS Code asks the user) | `${ID_AS_NAME}` (or `${NAME:-default}` for a non-password input with a default), with a note naming the variable to set |
//! | `${userHome}` | `${HOME}` |
//! | `${workspaceFolder}`, `${workspaceFolderBasename}` | the folder holding `.vscode/` or `.cursor/`, when the file is in one |
//! | `${pathSeparator}`, `${/}` | `/` |
//!
//! Anything else (`${config:...}`, `${command:...}`, an unclosed `${`) has
//! no meaning outside the client: it is written as literal text (`$${`)
//! with a warning.

use std::path::Path;

use super::Note;
use super::json::JsonPath;
use super::source::Input;
use crate::config::expand::{escape as escape_refs, is_var_name};

/// What references resolve against.
pub struct Resolver<'a> {
    pub inputs: &'a [Input],
    /// The workspace folder, when the file sits in its `.vscode/` or
    /// `.cursor/`.
    pub workspace: Option<&'a Path>,
    /// Whether a bare `${NAME}` is an environment variable (Claude Code's
    /// `mcpServers`), not one of VS Code's own variables (`servers`).
    pub bare_is_env: bool,
}

/// VS Code's (and Cursor's) predefined variables that only mean something
/// inside the editor; besides those resolved here, they are never
/// environment variables.
const EDITOR_VARIABLES: [&str; 15] = [
    "file",
    "fileWorkspaceFolder",
    "relativeFile",
    "relativeFileDirname",
    "fileBasename",
    "fileBasenameNoExtension",
    "fileExtname",
    "fileDirname",
    "fileDirnameBasename",
    "cwd",
    "lineNumber",
    "columnNumber",
    "selectedText",
    "execPath",
    "defaultBuildTask",
];

/// A value in Vigil's syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translated {
    pub text: String,
    /// Variables it reads from Vigil's environment, in order.
    pub vars: Vec<String>,
}

impl Translated {
    /// Whether the value is literal text only (no reference at all).
    pub fn is_literal(&self) -> bool {
        self.vars.is_empty()
    }
}

/// The environment variable that stands for VS Code input `id`:
/// upper-cased, other characters as `_`.
pub fn input_var(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    if is_var_name(&name) {
        name
    } else {
        format!("INPUT_{name}")
    }
}

/// `value` (at `path`) in Vigil's syntax; a note for each reference that
/// changed meaning or could not be kept.
pub fn translate(
    value: &str,
    path: &JsonPath,
    r: &Resolver<'_>,
    notes: &mut Vec<Note>,
) -> Translated {
    let mut out = Translated {
        text: String::with_capacity(value.len()),
        vars: Vec::new(),
    };
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.text.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let Some(end) = tail.find('}') else {
            notes.push(Note::warning(
                path.clone(),
                "has `${` without a closing `}`: written as literal text",
            ));
            out.text.push_str(&escape_refs(&rest[at..]));
            return out;
        };
        let inner = &tail[..end];
        rest = &tail[end + 1..];
        if out.text.ends_with('$') {
            notes.push(Note::warning(
                path.clone(),
                format!(
                    "has a `$` right before `${{{inner}}}`, which Vigil would read as a literal `${{`: check the value"
                ),
            ));
        }
        reference(inner, path, r, notes, &mut out);
    }
    out.text.push_str(rest);
    out
}

/// One `${inner}`, appended to `out`.
fn reference(
    inner: &str,
    path: &JsonPath,
    r: &Resolver<'_>,
    notes: &mut Vec<Note>,
    out: &mut Translated,
) {
    let var = |out: &mut Translated, name: &str, default: Option<&str>| {
        out.text.push_str("${");
        out.text.push_str(name);
        if let Some(d) = default {
            out.text.push_str(":-");
            out.text.push_str(d);
        }
        out.text.push('}');
        out.vars.push(name.to_owned());
    };
    if let Some(name) = inner.strip_prefix("env:")
        && is_var_name(name)
    {
        return var(out, name, None);
    }
    if let Some(id) = inner.strip_prefix("input:") {
        let name = input_var(id);
        let input = r.inputs.iter().find(|i| i.id == id);
        let asked = match input {
            Some(i) => {
                let what = i.description.as_deref().unwrap_or(id);
                let secret = if i.password { ", a password" } else { "" };
                format!("VS Code asks for it: {}{secret}", quoted(what))
            }
            None => "it is not declared in \"inputs\"".to_owned(),
        };
        // A default is kept only where it cannot be a secret and fits the
        // syntax.
        let default = input
            .filter(|i| !i.password)
            .and_then(|i| i.default.as_deref())
            .filter(|d| !d.contains('}') && !d.contains('$'));
        notes.push(Note::info(
            path.clone(),
            format!(
                "`${{input:{id}}}` ({asked}) is now `${{{name}}}`: set {name} in Vigil's environment"
            ),
        ));
        return var(out, &name, default);
    }
    match inner {
        "userHome" => return var(out, "HOME", None),
        "pathSeparator" | "/" => {
            out.text.push('/');
            return;
        }
        "workspaceFolder" | "workspaceRoot" | "workspaceFolderBasename" => {
            if let Some(ws) = r.workspace {
                let resolved = if inner == "workspaceFolderBasename" {
                    ws.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                } else {
                    ws.to_string_lossy().into_owned()
                };
                notes.push(Note::info(
                    path.clone(),
                    format!("`${{{inner}}}` is written as {}", quoted(&resolved)),
                ));
                out.text.push_str(&escape_refs(&resolved));
                return;
            }
        }
        _ => {}
    }
    let (name, default) = match inner.split_once(":-") {
        Some((n, d)) => (n, Some(d)),
        None => (inner, None),
    };
    let editor = EDITOR_VARIABLES.contains(&name)
        || matches!(
            name,
            "workspaceFolder" | "workspaceRoot" | "workspaceFolderBasename"
        );
    if r.bare_is_env && !editor && is_var_name(name) && default.is_none_or(|d| !d.contains('$')) {
        return var(out, name, default);
    }
    notes.push(Note::warning(
        path.clone(),
        format!(
            "`${{{inner}}}` has no meaning outside the client that wrote the file: written as literal text; replace it with a value or a `${{NAME}}` reference"
        ),
    ));
    out.text.push_str(&escape_refs(&format!("${{{inner}}}")));
}

fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<Input> {
        vec![
            Input {
                id: "perplexity-key".into(),
                description: Some("Perplexity API Key".into()),
                password: true,
                default: None,
            },
            Input {
                id: "region".into(),
                description: None,
                password: false,
                default: Some("eu-west-1".into()),
            },
        ]
    }

    fn run(value: &str, workspace: Option<&Path>) -> (Translated, Vec<String>) {
        let inputs = inputs();
        let r = Resolver {
            inputs: &inputs,
            workspace,
            bare_is_env: true,
        };
        let mut notes = Vec::new();
        let t = translate(value, &JsonPath::root().key("v"), &r, &mut notes);
        (t, notes.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn environment_references_keep_their_variable() {
        let (t, notes) = run("Bearer ${env:GITHUB_TOKEN}", None);
        assert_eq!(t.text, "Bearer ${GITHUB_TOKEN}");
        assert_eq!(t.vars, ["GITHUB_TOKEN"]);
        assert!(notes.is_empty());
        let (t, _) = run(
            "${API_BASE_URL:-https://api.example.com}/mcp?k=${KEY}",
            None,
        );
        assert_eq!(
            t.text,
            "${API_BASE_URL:-https://api.example.com}/mcp?k=${KEY}"
        );
        assert_eq!(t.vars, ["API_BASE_URL", "KEY"]);
        let (t, _) = run("${userHome}/data", None);
        assert_eq!(t.text, "${HOME}/data");
    }

    #[test]
    fn inputs_become_variables_with_a_note() {
        let (t, notes) = run("${input:perplexity-key}", None);
        assert_eq!(t.text, "${PERPLEXITY_KEY}");
        assert_eq!(
            notes,
            [
                "note: v: `${input:perplexity-key}` (VS Code asks for it: \"Perplexity API Key\", a password) is now `${PERPLEXITY_KEY}`: set PERPLEXITY_KEY in Vigil's environment"
            ]
        );
        let (t, _) = run("${input:region}", None);
        assert_eq!(
            t.text, "${REGION:-eu-west-1}",
            "a plain input keeps its default"
        );
        let (t, notes) = run("${input:nope}", None);
        assert_eq!(t.text, "${NOPE}");
        assert!(
            notes[0].contains("it is not declared in \"inputs\""),
            "{notes:?}"
        );
        assert_eq!(input_var("1st key"), "INPUT_1ST_KEY");
    }

    #[test]
    fn workspace_paths_are_resolved_when_known() {
        let ws = Path::new("/home/me/proj");
        let (t, notes) = run("${workspaceFolder}${/}src", Some(ws));
        assert_eq!(t.text, "/home/me/proj/src");
        assert!(t.is_literal());
        assert_eq!(
            notes,
            ["note: v: `${workspaceFolder}` is written as \"/home/me/proj\""]
        );
        let (t, _) = run("${workspaceFolderBasename}", Some(ws));
        assert_eq!(t.text, "proj");
        let (t, notes) = run("${workspaceFolder}/src", None);
        assert_eq!(t.text, "$${workspaceFolder}/src");
        assert!(
            notes[0].starts_with("warning: v: `${workspaceFolder}` has no meaning outside"),
            "{notes:?}"
        );
    }

    #[test]
    fn what_cannot_be_resolved_is_kept_as_literal_text() {
        let (t, notes) = run("${config:editor.tabSize} and ${command:pick}", None);
        assert_eq!(t.text, "$${config:editor.tabSize} and $${command:pick}");
        assert_eq!(notes.len(), 2);
        let (t, notes) = run("x${unclosed", None);
        assert_eq!(t.text, "x$${unclosed");
        assert_eq!(
            notes,
            ["warning: v: has `${` without a closing `}`: written as literal text"]
        );
        let (t, notes) = run("${cwd}/x", None);
        assert_eq!(
            t.text, "$${cwd}/x",
            "an editor variable is not an environment variable"
        );
        assert_eq!(notes.len(), 1);
        let (t, notes) = run("plain $ text", None);
        assert_eq!(t.text, "plain $ text");
        assert!(t.is_literal() && notes.is_empty());
    }

    #[test]
    fn a_bare_name_is_an_environment_variable_only_where_the_client_says_so() {
        let r = Resolver {
            inputs: &[],
            workspace: None,
            bare_is_env: false,
        };
        let mut notes = Vec::new();
        let t = translate("${TOKEN} ${env:TOKEN}", &JsonPath::root(), &r, &mut notes);
        assert_eq!(t.text, "$${TOKEN} ${TOKEN}");
        assert_eq!(notes.len(), 1);
    }

    #[test]
    fn translated_values_expand_as_the_client_meant() {
        let env = |k: &str| match k {
            "GITHUB_TOKEN" => Some("tok".to_owned()),
            "HOME" => Some("/home/me".to_owned()),
            _ => None,
        };
        for (source, meant) in [
            ("Bearer ${env:GITHUB_TOKEN}", "Bearer tok"),
            ("${userHome}/x", "/home/me/x"),
            ("${MISSING:-fallback}", "fallback"),
            ("${config:x}", "${config:x}"),
        ] {
            let (t, _) = run(source, None);
            assert_eq!(
                crate::config::expand::expand(&t.text, &env).unwrap(),
                meant,
                "{source}"
            );
        }
    }
}
