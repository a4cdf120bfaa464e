#!/usr/bin/env bash
# Acceptance test: the MCP conformance suite passes exactly as many checks
# through Vigil as against the conformance backend directly, and the direct
# run passes them all.
#
# usage: tests/conformance/compare.sh
#
# Builds nothing: it takes vigil-conformance-backend and vigil from
# ${CARGO_TARGET_DIR:-target}/debug/ (a relative CARGO_TARGET_DIR is taken
# from the repository root). It starts the backend on a free loopback port,
# runs the suite against it (run.sh), starts `vigil serve` fronting it
# (naming = "none", streamable HTTP) on another port, runs the suite through
# Vigil, and prints both summaries and every check whose outcome differs.
#
# Exit status: 0 when the direct run failed no check and the run through
# Vigil passed the same number of checks and failed none; 1 otherwise;
# 2 on an infrastructure failure (a binary is missing, a server would not
# start, the suite could not run).
#
# Environment: CONFORMANCE_KEEP=1 keeps the work directory (logs, results)
# even on success; it is always kept on failure. VIGIL_CACHE and
# CONFORMANCE_TIMEOUT are passed on to run.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

die() {
  echo "compare: $*" >&2
  exit 2
}

bin_dir=${CARGO_TARGET_DIR:-target}/debug
backend_bin=$bin_dir/vigil-conformance-backend
vigil_bin=$bin_dir/vigil
[ -x "$backend_bin" ] || die "no conformance backend at $backend_bin (cargo build -p vigil-conformance-backend)"
[ -x "$vigil_bin" ] || die "no vigil binary at $vigil_bin (cargo build -p vigil)"

node=$("$here/run.sh" --print-node) || die "cannot install the conformance suite"

work=$(mktemp -d)
pids=()
outcome=2
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "$outcome" = 0 ] && [ -z "${CONFORMANCE_KEEP:-}" ]; then
    rm -rf "$work"
  else
    echo "compare: logs and results kept in $work" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A loopback port nothing is listening on, outside the kernel's ephemeral
# range (a port in that range may be taken by an outgoing connection between
# this check and the bind).
free_port() {
  local port lo=32768 hi=60999 base span
  if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
  fi
  if [ "$lo" -gt 11024 ]; then
    base=10000 span=$((lo - 10000))
  else
    base=$((hi + 1)) span=$((65535 - hi))
    [ "$span" -gt 0 ] || { base=10000 span=1000; }
  fi
  for _ in $(seq 100); do
    port=$((base + RANDOM % span))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# start LOG COMMAND...: run COMMAND in the background, output to LOG.
start() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  pids+=($!)
}

# ready NAME URL LOG SECONDS: wait until the MCP server at URL lists the
# conformance tools, while the last started process is alive.
ready() {
  local name=$1 url=$2 log=$3 seconds=$4 pid=${pids[-1]}
  for _ in $(seq "$seconds"); do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$log" >&2
      die "$name exited before it was ready (log: $log)"
    fi
    if "$node" "$here/wait-ready.mjs" "$url" test_simple_text 1 2>"$work/ready.err"; then
      return 0
    fi
  done
  cat "$work/ready.err" >&2
  tail -n 30 "$log" >&2
  die "$name was not ready within ${seconds}s (log: $log)"
}

# suite NAME URL: run the suite; its files go to $work/NAME.
suite() {
  local status=0
  CONFORMANCE_OUT=$work/$1 "$here/run.sh" "$2" >/dev/null || status=$?
  [ "$status" = 0 ] || die "the suite could not run against $1 ($2)"
}

count() { # count STATUS FILE
  awk -F'\t' -v status="$1" '$3 == status { n++ } END { print n + 0 }' "$2"
}

backend_port=$(free_port) || die "no free loopback port"
backend_url=http://127.0.0.1:$backend_port/mcp
start "$work/backend.log" "$backend_bin" --listen "127.0.0.1:$backend_port"
ready "the conformance backend" "$backend_url" "$work/backend.log" 20
suite direct "$backend_url"

vigil_port=$(free_port) || die "no free loopback port"
vigil_url=http://127.0.0.1:$vigil_port/mcp
cat >"$work/vigil.toml" <<EOF
listen = "127.0.0.1:$vigil_port"
naming = "none"
[[backends]]
name = "conformance"
transport = "http"
url = "$backend_url"
EOF
start "$work/vigil.log" "$vigil_bin" serve --config "$work/vigil.toml"
ready "vigil" "$vigil_url" "$work/vigil.log" 60
suite vigil "$vigil_url"

echo "== direct ($backend_url)"
cat "$work/direct/summary.txt"
echo "== through vigil ($vigil_url)"
cat "$work/vigil/summary.txt"

direct_passed=$(count SUCCESS "$work/direct/checks.tsv")
direct_failed=$(count FAILURE "$work/direct/checks.tsv")
vigil_passed=$(count SUCCESS "$work/vigil/checks.tsv")
vigil_failed=$(count FAILURE "$work/vigil/checks.tsv")

differences=$(awk -F'\t' '
  FNR == NR { direct[$1 "/" $2] = $3; next }
  { vigil[$1 "/" $2] = $3 }
  END {
    for (check in direct) {
      if (!(check in vigil)) printf "  %s: direct %s, through vigil neither SUCCESS nor FAILURE\n", check, direct[check]
      else if (direct[check] != vigil[check])
        printf "  %s: direct %s, through vigil %s\n", check, direct[check], vigil[check]
    }
    for (check in vigil) if (!(check in direct))
      printf "  %s: direct neither SUCCESS nor FAILURE, through vigil %s\n", check, vigil[check]
  }' "$work/direct/checks.tsv" "$work/vigil/checks.tsv" | sort)

echo "== comparison"
echo "direct: $direct_passed passed, $direct_failed failed"
echo "through vigil: $vigil_passed passed, $vigil_failed failed"
if [ -n "$differences" ]; then
  echo "checks that differ:"
  echo "$differences"
fi

outcome=0
if [ "$direct_failed" != 0 ]; then
  echo "compare: FAIL: the direct run does not pass every check"
  outcome=1
fi
if [ "$vigil_passed" != "$direct_passed" ] || [ "$vigil_failed" != 0 ]; then
  echo "compare: FAIL: through vigil the suite passes $vigil_passed checks and fails $vigil_failed; directly it passes $direct_passed"
  outcome=1
fi
[ "$outcome" = 0 ] && echo "compare: ok: through vigil the suite passes the same $direct_passed checks as directly"
exit "$outcome"
