//! Words of tool definitions and queries, for keyword ranking.
//!
//! Tool names are identifiers (`read_file`, `browser-navigate`,
//! `listPullRequests`, `get_v2_items`): they are split into their words
//! first, so "read a file" meets `read_file`. Then the text goes through
//! the `bm25` crate's English tokenizer: Unicode word boundaries,
//! lowercase, accents folded, stop words out, Snowball stems ("files",
//! "filing" → "file").

use bm25::{DefaultTokenizer, Language, Tokenizer};

/// The tokenizer of documents and queries alike.
pub struct Words {
    inner: DefaultTokenizer,
}

impl Default for Words {
    fn default() -> Self {
        Words {
            inner: DefaultTokenizer::builder()
                .language_mode(Language::English)
                .normalization(true)
                .stemming(true)
                .stopwords(true)
                .build(),
        }
    }
}

impl Tokenizer for Words {
    fn tokenize(&self, input_text: &str) -> Vec<String> {
        self.inner.tokenize(&split_identifiers(input_text))
    }
}

/// `text` with identifiers split into words: `_`, `-`, `.`, `/` and `:`
/// become spaces, and a space goes between a lower-case letter and an
/// upper-case one (`camelCase`), before the last capital of a run of
/// capitals followed by a lower-case letter (`HTTPServer` → `HTTP
/// Server`), and between letters and digits.
pub fn split_identifiers(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, &c) in chars.iter().enumerate() {
        if matches!(c, '_' | '-' | '.' | '/' | ':') {
            out.push(' ');
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|j| chars.get(j)) {
            let next = chars.get(i + 1).copied();
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                || (prev.is_uppercase()
                    && c.is_uppercase()
                    && next.is_some_and(char::is_lowercase))
                || (prev.is_alphabetic() && c.is_ascii_digit())
                || (prev.is_ascii_digit() && c.is_alphabetic());
            if boundary {
                out.push(' ');
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_into_their_words() {
        for (id, words) in [
            ("read_file", "read file"),
            ("browser-navigate", "browser navigate"),
            ("listPullRequests", "list Pull Requests"),
            ("HTTPServer", "HTTP Server"),
            ("get_v2_items", "get v 2 items"),
            ("math.factorial", "math factorial"),
            ("plain words stay", "plain words stay"),
        ] {
            assert_eq!(split_identifiers(id), words, "{id}");
        }
    }

    #[test]
    fn tokens_are_stemmed_lowercase_words_without_stop_words() {
        let w = Words::default();
        assert_eq!(w.tokenize("listFiles"), w.tokenize("list the files"));
        assert_eq!(w.tokenize("read_file"), vec!["read", "file"]);
        assert!(w.tokenize("the of and").is_empty());
    }
}
