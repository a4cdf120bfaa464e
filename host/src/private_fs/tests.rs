use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::*;

/// A fresh directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "vigil-private-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

pub(crate) fn set(path: &Path, mode: u32) {
    std::fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
}

#[test]
fn created_dirs_and_files_are_owner_only() {
    let tmp = TempDir::new("create");
    let d = tmp.path().join("a").join("b");
    assert_eq!(dir(&d, Loose::Tighten).unwrap(), Outcome::Created);
    assert_eq!(mode_of(&d), 0o700);
    assert_eq!(dir(&d, Loose::Refuse).unwrap(), Outcome::Private);

    let f = d.join("f");
    assert_eq!(file(&f, Loose::Tighten).unwrap(), Outcome::Created);
    assert_eq!(mode_of(&f), 0o600);
    assert_eq!(file(&f, Loose::Refuse).unwrap(), Outcome::Private);
    assert_eq!(
        existing(&d.join("none"), Kind::File, Loose::Refuse).unwrap(),
        None
    );
}

#[test]
fn tighten_narrows_what_vigil_owns_and_says_from_what() {
    let tmp = TempDir::new("tighten");
    let d = tmp.path().join("d");
    std::fs::create_dir(&d).unwrap();
    set(&d, 0o777);
    let f = d.join("f");
    std::fs::write(&f, b"x").unwrap();
    set(&f, 0o644);

    assert_eq!(
        dir(&d, Loose::Tighten).unwrap(),
        Outcome::Tightened { from: 0o777 }
    );
    assert_eq!(mode_of(&d), 0o700);
    assert_eq!(
        file(&f, Loose::Tighten).unwrap(),
        Outcome::Tightened { from: 0o644 }
    );
    assert_eq!(mode_of(&f), 0o600);
    assert_eq!(
        std::fs::read(&f).unwrap(),
        b"x",
        "tightening keeps the content"
    );
}

#[test]
fn refuse_leaves_a_writable_path_as_it_is_and_names_the_fix() {
    let tmp = TempDir::new("refuse");
    let d = tmp.path().join("cache");
    std::fs::create_dir(&d).unwrap();
    let f = tmp.path().join("x.cwasm");
    std::fs::write(&f, b"x").unwrap();

    for (mode, who) in [
        (0o777, "its group and others"),
        (0o770, "its group"),
        (0o702, "others"),
    ] {
        set(&d, mode);
        let e = dir(&d, Loose::Refuse).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{p} can be written by {who} (mode {m}), so another user can change what Vigil reads from it: \
                 `chmod 700 {p}` if only Vigil uses it, else choose a directory of Vigil's own",
                p = d.display(),
                m = Mode(mode),
            )
        );
        assert_eq!(e.path(), d);
        assert_eq!(mode_of(&d), mode, "a refused directory is left alone");
    }

    set(&f, 0o666);
    let e = existing(&f, Kind::File, Loose::Refuse).unwrap_err();
    assert!(
        e.to_string().ends_with(&format!(
            "(mode 0666), so another user can change what Vigil reads from it: `chmod 600 {}`",
            f.display()
        )),
        "{e}"
    );
    assert_eq!(mode_of(&f), 0o666);
}

#[test]
fn readable_is_not_writable_for_refuse() {
    let tmp = TempDir::new("readable");
    let d = tmp.path().join("cache");
    std::fs::create_dir(&d).unwrap();
    set(&d, 0o755);
    assert_eq!(dir(&d, Loose::Refuse).unwrap(), Outcome::Private);
    assert_eq!(mode_of(&d), 0o755);
}

#[test]
fn the_wrong_kind_is_refused_with_its_path() {
    let tmp = TempDir::new("kind");
    let f = tmp.path().join("data");
    std::fs::write(&f, b"not a directory").unwrap();
    let e = dir(&f, Loose::Tighten).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} is not a directory: move it away or choose another path",
            f.display()
        )
    );
    let e = file(tmp.path(), Loose::Tighten).unwrap_err();
    assert!(
        matches!(
            e,
            PrivateError::NotA {
                kind: Kind::File,
                ..
            }
        ),
        "{e:?}"
    );
}

/// Needs root to give a file away; elsewhere the ownership half is skipped.
#[test]
fn another_users_path_is_refused_under_both_policies() {
    if euid() != 0 {
        eprintln!("skipped: only root can give a file to another user");
        return;
    }
    let tmp = TempDir::new("owner");
    let d = tmp.path().join("theirs");
    std::fs::create_dir(&d).unwrap();
    set(&d, 0o700);
    std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
    for loose in [Loose::Tighten, Loose::Refuse] {
        let e = dir(&d, loose).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{p} is owned by uid 65534, not by uid 0 that Vigil runs as, so that user can change it: `chown 0 {p}` (or choose a path uid 0 owns)",
                p = d.display()
            )
        );
    }
    assert_eq!(mode_of(&d), 0o700);
}

#[test]
fn write_makes_a_private_file_even_over_a_loose_one() {
    let tmp = TempDir::new("write");
    let f = tmp.path().join("x.tmp");
    std::fs::write(&f, b"old and longer").unwrap();
    set(&f, 0o666);
    write(&f, b"new").unwrap();
    assert_eq!(mode_of(&f), 0o600);
    assert_eq!(std::fs::read(&f).unwrap(), b"new");
}
