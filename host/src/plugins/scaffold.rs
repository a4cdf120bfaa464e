//! `vigil plugin new NAME --kind probe|notifier`: a Rust plugin crate that
//! builds as is (`cargo build --release --target wasm32-wasip2`) against the
//! guest SDK, with a manifest beside it.

use std::path::{Path, PathBuf};

use super::Kind;

/// The SDK of the source tree this Vigil was built from, if it is still
/// there (the SDK is not published to a registry yet).
pub fn default_sdk() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk");
    p.join("Cargo.toml")
        .exists()
        .then(|| p.canonicalize().unwrap_or(p))
}

/// Writes crate `NAME` into `parent/NAME`; returns its directory. Refuses
/// to overwrite anything.
pub fn new_plugin(parent: &Path, name: &str, kind: Kind, sdk: &Path) -> Result<PathBuf, String> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        || name.starts_with(|c: char| c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "`{name}` is not a usable plugin name: use lowercase letters, digits, `-` and `_`, starting with a letter"
        ));
    }
    if !sdk.join("Cargo.toml").exists() {
        return Err(format!(
            "no vigil-sdk at {}: pass --sdk PATH (the `sdk` directory of Vigil's source)",
            sdk.display()
        ));
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(format!(
            "{} already exists; choose another name or directory",
            dir.display()
        ));
    }
    let write = |rel: &str, text: String| -> Result<(), String> {
        let path = dir.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)
                .map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    let sdk = sdk.display().to_string().replace('\\', "/");
    write(
        "Cargo.toml",
        format!(
            r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
vigil-sdk = {{ path = "{sdk}" }}

[profile.release]
opt-level = "s"
strip = true
panic = "abort"

# A crate of its own, not part of an enclosing workspace.
[workspace]
"#
        ),
    )?;
    let ty = to_type_name(name);
    let lib = match kind {
        Kind::Probe => format!(
            r#"//! `{name}`: a Vigil probe plugin. Vigil calls `check` on the backend's
//! schedule; the report feeds the backend's health.

use std::time::{{Duration, Instant}};

use vigil_sdk::{{Config, Probe, Report}};

struct {ty};

impl Probe for {ty} {{
    fn check(cfg: &Config) -> Report {{
        // Arguments come from the backend's `probes = [{{ plugin = "{name}", ... }}]`
        // entry, over the manifest's [config].
        let timeout = match cfg.parse_or("timeout_ms", 1_000u64) {{
            Ok(ms) => Duration::from_millis(ms),
            // A bad config is "cannot tell": it never restarts the backend.
            Err(e) => return Report::unknown(e),
        }};
        let start = Instant::now();
        match vigil_sdk::target::ping(timeout) {{
            Ok(()) => Report::healthy().with_latency(start.elapsed()),
            Err(e) => Report::unhealthy(format!("ping failed: {{e}}")),
        }}
    }}
}}

vigil_sdk::export_probe!({ty});
"#
        ),
        Kind::Notifier => format!(
            r#"//! `{name}`: a Vigil notifier plugin. Vigil calls `notify` for every
//! health event its manifest's [filter] admits; an error is retried.

use vigil_sdk::{{Config, Event, Notifier}};

struct {ty};

impl Notifier for {ty} {{
    fn notify(cfg: &Config, event: &Event) -> Result<(), String> {{
        // The URL's host must be in the manifest's [http] allowed_hosts.
        let url = cfg.require("url")?;
        let resp = vigil_sdk::http::post_json(url, &event.to_json(), &[])?;
        if resp.is_success() {{
            Ok(())
        }} else {{
            Err(format!("{{url}} answered HTTP {{}}", resp.status))
        }}
    }}
}}

vigil_sdk::export_notifier!({ty});
"#
        ),
    };
    write("src/lib.rs", lib)?;
    let manifest = match kind {
        Kind::Probe => "kind = \"probe\"\n\n[limits]\nmemory = \"16MiB\"\ndeadline = \"2s\"\n\n[config]\ntimeout_ms = 1000\n".to_owned(),
        Kind::Notifier => "kind = \"notifier\"\n\n[limits]\nmemory = \"16MiB\"\ndeadline = \"5s\"\n\n[http]\nallowed_hosts = [\"127.0.0.1:*\"]\n\n[config]\nurl = \"http://127.0.0.1:9000/hook\"\n\n[filter]\nmin_severity = \"warning\"\n".to_owned(),
    };
    write(&format!("{name}.toml"), manifest)?;
    let artifact = name.replace('-', "_");
    write(
        "README.md",
        format!(
            "# {name}\n\nA Vigil {kind} plugin.\n\n```sh\nrustup target add wasm32-wasip2   # once\ncargo build --release --target wasm32-wasip2\nvigil plugin check target/wasm32-wasip2/release/{artifact}.wasm --manifest {name}.toml\ncp target/wasm32-wasip2/release/{artifact}.wasm PLUGIN_DIR/{name}.wasm\ncp {name}.toml PLUGIN_DIR/\n```\n\nSee Vigil's docs/plugins.md.\n"
        ),
    )?;
    Ok(dir)
}

/// `my-probe` → `MyProbe`.
fn to_type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_type_names_and_bad_names_are_refused() {
        assert_eq!(to_type_name("my-probe_2"), "MyProbe2");
        let tmp = std::env::temp_dir();
        let sdk = Path::new("/nonexistent");
        assert!(
            new_plugin(&tmp, "Bad Name", Kind::Probe, sdk)
                .unwrap_err()
                .contains("not a usable plugin name")
        );
        assert!(
            new_plugin(&tmp, "fine", Kind::Probe, sdk)
                .unwrap_err()
                .contains("--sdk")
        );
    }
}
