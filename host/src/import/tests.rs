//! The whole import on realistic files of each shape (the e2e fixtures):
//! what comes out, every note, and that Vigil's own config loader accepts
//! the result.

use super::*;
use crate::config::{Config, Transport};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/e2e/fixtures/import");

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{rel}")).unwrap()
}

fn run(rel: &str, workspace: Option<&str>) -> Import {
    import_text(
        &fixture(rel),
        &Source {
            file: Path::new(rel),
            workspace: workspace.map(Path::new),
        },
    )
    .unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn notes(i: &Import) -> Vec<String> {
    i.notes.iter().map(|n| n.to_string()).collect()
}

/// Vigil's loader on the generated text, with every variable it reads set
/// (URL-like ones to a URL).
fn load(i: &Import) -> Config {
    let env = |k: &str| {
        i.vars.iter().any(|v| v == k).then(|| {
            if k.ends_with("URL") {
                "https://db.example.com".to_owned()
            } else {
                format!("value-of-{k}")
            }
        })
    };
    Config::parse_with_env(&i.toml, Path::new("vigil.toml"), &env)
        .unwrap_or_else(|e| panic!("vigil refuses what it imported:\n{e}\n---\n{}", i.toml))
}

fn transport_of(c: &Config, name: &str) -> Transport {
    c.backends
        .iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("no backend {name}"))
        .transport
        .clone()
}

#[test]
fn claude_desktop() {
    let i = run("claude_desktop_config.json", None);
    assert_eq!(
        i.backends,
        [
            "filesystem",
            "github",
            "brave-search",
            "Linear-remote",
            "sqlite"
        ]
    );
    assert_eq!(i.vars, ["BRAVE_API_KEY"]);
    assert!(i.literal_secrets);
    assert_eq!(
        notes(&i),
        [
            "note: (top level): not imported: globalShortcut (not MCP servers)",
            "warning: mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN: holds a literal value that looks like a secret, and so does the imported file: replace it with `${GITHUB_PERSONAL_ACCESS_TOKEN}` and set GITHUB_PERSONAL_ACCESS_TOKEN in Vigil's environment",
            "note: mcpServers[\"Linear (remote)\"]: named `Linear-remote`: a Vigil name holds only letters, digits, `-` and `_`",
            "note: mcpServers.sqlite.disabled: imported as enabled = false (kept in the file, not started)",
        ]
    );
    let c = load(&i);
    assert_eq!(c.backends.len(), 4, "sqlite is disabled");
    let Transport::Stdio { env, .. } = transport_of(&c, "brave-search") else {
        panic!("stdio expected")
    };
    assert_eq!(env["BRAVE_API_KEY"], "value-of-BRAVE_API_KEY");
    assert!(
        i.toml.contains("BRAVE_API_KEY = \"${BRAVE_API_KEY}\""),
        "{}",
        i.toml
    );
}

#[test]
fn cursor() {
    let i = run("cursor-project/.cursor/mcp.json", Some("/home/alice/proj"));
    assert_eq!(i.backends, ["postgres", "notes", "sentry", "figma", "crm"]);
    assert_eq!(
        i.vars,
        ["DATABASE_URL", "HOME", "OPENAI_API_KEY", "SENTRY_TOKEN"]
    );
    assert!(!i.literal_secrets);
    assert_eq!(i.skipped, 0);
    assert_eq!(
        notes(&i),
        [
            "note: mcpServers.notes.args[0]: `${workspaceFolder}` is written as \"/home/alice/proj\"",
            "warning: mcpServers.notes.envFile: not imported (Vigil reads no env files; a stdio backend inherits Vigil's environment, so export the file's variables before `vigil serve`, e.g. `set -a; . ./.env; set +a`)",
            "warning: mcpServers.figma.url: ends in /sse, the usual endpoint of the legacy HTTP+SSE transport, which Vigil does not speak: imported as streamable HTTP; if `vigil serve` cannot connect, use the server's streamable HTTP endpoint (often /mcp)",
            "warning: mcpServers.crm.auth: not imported (Vigil does not sign in to backends with OAuth: put a token in \"headers\" as a `${NAME}` reference, or set forward_auth = true to pass on each client's own Authorization (see docs/freshness.md))",
        ]
    );
    let c = load(&i);
    let Transport::Http { headers, .. } = transport_of(&c, "sentry") else {
        panic!("http expected")
    };
    assert_eq!(headers["Authorization"], "Bearer value-of-SENTRY_TOKEN");
    let Transport::Stdio { args, env, .. } = transport_of(&c, "notes") else {
        panic!("stdio expected")
    };
    assert_eq!(args, ["/home/alice/proj/tools/notes-server.js"]);
    assert_eq!(env["NOTES_DIR"], "value-of-HOME/notes");
}

#[test]
fn vscode_mcp_json() {
    let i = run("vscode-project/.vscode/mcp.json", Some("/home/alice/proj"));
    assert_eq!(i.backends, ["Perplexity", "github", "fetch"]);
    assert_eq!(i.vars, ["PERPLEXITY_KEY"]);
    assert_eq!(i.skipped, 1);
    assert_eq!(
        notes(&i),
        [
            "note: servers.Perplexity.env.PERPLEXITY_API_KEY: `${input:perplexity-key}` (VS Code asks for it: \"Perplexity API Key\", a password) is now `${PERPLEXITY_KEY}`: set PERPLEXITY_KEY in Vigil's environment",
            "note: servers.fetch.cwd: `${workspaceFolder}` is written as \"/home/alice/proj\"",
            "warning: servers.fetch.dev: not imported (VS Code's development mode (watch and debug) has no Vigil equivalent)",
            "warning: servers.legacy-events: not imported: it uses the legacy HTTP+SSE transport (\"type\": \"sse\"), and Vigil reaches HTTP servers over streamable HTTP only: if the server also serves streamable HTTP (often at /mcp), set \"type\" to \"http\" with that URL and import again",
        ]
    );
    assert!(
        i.toml
            .contains("# - servers.legacy-events: it uses the legacy HTTP+SSE transport"),
        "{}",
        i.toml
    );
    let c = load(&i);
    assert_eq!(c.backends.len(), 3);
}

#[test]
fn vscode_settings() {
    let i = run("settings.json", None);
    assert_eq!(
        i.backends,
        ["memory", "my-local-server-2", "my-local-server"]
    );
    assert_eq!(
        notes(&i),
        [
            "note: (top level): not imported: [\"editor.fontSize\"], [\"workbench.colorTheme\"], [\"chat.mcp.discovery.enabled\"] (not MCP servers)",
            "note: mcp.servers[\"my.local server\"]: named `my-local-server-2`: `my-local-server` (its name made valid) is taken by mcp.servers.my-local-server",
            "note: mcp.servers[\"my.local server\"].args[2]: written as the string \"8765\"",
        ]
    );
    load(&i);
}

#[test]
fn claude_code() {
    let i = run("claude-code-project/.mcp.json", None);
    assert_eq!(i.backends, ["api-server", "airtable"]);
    assert_eq!(i.vars, ["API_BASE_URL", "API_KEY", "AIRTABLE_API_KEY"]);
    assert!(
        i.toml
            .contains("url = \"${API_BASE_URL:-https://api.example.com}/mcp\""),
        "{}",
        i.toml
    );
    let c = Config::parse_with_env(&i.toml, Path::new("vigil.toml"), &|k| {
        (k == "API_KEY" || k == "AIRTABLE_API_KEY").then(|| "x".to_owned())
    })
    .unwrap();
    let Transport::Http { url, .. } = transport_of(&c, "api-server") else {
        panic!("http expected")
    };
    assert_eq!(url, "https://api.example.com/mcp", "the default applies");
}

#[test]
fn nothing_importable_is_an_error_that_keeps_its_notes() {
    let e = import_text(
        r#"{"mcpServers": {"old": {"type": "sse", "url": "http://h/sse"}}}"#,
        &Source {
            file: Path::new("f.json"),
            workspace: None,
        },
    )
    .unwrap_err();
    let ImportError::NothingImported { notes, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(notes.len(), 1);
    assert_eq!(
        e.to_string(),
        "f.json: none of its 1 server(s) could be imported (the warnings say why)"
    );
}

#[test]
fn unusable_text_says_where() {
    let src = Source {
        file: Path::new("f.json"),
        workspace: None,
    };
    let e = import_text(
        "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"}\n  ",
        &src,
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("f.json:4:3: not valid JSON: "), "{e}");
    let e = import_text("\u{feff}{\"servers\": 1}", &src)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "f.json: servers: expected an object of servers by name, found a number"
    );
}

#[test]
fn a_file_is_read_within_its_limit() {
    let e = read(Path::new("/dev/zero")).unwrap_err();
    assert!(matches!(e, ImportError::TooLarge { .. }), "{e}");
    let e = read(Path::new("/no/such/file.json"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("/no/such/file.json: cannot read: "), "{e}");
}
