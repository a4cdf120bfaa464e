//! Backend names: a client's server names kept where Vigil accepts them,
//! mapped where it does not, and made unique.

use std::collections::HashSet;

use crate::config::is_backend_name;

/// Why a server got another name than its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renamed {
    /// Its name has characters a Vigil name may not hold.
    Mapped,
    /// Its name (or the mapped one, `wanted`) was already taken.
    Taken { wanted: String },
}

/// A Vigil name for each of `names`, in order, with the reason when it is
/// not the server's own. Valid names are kept first, so a server called
/// `a-b` keeps its name even when an earlier `a b` maps to it too; a
/// mapped or repeated name gets `-2`, `-3`, ... until it is free.
pub fn assign(names: &[String]) -> Vec<(String, Option<Renamed>)> {
    let mut taken: HashSet<String> = HashSet::new();
    let mut out: Vec<Option<(String, Option<Renamed>)>> = vec![None; names.len()];
    for (i, name) in names.iter().enumerate() {
        if is_backend_name(name) && taken.insert(name.clone()) {
            out[i] = Some((name.clone(), None));
        }
    }
    for (i, name) in names.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let (wanted, mapped) = if is_backend_name(name) {
            (name.clone(), false)
        } else {
            (map(name), true)
        };
        let mut candidate = wanted.clone();
        let mut n = 2;
        while !taken.insert(candidate.clone()) {
            candidate = format!("{wanted}-{n}");
            n += 1;
        }
        let why = if candidate != wanted {
            Renamed::Taken { wanted }
        } else if mapped {
            Renamed::Mapped
        } else {
            // Unreachable: a valid, free name was kept in the first pass.
            Renamed::Taken { wanted }
        };
        out[i] = Some((candidate, Some(why)));
    }
    out.into_iter().flatten().collect()
}

/// `name` with every run of characters a Vigil name may not hold (spaces,
/// dots, slashes, `@`, non-ASCII letters ...) turned into one `-`, without
/// a leading or trailing `-`; `server` if nothing is left.
pub fn map(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed = out.trim_matches('-');
    if trimmed.is_empty() {
        "server".to_owned()
    } else {
        trimmed.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<(String, Option<Renamed>)> {
        assign(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn valid_names_are_kept() {
        assert_eq!(
            names(&["github", "my_server-2", "A1"]),
            [
                ("github".into(), None),
                ("my_server-2".into(), None),
                ("A1".into(), None)
            ]
        );
    }

    #[test]
    fn invalid_names_are_mapped() {
        assert_eq!(map("GitHub Copilot"), "GitHub-Copilot");
        assert_eq!(
            map("@modelcontextprotocol/server-filesystem"),
            "modelcontextprotocol-server-filesystem"
        );
        assert_eq!(map("my.server  (local)"), "my-server-local");
        assert_eq!(map("café"), "caf");
        assert_eq!(map("日本"), "server");
        assert_eq!(names(&["a b"]), [("a-b".into(), Some(Renamed::Mapped))]);
    }

    #[test]
    fn collisions_get_a_number_and_valid_names_win() {
        assert_eq!(
            names(&["a b", "a.b", "a-b", "???", "!"]),
            [
                (
                    "a-b-2".into(),
                    Some(Renamed::Taken {
                        wanted: "a-b".into()
                    })
                ),
                (
                    "a-b-3".into(),
                    Some(Renamed::Taken {
                        wanted: "a-b".into()
                    })
                ),
                ("a-b".into(), None),
                ("server".into(), Some(Renamed::Mapped)),
                (
                    "server-2".into(),
                    Some(Renamed::Taken {
                        wanted: "server".into()
                    })
                ),
            ]
        );
        assert_eq!(
            names(&["x", "x"]),
            [
                ("x".into(), None),
                ("x-2".into(), Some(Renamed::Taken { wanted: "x".into() }))
            ]
        );
    }
}
