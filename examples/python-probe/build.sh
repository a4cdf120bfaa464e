#!/usr/bin/env bash
# Builds examples/python-probe/app.py into a Vigil probe component with
# componentize-py.
#
#   bash examples/python-probe/build.sh [OUT_DIR]
#
# Writes OUT_DIR/python-probe.wasm (default OUT_DIR: <repo>/target/examples).
# Needs only python3 with venv + pip: componentize-py is a PyPI wheel that
# carries the CPython-for-WASI runtime and the component tooling.
# Env: VIGIL_COMPONENTIZE_VENV (default $HOME/.cache/vigil/componentize-venv)
#      picks the venv; it is created on first use and reused after.
#      PYTHON (default python3) is the interpreter that creates the venv.
set -euo pipefail

# The version this example was verified with. Pinned because componentize-py
# is pre-1.0: a new release may change the generated bindings app.py imports.
COMPONENTIZE_PY_VERSION="0.25.1"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:-$repo/target/examples}"
venv="${VIGIL_COMPONENTIZE_VENV:-$HOME/.cache/vigil/componentize-venv}"
python="${PYTHON:-python3}"

# A venv outside the repo: componentize-py is a 17 MB wheel (46 MB
# installed), worth sharing between clones and builds.
if [[ ! -x "$venv/bin/python" ]]; then
  echo "creating venv $venv" >&2
  "$python" -m venv "$venv"
fi

# Install (or replace) componentize-py only when the pinned version is absent.
have="$("$venv/bin/python" -m pip show componentize-py 2>/dev/null \
  | sed -n 's/^Version: //p' || true)"
if [[ "$have" != "$COMPONENTIZE_PY_VERSION" ]]; then
  echo "installing componentize-py==$COMPONENTIZE_PY_VERSION into $venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "componentize-py==$COMPONENTIZE_PY_VERSION"
fi

mkdir -p "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"
out="$out_dir/python-probe.wasm"
tmp="$out.tmp.$$"
# componentize-py imports the app inside its own CPython to snapshot it, and
# that writes __pycache__ next to the source: build from a scratch copy so
# the source tree stays clean.
src="$(mktemp -d)"
trap 'rm -rf "$tmp" "$src"' EXIT
cp "$here/app.py" "$src/"

# -d: the repo's WIT (with the vendored WASI deps); -w: the world by its full
# name, so the package version is explicit; -p: where `app` is found. Write
# to a temporary file first so a watched plugin dir never sees half a file.
echo "componentizing $here/app.py (takes 5-20 s)" >&2
"$venv/bin/componentize-py" \
  -d "$repo/wit" \
  -w "vigil:plugin/probe@0.1.0" \
  componentize app \
  -p "$src" \
  -o "$tmp"

# A component starts with the wasm magic and layer 1 (0d 00 01 00); a core
# module would have version 1 (01 00 00 00) and Vigil would refuse it.
magic="$(head -c 8 "$tmp" | od -An -tx1 | tr -d ' \n')"
if [[ "$magic" != "0061736d0d000100" ]]; then
  echo "error: $tmp is not a component (first bytes: $magic)" >&2
  exit 1
fi

mv "$tmp" "$out"
echo "$out ($(wc -c <"$out") bytes)"
