//! The lean backend over stdio (`vigil-bench lean-backend --stdio`): the
//! answers of [`super::mcp`] as an MCP stdio server, the transport most
//! MCP servers that users run speak.
//!
//! Contract: each line on stdin is one JSON-RPC message or a batch
//! (newline-delimited, UTF-8, no embedded newlines); each answer is one
//! line on stdout, written as soon as its request is read, in order.
//! Notifications and responses get none; a line that is not JSON-RPC gets
//! a -32700 error with id `null`. No sessions: `initialize` may come any
//! number of times. End of stdin ends the process. Nothing else is
//! written to stdout.
//!
//! Plain blocking reads and writes on the main thread, no runtime: one
//! request at a time, as a small stdio server serves them.

use std::io::{BufRead as _, Write as _};

use anyhow::Context as _;

use super::mcp::{self, Era};

/// Serves until stdin ends.
pub fn run(name: &str) -> anyhow::Result<()> {
    let server = mcp::Server::new(name);
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut line = Vec::with_capacity(4096);
    let mut json = Vec::with_capacity(4096);
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .context("reading stdin")?
            == 0
        {
            return Ok(());
        }
        json.clear();
        answer_line(&server, &line, &mut json);
        if !json.is_empty() {
            json.push(b'\n');
            output.write_all(&json).context("writing stdout")?;
            output.flush().context("writing stdout")?;
        }
    }
}

/// The answer to one line (nothing for a blank line or one without
/// requests).
fn answer_line(server: &mcp::Server, line: &[u8], json: &mut Vec<u8>) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match mcp::parse(line) {
        Some((batch, messages)) => {
            mcp::answer_all(server, Era::Handshake, &messages, batch, json);
        }
        None => mcp::error_to(json, None, -32700, "parse error: not a JSON-RPC message"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> String {
        let mut json = Vec::new();
        answer_line(&mcp::Server::new("s"), line.as_bytes(), &mut json);
        String::from_utf8(json).unwrap()
    }

    #[test]
    fn lines() {
        let init = answer(
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\"}}\n",
        );
        let v: serde_json::Value = serde_json::from_str(&init).unwrap();
        assert_eq!(v["result"]["protocolVersion"], "2025-06-18");
        assert!(!init.contains('\n'));
        assert_eq!(
            answer("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"),
            ""
        );
        assert_eq!(answer("\n"), "");
        assert_eq!(
            answer(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#),
            r#"{"jsonrpc":"2.0","id":7,"result":{}}"#
        );
        let v: serde_json::Value = serde_json::from_str(&answer("garbage\n")).unwrap();
        assert_eq!(v["error"]["code"], -32700);
    }
}
