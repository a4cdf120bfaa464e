//! Failure reasons leave the process (API, logs, alerts) only after this:
//! configured secrets are masked, control characters dropped, length capped.

/// Longest reason kept, in characters.
const MAX_REASON: usize = 500;
/// Shorter values are not treated as secrets (they would mask ordinary words).
const MIN_SECRET: usize = 6;

/// Masks known secret values in free text.
#[derive(Debug, Clone, Default)]
pub struct Sanitizer {
    /// Shared: every supervisor holds a clone.
    secrets: std::sync::Arc<[String]>,
}

impl Sanitizer {
    /// `values`: env values, header values and tokens from the config.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut secrets: Vec<String> = values
            .into_iter()
            .flat_map(|v| {
                // "Bearer abc..." → also mask the bare credential.
                let bare = v.split_whitespace().last().unwrap_or(v).to_owned();
                [v.to_owned(), bare]
            })
            .filter(|v| v.chars().count() >= MIN_SECRET)
            .collect();
        // Longest first, so a value containing another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self {
            secrets: secrets.into(),
        }
    }

    pub fn clean(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for s in self.secrets.iter() {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), "***");
            }
        }
        let mut out: String = out
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect::<String>()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if out.chars().count() > MAX_REASON {
            out = out.chars().take(MAX_REASON).collect::<String>() + "…";
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_whole_and_bare() {
        let s = Sanitizer::new(["Bearer sk-live-123456", "hunter2secret", "abc"]);
        let out = s.clean("401 with Authorization: Bearer sk-live-123456; retry with sk-live-123456; pw=hunter2secret; abc stays");
        assert_eq!(
            out,
            "401 with Authorization: ***; retry with ***; pw=***; abc stays"
        );
    }

    #[test]
    fn control_characters_and_length_are_bounded() {
        let s = Sanitizer::default();
        assert_eq!(s.clean("line1\n\tline2\u{1b}[31m"), "line1 line2 [31m");
        let long = "x".repeat(2000);
        assert_eq!(s.clean(&long).chars().count(), MAX_REASON + 1);
    }
}
