#!/usr/bin/env bash
# Runs the Vigil demo: builds the workspace and the demo's WebAssembly
# plugins, starts an HTTP demo backend and an alert receiver, and serves
# examples/demo.toml on http://127.0.0.1:8080/mcp until Ctrl-C.
#
# Shares its build with scripts/test.sh (scripts/env.sh): run after the
# tests, it rebuilds nothing.
#
#   bash scripts/demo.sh           # the demo
#   bash scripts/demo.sh --check   # build as the demo does, check its config, exit;
#                                  # fails if a workspace crate had to be compiled
#                                  # (scripts/test.sh runs it after its own build)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/env.sh
. scripts/env.sh
command -v cargo >/dev/null || { echo "cargo is needed: install Rust (https://rustup.rs)"; exit 1; }
if [ "${1:-}" = --check ]; then
  rebuilt=$(cargo build --workspace 2>&1 | sed -n 's/^ *Compiling \([^ ]*\) .*(\(.*\))$/\1/p' | grep -v '^$' || true)
  if [ -n "$rebuilt" ]; then
    echo "demo: the demo's build compiled again what was built already: $(echo $rebuilt)" >&2
    echo "demo: scripts/demo.sh and scripts/test.sh must build with the same settings (scripts/env.sh)" >&2
    exit 1
  fi
  "$CARGO_TARGET_DIR/debug/vigil" check --config examples/demo.toml
  echo "demo: nothing to rebuild; examples/demo.toml is valid"
  exit 0
fi
command -v python3 >/dev/null || { echo "python3 is needed for the demo's alert receiver (Debian: apt-get install python3)"; exit 1; }
cargo build --workspace --quiet
# The probe and the notifier of examples/demo.toml (the first time this
# adds the wasm32-wasip2 target and takes a few minutes).
plugins=$(mktemp -d)
trap 'rm -rf "$plugins"' EXIT
bash scripts/build-plugins.sh "$plugins" >/dev/null
cp "$plugins/tool-call.wasm" "$plugins/webhook.wasm" examples/demo-plugins/
BIN="$CARGO_TARGET_DIR/debug"
export PATH="$BIN:$PATH"
vigil-demo-backend --transport http --listen 127.0.0.1:3902 --name remote &
BACKEND=$!
python3 examples/alert-receiver.py 3903 &
RECEIVER=$!
trap 'kill $BACKEND $RECEIVER 2>/dev/null || true; rm -rf "$plugins"' EXIT
cat <<'TEXT'
Vigil demo
  MCP endpoint:  http://127.0.0.1:8080/mcp   (tools: files__echo, remote__add, ...)
  dashboard:     http://127.0.0.1:8081/ui
  plugins:       tool-call probes each backend every 10 s; webhook sends each
                 health transition to the alert receiver, whose ALERT lines print here
  try:           pkill -9 -f 'vigil-demo-backend.*files'   (an alert, a restart, a recovery)
  stop:          Ctrl-C
TEXT
vigil serve --config examples/demo.toml
