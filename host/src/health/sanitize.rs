//! Failure reasons leave the process (API, logs, alerts) only after this:
//! secrets masked (configured ones and URL credentials, see
//! [`crate::redact`]), control characters dropped, length capped.

use crate::redact::Redactor;

/// Longest reason kept, in characters.
const MAX_REASON: usize = 500;

/// Cleans free text into a reason fit to show.
#[derive(Debug, Clone, Default)]
pub struct Sanitizer {
    /// Shared with the gateway, which keeps its secrets current.
    redactor: Redactor,
}

impl Sanitizer {
    pub fn new(redactor: Redactor) -> Self {
        Self { redactor }
    }

    pub fn clean(&self, text: &str) -> String {
        let masked = self.redactor.mask(text);
        let mut out: String = masked
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
    use crate::redact::Secrets;

    #[test]
    fn secrets_and_url_credentials_are_masked() {
        let s = Sanitizer::new(Redactor::new(Secrets::new([
            "Bearer sk-live-123456",
            "hunter2secret",
            "abc",
        ])));
        let out = s.clean("401 with Authorization: Bearer sk-live-123456; retry with sk-live-123456; pw=hunter2secret; abc stays; url (http://h/mcp?api_key=k-1)");
        assert_eq!(
            out,
            "401 with Authorization: ***; retry with ***; pw=***; abc stays; url (http://h/mcp?api_key=***)"
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
