//! Whether an `[[api.tokens]]` secret is too weak to guard the control API.
//!
//! The rule (also in `docs/config.md`): a secret needs at least
//! [`MIN_CHARS`] characters, more than one distinct character, and an
//! estimated [`MIN_BITS`] bits. The estimate counts the characters that
//! carry information — not those that repeat an earlier stretch of three or
//! more characters (`passwordpassword`), nor those that continue a run or a
//! sequence (`aaaa`, `abcd`, `4321`) — at log2 of the size of the character
//! classes the secret uses (digits 10, lower-case 26, upper-case 26, other
//! 33). It is a floor against secrets people make up, not a proof of
//! randomness: a dictionary phrase can pass it. Random secrets pass it
//! with room to spare: 32 or more random hex digits always do.

/// Fewest characters a secret may have.
pub const MIN_CHARS: usize = 16;
/// Fewest estimated bits a secret must carry.
pub const MIN_BITS: f64 = 48.0;
/// Characters estimated: a longer secret is judged by its start (and the
/// estimate stays cheap for any input).
const ESTIMATED_CHARS: usize = 256;
/// A repeat of an earlier stretch counts from this length on.
const MIN_REPEAT: usize = 3;

/// How to make a good secret, ending every message.
const HOW: &str = "generate one with `openssl rand -hex 32`";

/// What is wrong with `secret`, as a message continuing "api.tokens[0].token: ",
/// or `None` if it is strong enough. Never quotes the secret.
pub fn weakness(secret: &str) -> Option<String> {
    let chars: Vec<char> = secret.chars().take(ESTIMATED_CHARS).collect();
    let count = secret.chars().count();
    if count < MIN_CHARS {
        return Some(format!(
            "is too short ({count} characters): use at least {MIN_CHARS}; {HOW}"
        ));
    }
    if secret.chars().all(|c| c == chars[0]) {
        return Some(format!("is one character repeated: {HOW}"));
    }
    let bits = estimated_bits(&chars);
    (bits < MIN_BITS).then(|| {
        format!(
            "has too little entropy (about {bits:.0} bits, at least {MIN_BITS:.0} needed): it repeats itself or runs or counts like `aaaa` or `abcd`; {HOW}"
        )
    })
}

/// The estimate described in the module doc.
fn estimated_bits(chars: &[char]) -> f64 {
    let mut informative = 0u32;
    let mut i = 0;
    while i < chars.len() {
        let repeat = (0..i)
            .map(|j| {
                chars[j..]
                    .iter()
                    .zip(&chars[i..])
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        if repeat >= MIN_REPEAT {
            i += repeat;
            continue;
        }
        let continues = i > 0
            && (i64::from(u32::from(chars[i])) - i64::from(u32::from(chars[i - 1]))).abs() <= 1;
        if !continues {
            informative += 1;
        }
        i += 1;
    }
    f64::from(informative) * f64::from(class_size(chars)).log2()
}

/// The size of the union of the character classes `chars` uses.
fn class_size(chars: &[char]) -> u32 {
    let has = |f: fn(&char) -> bool| chars.iter().any(f);
    let mut size = 0;
    if has(|c| c.is_ascii_digit()) {
        size += 10;
    }
    if has(|c| c.is_ascii_lowercase()) {
        size += 26;
    }
    if has(|c| c.is_ascii_uppercase()) {
        size += 26;
    }
    if has(|c| !c.is_ascii_alphanumeric()) {
        size += 33;
    }
    size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_secrets_are_refused_with_the_reason() {
        for (secret, reason) in [
            (
                "short-secret",
                "is too short (12 characters): use at least 16",
            ),
            ("aaaaaaaaaaaaaaaaaaaaaaaa", "is one character repeated"),
            ("changemechangeme", "has too little entropy"),
            ("passwordpassword", "has too little entropy"),
            ("0123456789abcdefghij", "has too little entropy"),
            ("abababababababababab", "has too little entropy"),
            ("zyxwvutsrqponmlkjihg", "has too little entropy"),
        ] {
            let weak = weakness(secret).unwrap_or_else(|| panic!("{secret} passed"));
            assert!(weak.starts_with(reason), "{secret}: {weak}");
            assert!(weak.ends_with("`openssl rand -hex 32`"), "{weak}");
            assert!(
                !weak.contains(secret),
                "the message quotes the secret: {weak}"
            );
        }
    }

    #[test]
    fn random_and_long_secrets_pass() {
        for secret in [
            "4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b4a3d6c9f2e5b8a1d0c7f4e3b6a9d2c5f",
            "viewer-token-0123456789abcdef",
            "operator-token-0123456789abcdef",
            "Zr4!qT9#mW2$xK7&",
            "correct-horse-battery-staple",
        ] {
            assert_eq!(weakness(secret), None, "{secret}");
        }
    }

    /// Hex secrets from a deterministic generator (xorshift), as
    /// `openssl rand -hex 32` makes them: none may be refused.
    #[test]
    fn no_random_hex_secret_of_32_digits_is_refused() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            let secret: String = (0..32)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    char::from_digit((state % 16) as u32, 16).unwrap_or('0')
                })
                .collect();
            assert_eq!(weakness(&secret), None, "{secret}");
        }
    }

    #[test]
    fn huge_secrets_are_judged_by_their_start() {
        assert!(
            weakness(&"a".repeat(1_000_000))
                .unwrap()
                .starts_with("is one character")
        );
        let tail_only = "a".repeat(1_000) + "4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b";
        assert!(
            weakness(&tail_only)
                .unwrap()
                .starts_with("has too little entropy")
        );
        let strong = "4f9c2b7e1a0d8c3f6b5e9a2d7c1f0e8b".to_owned() + &"a".repeat(1_000_000);
        assert_eq!(weakness(&strong), None);
    }
}
