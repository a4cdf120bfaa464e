//! Reading an MCP client's config file: JSON with comments (JSONC), walked
//! with the path of every value so each note can say where it is.

use std::fmt;

pub(crate) use jsonc_parser::JsonValue;

/// Where a value sits in the file, printed like
/// `mcpServers.github.env.GITHUB_TOKEN`, `servers["my server"].args[2]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsonPath(String);

impl JsonPath {
    /// The document itself.
    pub fn root() -> Self {
        Self::default()
    }

    /// The member `key` of this object.
    pub fn key(&self, key: &str) -> Self {
        let plain = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$'));
        let mut s = self.0.clone();
        if plain {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(key);
        } else {
            // A JSON string: quotes, backslashes and control characters
            // escaped, so the path is one readable line.
            s.push('[');
            s.push_str(&serde_json::Value::String(key.to_owned()).to_string());
            s.push(']');
        }
        Self(s)
    }

    /// Element `i` of this array.
    pub fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("(top level)")
        } else {
            f.write_str(&self.0)
        }
    }
}

/// A JSON syntax error, 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Parses `text` as JSONC: JSON plus `//` and `/* */` comments and trailing
/// commas, which VS Code's files allow. Nothing looser (single quotes,
/// unquoted keys, hex numbers): no client writes those, and accepting them
/// would hide a broken file. `Ok(None)` for an empty text.
pub fn parse(text: &str) -> Result<Option<JsonValue<'_>>, SyntaxError> {
    let options = jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    jsonc_parser::parse_to_value(text, &options).map_err(|e| SyntaxError {
        line: e.line_display(),
        column: e.column_display(),
        message: e.kind().to_string(),
    })
}

/// What a value is, for messages: "a string", "an array", ...
pub fn kind(value: &JsonValue<'_>) -> &'static str {
    match value {
        JsonValue::String(_) => "a string",
        JsonValue::Number(_) => "a number",
        JsonValue::Boolean(_) => "true/false",
        JsonValue::Object(_) => "an object",
        JsonValue::Array(_) => "an array",
        JsonValue::Null => "null",
    }
}

/// A scalar as the text a client would pass on (numbers and booleans as
/// written); `None` for objects, arrays and null.
pub fn scalar_text(value: &JsonValue<'_>) -> Option<String> {
    match value {
        JsonValue::String(s) => Some(s.to_string()),
        JsonValue::Number(n) => Some((*n).to_owned()),
        JsonValue::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_like_the_file() {
        let servers = JsonPath::root().key("mcpServers");
        assert_eq!(servers.to_string(), "mcpServers");
        assert_eq!(
            servers
                .key("github")
                .key("env")
                .key("GITHUB_TOKEN")
                .to_string(),
            "mcpServers.github.env.GITHUB_TOKEN"
        );
        assert_eq!(
            servers.key("my server").key("args").index(2).to_string(),
            r#"mcpServers["my server"].args[2]"#
        );
        assert_eq!(servers.key("a\"b\n").to_string(), r#"mcpServers["a\"b\n"]"#);
        assert_eq!(JsonPath::root().to_string(), "(top level)");
        assert_eq!(
            JsonPath::root().key("mcp").key("servers").to_string(),
            "mcp.servers"
        );
    }

    #[test]
    fn comments_and_trailing_commas_are_read_in_file_order() {
        let text = r#"{
            // a comment
            "servers": { "b": 1, /* block */ "a": 2, },
        }"#;
        let Some(JsonValue::Object(root)) = parse(text).unwrap() else {
            panic!("object expected")
        };
        let Some(JsonValue::Object(servers)) = root.get("servers") else {
            panic!("servers expected")
        };
        let order: Vec<String> = servers
            .clone()
            .into_iter()
            .map(|(k, _)| k.into_owned())
            .collect();
        assert_eq!(order, ["b", "a"]);
    }

    #[test]
    fn syntax_errors_say_where() {
        let e = parse("{\n  \"mcpServers\": {\n    \"a\" {}\n  }\n}").unwrap_err();
        assert_eq!((e.line, e.column), (3, 9));
        assert!(e.message.contains("colon"), "{e:?}");
        let e = parse("{'a': 1}").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse("   ").unwrap().is_none());
    }
}
