#!/usr/bin/env bash
# Runs the Vigil demo: builds the workspace, starts an HTTP demo backend and
# serves examples/demo.toml on http://127.0.0.1:8080/mcp until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-target}"
command -v cargo >/dev/null || { echo "cargo is needed: install Rust (https://rustup.rs)"; exit 1; }
cargo build --workspace --quiet
BIN="$CARGO_TARGET_DIR/debug"
export PATH="$BIN:$PATH"
vigil-demo-backend --transport http --listen 127.0.0.1:3902 --name remote &
BACKEND=$!
trap 'kill $BACKEND 2>/dev/null || true' EXIT
echo "Vigil demo: connect an MCP client to http://127.0.0.1:8080/mcp; dashboard at http://127.0.0.1:8081/ui (Ctrl-C stops)"
vigil serve --config examples/demo.toml
