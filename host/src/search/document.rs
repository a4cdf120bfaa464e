//! What `find_tool` ranks a tool by: the text of its definition.
//!
//! The document of a tool is its name's words (written twice: a name is
//! the densest description a tool has), its server's name, its title,
//! its description, and each parameter's name and description (nested
//! objects' and array items' too, a few levels deep). Capped in length,
//! so that a backend listing a novel as a description costs a bounded
//! index entry.

use serde_json::{Map, Value};

use super::text::split_identifiers;

/// The longest document kept, in bytes (the rest is not indexed).
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024;
/// How deep parameters of parameters are read.
const MAX_DEPTH: usize = 4;
/// How often the name's words are written.
const NAME_WEIGHT: usize = 2;

/// `value` as compact JSON, in bytes (what a definition weighs in a
/// `tools/list`, a name as a JSON string, an answer): counted as it is
/// written, nothing kept.
pub fn json_size<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    match serde_json::to_writer(&mut n, value) {
        Ok(()) => n.0,
        Err(_) => 0,
    }
}

/// The document of `tool` (one listed tool's JSON, under the backend's
/// own name) of backend `server`.
pub fn document(server: &str, tool: &Map<String, Value>) -> String {
    let mut out = Text::default();
    if let Some(name) = tool.get("name").and_then(Value::as_str) {
        let words = split_identifiers(name);
        for _ in 0..NAME_WEIGHT {
            out.push(&words);
        }
    }
    out.push(&split_identifiers(server));
    for member in ["title", "description"] {
        if let Some(text) = tool.get(member).and_then(Value::as_str) {
            out.push(text);
        }
    }
    if let Some(title) = tool
        .get("annotations")
        .and_then(|a| a.get("title"))
        .and_then(Value::as_str)
    {
        out.push(title);
    }
    if let Some(schema) = tool.get("inputSchema") {
        parameters(schema, 0, &mut out);
    }
    out.0
}

/// What the semantic arm embeds of a tool of backend `server`: the
/// server's name, the tool's name's words, its title and its description
/// (a model reads meaning, and parameters' names would dilute it), at
/// most [`MAX_MEANING_BYTES`].
///
/// The server's name comes first because it is often the one word that
/// says what a tool acts on (`github`, `google-calendar`): with it, the
/// semantic arm's Recall@1 on the retrieval corpus rose from 0.44 to
/// 0.51 (docs/tool-search.md).
pub fn meaning(server: &str, tool: &Map<String, Value>) -> String {
    let mut out = Text::default();
    if let Some(name) = tool.get("name").and_then(Value::as_str) {
        out.push(&split_identifiers(name));
    }
    for member in ["title", "description"] {
        if let Some(text) = tool.get(member).and_then(Value::as_str) {
            out.push(text);
        }
    }
    let mut text = format!("{server}: {}", out.0);
    if text.len() > MAX_MEANING_BYTES {
        let mut end = MAX_MEANING_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The longest text the semantic arm embeds of a tool (the model reads
/// 256 tokens at most).
pub const MAX_MEANING_BYTES: usize = 2048;

/// The names and descriptions of `schema`'s properties, depth first.
fn parameters(schema: &Value, depth: usize, out: &mut Text) {
    if depth > MAX_DEPTH || out.full() {
        return;
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            out.push(&split_identifiers(name));
            if let Some(d) = prop.get("description").and_then(Value::as_str) {
                out.push(d);
            }
            parameters(prop, depth + 1, out);
        }
    }
    if let Some(items) = schema.get("items") {
        parameters(items, depth + 1, out);
    }
}

/// Text up to [`MAX_DOCUMENT_BYTES`].
#[derive(Default)]
struct Text(String);

impl Text {
    fn full(&self) -> bool {
        self.0.len() >= MAX_DOCUMENT_BYTES
    }

    fn push(&mut self, text: &str) {
        if self.full() {
            return;
        }
        if !self.0.is_empty() {
            self.0.push('\n');
        }
        let room = MAX_DOCUMENT_BYTES - self.0.len();
        let mut end = text.len().min(room);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.0.push_str(&text[..end]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_meaning_is_the_server_then_the_name_title_and_description() {
        let tool = json!({
            "name": "delete-event",
            "title": "Delete event",
            "description": "Delete an event",
            "inputSchema": {"type": "object", "properties": {"eventId": {"type": "string"}}}
        });
        assert_eq!(
            meaning("google-calendar", tool.as_object().unwrap()),
            "google-calendar: delete event\nDelete event\nDelete an event"
        );
    }

    #[test]
    fn a_document_has_the_name_server_texts_and_parameters() {
        let tool = json!({
            "name": "read_file",
            "title": "Read File",
            "description": "Read a file's contents",
            "inputSchema": {"type": "object", "properties": {
                "path": {"type": "string", "description": "Where the file is"},
                "options": {"type": "object", "properties": {"maxBytes": {"type": "integer"}}},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"label": {"description": "a tag"}}}}
            }}
        });
        let doc = document("files", tool.as_object().unwrap());
        assert_eq!(
            doc,
            "read file\nread file\nfiles\nRead File\nRead a file's contents\npath\nWhere the file is\noptions\nmax Bytes\ntags\nlabel\na tag"
        );
    }

    #[test]
    fn a_document_is_capped() {
        let tool = json!({"name": "t", "description": "é".repeat(MAX_DOCUMENT_BYTES)});
        let doc = document("s", tool.as_object().unwrap());
        assert!(doc.len() <= MAX_DOCUMENT_BYTES, "{}", doc.len());
    }
}
