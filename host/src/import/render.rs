//! The generated `vigil.toml`: a header saying where it came from and what
//! it reads from the environment, then one `[[backends]]` per server (keys
//! in the order of docs/config.md, the notes about it as comments above
//! it), then what was not imported and why.

use std::fmt::Write as _;

use super::entry::{Backend, Kind, Skipped};
use super::source::Format;

/// One imported backend with its Vigil name.
pub struct Named<'a> {
    pub name: &'a str,
    pub backend: &'a Backend,
}

/// What [`render`] writes about.
pub struct Document<'a> {
    /// The file imported, as the user named it.
    pub file: &'a str,
    pub formats: &'a [Format],
    pub backends: &'a [Named<'a>],
    pub skipped: &'a [Skipped],
    /// Every variable the backends read, in first-use order.
    pub vars: &'a [String],
}

/// The TOML text of `doc`.
pub fn render(doc: &Document<'_>) -> String {
    let mut out = String::new();
    let formats: Vec<&str> = doc.formats.iter().map(|f| f.describe()).collect();
    line(
        &mut out,
        &format!("Imported by `vigil import` from {},", doc.file),
    );
    line(&mut out, &format!("read as {}.", formats.join(" and ")));
    line(
        &mut out,
        "Every key is described in docs/config.md; check the file with `vigil check --config FILE`.",
    );
    if !doc.vars.is_empty() {
        line(
            &mut out,
            "Values like ${NAME} are read from Vigil's environment when the config is loaded;",
        );
        line(
            &mut out,
            &format!("this file reads {}.", doc.vars.join(", ")),
        );
    }
    line(
        &mut out,
        "MCP clients connect to http://127.0.0.1:8080/mcp (set `listen` to change it),",
    );
    line(&mut out, "or start `vigil stdio --config FILE`.");
    for n in doc.backends {
        out.push('\n');
        backend(&mut out, n);
    }
    if !doc.skipped.is_empty() {
        out.push('\n');
        line(&mut out, "Not imported:");
        for s in doc.skipped {
            line(&mut out, &format!("- {}: {}", s.path, s.reason));
        }
    }
    out
}

fn backend(out: &mut String, n: &Named<'_>) {
    let b = n.backend;
    line(out, &b.path.to_string());
    for note in &b.notes {
        line(out, &note.to_string());
    }
    out.push_str("[[backends]]\n");
    key(out, "name", &string(n.name));
    if !b.enabled {
        key(out, "enabled", "false");
    }
    match &b.kind {
        Kind::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            key(out, "transport", &string("stdio"));
            key(out, "command", &string(command));
            if !args.is_empty() {
                key(out, "args", &array(args));
            }
            if let Some(cwd) = cwd {
                key(out, "cwd", &string(cwd));
            }
            table(out, "backends.env", env);
        }
        Kind::Http { url, headers } => {
            key(out, "transport", &string("http"));
            key(out, "url", &string(url));
            table(out, "backends.headers", headers);
        }
    }
}

/// `[name]` with its pairs, after a blank line; nothing when empty.
fn table(out: &mut String, name: &str, pairs: &[(String, String)]) {
    if pairs.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n[{name}]");
    for (k, v) in pairs {
        key(out, &bare_or_quoted(k), &string(v));
    }
}

fn key(out: &mut String, key: &str, value: &str) {
    let _ = writeln!(out, "{key} = {value}");
}

/// A TOML string (escaped as TOML requires).
fn string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A TOML array of strings, on one line when short, one item a line
/// otherwise.
fn array(items: &[String]) -> String {
    let parts: Vec<String> = items.iter().map(|s| string(s)).collect();
    let one_line = format!("[{}]", parts.join(", "));
    if one_line.len() <= 72 {
        one_line
    } else {
        let mut s = String::from("[\n");
        for p in parts {
            let _ = writeln!(s, "    {p},");
        }
        s.push(']');
        s
    }
}

fn bare_or_quoted(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_owned()
    } else {
        string(k)
    }
}

/// A `# ` comment line; control characters (which a TOML comment may not
/// hold) are written escaped.
fn line(out: &mut String, text: &str) {
    out.push_str("# ");
    for c in text.chars() {
        if c.is_control() && c != '\t' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::Note;
    use crate::import::json::JsonPath;

    fn stdio() -> Backend {
        Backend {
            path: JsonPath::root().key("mcpServers").key("git hub"),
            name: "git hub".into(),
            enabled: false,
            kind: Kind::Stdio {
                command: "npx".into(),
                args: vec!["-y".into(), "@modelcontextprotocol/server-github".into()],
                env: vec![
                    (
                        "GITHUB_PERSONAL_ACCESS_TOKEN".into(),
                        "${GITHUB_TOKEN}".into(),
                    ),
                    ("odd key".into(), "quote \" and \\ back".into()),
                ],
                cwd: Some("/srv".into()),
            },
            notes: vec![Note::info(
                JsonPath::root().key("mcpServers").key("git hub"),
                "named `git-hub`\n(control)",
            )],
            vars: vec!["GITHUB_TOKEN".into()],
            literal_secrets: false,
        }
    }

    fn http() -> Backend {
        Backend {
            path: JsonPath::root().key("mcpServers").key("remote"),
            name: "remote".into(),
            enabled: true,
            kind: Kind::Http {
                url: "https://api.example.com/mcp".into(),
                headers: vec![("Authorization".into(), "Bearer ${API_TOKEN}".into())],
            },
            notes: vec![],
            vars: vec!["API_TOKEN".into()],
            literal_secrets: false,
        }
    }

    #[test]
    fn the_file_reads_well_and_parses_back() {
        let (a, b) = (stdio(), http());
        let backends = [
            Named {
                name: "git-hub",
                backend: &a,
            },
            Named {
                name: "remote",
                backend: &b,
            },
        ];
        let skipped = [Skipped {
            path: JsonPath::root().key("mcpServers").key("old"),
            reason: "it uses the legacy HTTP+SSE transport".into(),
        }];
        let text = render(&Document {
            file: "claude_desktop_config.json",
            formats: &[Format::McpServers],
            backends: &backends,
            skipped: &skipped,
            vars: &["GITHUB_TOKEN".into(), "API_TOKEN".into()],
        });
        assert_eq!(
            text,
            r#"# Imported by `vigil import` from claude_desktop_config.json,
# read as "mcpServers" (Claude Desktop, Cursor, Claude Code).
# Every key is described in docs/config.md; check the file with `vigil check --config FILE`.
# Values like ${NAME} are read from Vigil's environment when the config is loaded;
# this file reads GITHUB_TOKEN, API_TOKEN.
# MCP clients connect to http://127.0.0.1:8080/mcp (set `listen` to change it),
# or start `vigil stdio --config FILE`.

# mcpServers["git hub"]
# note: mcpServers["git hub"]: named `git-hub`\n(control)
[[backends]]
name = "git-hub"
enabled = false
transport = "stdio"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
cwd = "/srv"

[backends.env]
GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}"
"odd key" = 'quote " and \ back'

# mcpServers.remote
[[backends]]
name = "remote"
transport = "http"
url = "https://api.example.com/mcp"

[backends.headers]
Authorization = "Bearer ${API_TOKEN}"

# Not imported:
# - mcpServers.old: it uses the legacy HTTP+SSE transport
"#
        );
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        let env = &parsed["backends"][0]["env"];
        assert_eq!(env["odd key"].as_str(), Some("quote \" and \\ back"));
    }

    #[test]
    fn long_argument_lists_take_a_line_each() {
        let args: Vec<String> = (0..12).map(|i| format!("--option-{i}")).collect();
        let a = array(&args);
        assert!(a.starts_with("[\n    \"--option-0\",\n"), "{a}");
        let parsed: toml::Table = toml::from_str(&format!("a = {a}")).unwrap();
        assert_eq!(parsed["a"].as_array().map(|v| v.len()), Some(12));
    }
}
