//! What a component is, before Vigil runs any of it: which world it
//! exports (probe or notifier), against which `vigil:plugin` version it was
//! built, and whether everything it imports is something Vigil provides.
//!
//! The linker's `instantiate_pre` checks the imports' types afterwards;
//! this step gives the messages a plugin author can act on.

use wasmtime::Engine;
use wasmtime::component::Component;

use super::Kind;

/// The `vigil:plugin` version this Vigil implements.
pub const WIT_VERSION: &str = "0.1.0";

/// A component's identity as a plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    pub kind: Kind,
    /// The `vigil:plugin` version it was built against.
    pub version: String,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// WASI packages a plugin may import (Vigil links all of them; the sandbox
/// gives no files, no sockets and HTTP only to allowed hosts).
const WASI_PACKAGES: [&str; 7] = [
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
    "wasi:http/",
];

pub fn inspect(engine: &Engine, component: &Component) -> Result<Inspection, String> {
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_owned()).collect();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_owned()).collect();
    let ours = |names: &[String]| -> Vec<(String, String)> {
        names
            .iter()
            .filter_map(|n| n.strip_prefix("vigil:plugin/"))
            .filter_map(|rest| rest.split_once('@'))
            .map(|(i, v)| (i.to_owned(), v.to_owned()))
            .collect()
    };
    let exported = ours(&exports);
    let (kind, version) = match exported
        .iter()
        .find(|(i, _)| i == "prober" || i == "notify-sink")
    {
        Some((i, v)) => (
            if i == "prober" {
                Kind::Probe
            } else {
                Kind::Notifier
            },
            v.clone(),
        ),
        None => {
            return Err(format!(
                "not a Vigil plugin: it exports neither `vigil:plugin/prober` (a probe) nor `vigil:plugin/notify-sink` (a notifier); it exports {}",
                list(&exports)
            ));
        }
    };
    for (_, v) in exported.iter().chain(ours(&imports).iter()) {
        if !compatible(v) {
            return Err(format!(
                "built against vigil:plugin@{v}, but this Vigil provides vigil:plugin@{WIT_VERSION}: rebuild the plugin with a vigil-sdk for {WIT_VERSION}"
            ));
        }
    }
    let allowed_ours: &[&str] = match kind {
        Kind::Probe => &["host", "target", "types"],
        Kind::Notifier => &["host", "types"],
    };
    for name in &imports {
        let ok = match name.strip_prefix("vigil:plugin/") {
            Some(rest) => allowed_ours.contains(&rest.split('@').next().unwrap_or("")),
            None => WASI_PACKAGES.iter().any(|p| name.starts_with(p)),
        };
        if !ok {
            return Err(format!(
                "imports `{name}`, which Vigil does not provide to a {kind}: a {kind} may import {} and WASI 0.2 (io, clocks, random, cli, http)",
                allowed_ours
                    .iter()
                    .map(|i| format!("vigil:plugin/{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(Inspection {
        kind,
        version,
        imports,
        exports,
    })
}

/// Semver compatibility with [`WIT_VERSION`]: same major, and for 0.x the
/// same minor.
fn compatible(v: &str) -> bool {
    let parts = |s: &str| -> Option<(u64, u64)> {
        let mut it = s.split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parts(v), parts(WIT_VERSION)) {
        (Some((ma, mi)), Some((wa, wi))) => ma == wa && (ma != 0 || mi == wi),
        _ => false,
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "nothing".into()
    } else {
        names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_semver_for_zero_majors() {
        assert!(compatible("0.1.0"));
        assert!(compatible("0.1.7"));
        assert!(!compatible("0.2.0"));
        assert!(!compatible("1.1.0"));
        assert!(!compatible("banana"));
    }
}
