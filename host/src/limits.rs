//! Process limits Vigil adjusts for itself at start.

/// Raises the soft limit on open files to the hard limit.
///
/// Vigil holds about one descriptor per HTTP backend (its open event
/// stream) plus one per request in flight; the common default soft limit of
/// 1,024 is too small for a thousand backends, and running out shows up as
/// failed connects far from the cause. The hard limit is what the operator
/// allowed, so taking it needs no privilege. Returns (before, after), or
/// why the limit could not be read or raised.
pub fn raise_open_files() -> Result<(u64, u64), String> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the open-file limit: {e}"))?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
        .map_err(|e| format!("cannot raise the open-file limit from {soft} to {hard}: {e}"))?;
    Ok((soft, hard))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        use nix::sys::resource::{Resource, getrlimit};
        let (before, after) = super::raise_open_files().expect("raise");
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert!(after >= before);
        assert_eq!(soft, after);
        assert_eq!(soft, hard);
    }
}
