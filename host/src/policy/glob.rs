//! The patterns of `[[policy]]`: `*` matches any run of characters
//! (`/` included: resource URIs are matched whole), `?` one character,
//! everything else itself. Two wildcards need no crate.

/// Whether `text` matches `pattern`.
///
/// Iterative, with one backtrack point (the last `*`): linear in practice
/// and never exponential, whatever the pattern.
pub fn matches(pattern: &str, text: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return pattern == text;
    }
    if !pattern.contains('?') {
        // Only `*`: bytes will do (a literal of valid UTF-8 only matches
        // at character boundaries), without collecting characters.
        return wild(pattern.as_bytes(), text.as_bytes(), |_| false);
    }
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    wild(&p, &t, |c| *c == '?')
}

/// The matcher over `p` and `t`; `any_one` says which pattern item is `?`.
fn wild<T: PartialEq + Copy + From<u8>>(p: &[T], t: &[T], any_one: impl Fn(&T) -> bool) -> bool {
    let star = T::from(b'*');
    let (mut pi, mut ti) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (any_one(&p[pi]) || (p[pi] != star && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == star {
            back = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = back {
            pi = sp + 1;
            ti = st + 1;
            back = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == star)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_and_question_marks_match_as_documented() {
        for (p, t, want) in [
            ("*", "anything", true),
            ("*", "", true),
            ("files__read*", "files__read", true),
            ("files__read*", "files__read_secret", true),
            ("files__read*", "files__write", false),
            ("remote__search", "remote__search", true),
            ("remote__search", "remote__search2", false),
            ("*__echo", "demo__echo", true),
            ("*__echo", "demo__echo_x", false),
            ("file:///docs/*", "file:///docs/a/b.txt", true),
            ("file:///docs/*", "file:///etc/passwd", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*a*b*", "xxaxxbxx", true),
            ("*a*b*", "xxbxxaxx", false),
            ("group:eng-*", "group:eng-web", true),
        ] {
            assert_eq!(matches(p, t), want, "{p:?} on {t:?}");
        }
    }

    #[test]
    fn a_hostile_pattern_is_not_exponential() {
        let text = "a".repeat(2_000);
        assert!(!matches(&format!("{}b", "*a".repeat(50)), &text));
    }
}
