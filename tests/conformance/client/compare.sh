#!/usr/bin/env bash
# Acceptance test, client mode: every client scenario of the MCP conformance
# suite, for each revision it has requirements for, run with driver.py as
# the client directly against the scenario server (the baseline) and through
# Vigil (through_vigil.py: Vigil with the scenario server as its only
# backend, driver.py against Vigil), twice: with the backend's default
# `protocol = "auto"` and with `protocol` pinned to the scenario's revision.
# Vigil's backend-facing client is what differs from the baseline.
#
# usage: tests/conformance/client/compare.sh
#
# Builds nothing: vigil comes from ${CARGO_TARGET_DIR:-target}/debug/ (a
# relative CARGO_TARGET_DIR is taken from the repository root); Python from
# the venv scripts/test.sh sets up (${VIGIL_VENV:-$HOME/.cache/vigil/venv},
# with the official MCP Python SDK); the suite and Node 22 from ../run.sh's
# install. Scenarios run one at a time (the suite would run them all at
# once, which starts a gateway per scenario together on a small machine).
#
# Prints a table: scenario, revision, directly, through Vigil (auto),
# through Vigil (pinned), and why a run failed or why a scenario is not
# applicable (not_applicable below).
#
# Exit status: 0 unless, on a scenario not documented as not applicable, an
# asserted run through Vigil (ASSERTED below) did worse than the direct run
# (failed where direct passed, passed fewer checks, or failed more); 1 then;
# 2 on an infrastructure failure (no vigil binary, no venv, the suite cannot
# run).
#
# Environment: CONFORMANCE_KEEP=1 keeps the work directory (results, the
# clients' output, Vigil's logs) even on success; it is always kept on
# failure. CONFORMANCE_CLIENT_TIMEOUT: milliseconds the suite gives the
# client per scenario (default 120000: through Vigil that includes starting
# Vigil, on a loaded two-core machine). VIGIL_CACHE as for run.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"

die() {
  echo "client compare: $*" >&2
  exit 2
}

# The runs through Vigil that may not do worse than directly ("auto",
# "pinned"); the others are reported.
ASSERTED=(auto pinned)

# Scenarios (by name pattern) that are not applicable, with why.
not_applicable() { # not_applicable SCENARIO: print the reason, or fail
  case $1 in
    auth/*)
      echo "authorization (OAuth) client flows: driver.py implements none, and Vigil's OAuth toward its backends belongs to the access issue"
      ;;
    *) return 1 ;;
  esac
}

target=${CARGO_TARGET_DIR:-target}
case $target in /*) ;; *) target=$root/$target ;; esac
vigil_bin=$target/debug/vigil
[ -x "$vigil_bin" ] || die "no vigil binary at $vigil_bin (cargo build -p vigil)"
python=${VIGIL_VENV:-$HOME/.cache/vigil/venv}/bin/python
"$python" -c 'import mcp' 2>/dev/null || die "no Python with the MCP SDK at $python (scripts/test.sh sets it up)"
node=$("$here/../run.sh" --print-node) || die "cannot install the conformance suite"
suite=$("$here/../run.sh" --print-suite) || die "cannot install the conformance suite"
timeout_ms=${CONFORMANCE_CLIENT_TIMEOUT:-120000}

work=$(mktemp -d)
outcome=2
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  if [ "$outcome" = 0 ] && [ -z "${CONFORMANCE_KEEP:-}" ]; then
    rm -rf "$work"
  else
    echo "client compare: results, client output and Vigil's logs kept in $work" >&2
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# scenarios REVISION: the client scenarios the suite scores for REVISION,
# then those it runs unscored because they are pending or were added after
# the release (not the extensions), one a line.
scenarios() {
  "$node" "$suite" list --client --requirements "$1" | awk '
    /^Client scenarios/ { section = "scored"; next }
    /^Server scenarios/ { section = ""; next }
    /^Run and reported, but never scored/ { section = "unscored"; next }
    section == "scored" && /^  - / { print $2 }
    section == "unscored" && /^  [a-z-]+ \([0-9]+\):/ { group = $1 }
    section == "unscored" && /^    - .* \[client\]$/ && group != "extension" { print $2 }'
}

# run KIND REVISION SCENARIO COMMAND [PROTOCOL]: one scenario with COMMAND
# as the client (through Vigil: the backend's `protocol` PROTOCOL); prints
# report.mjs's line.
run() {
  local kind=$1 revision=$2 scenario=$3 command=$4 protocol=${5:-auto} out status=0
  out=$work/$kind/$revision/${scenario//\//_}
  mkdir -p "$out"
  VIGIL_BIN=$vigil_bin VIGIL_CONFORMANCE_LOGS=$work/$kind/$revision/vigil-logs \
    VIGIL_BACKEND_PROTOCOL=$protocol \
    timeout --kill-after=10 $((timeout_ms / 1000 + 60)) \
    "$node" "$suite" client --command "$command" --scenario "$scenario" \
    --spec-version "$revision" --timeout "$timeout_ms" -o "$out/results" >"$out/suite.log" 2>&1 || status=$?
  case $status in
    0 | 1) ;;
    *) tail -n 20 "$out/suite.log" >&2; die "the suite exited with status $status ($kind, $revision, $scenario)" ;;
  esac
  "$node" "$here/report.mjs" "$out/results" "$scenario" "$status"
}

# The suite splits its client command at spaces.
[[ "$python$here" != *" "* ]] || die "the suite splits its client command at spaces: $python and $here must have none"
direct_command="$python $here/driver.py"
vigil_command="$python $here/through_vigil.py"

# verdict NAME DIRECT_LINE THROUGH_LINE: the cell of a run through Vigil;
# sets $why (appends) and $worse (when asserted).
verdict() {
  local name=$1 d_verdict d_passed d_failed v_verdict v_passed v_failed v_reason asserted=no
  IFS=$'\t' read -r d_verdict d_passed d_failed _ _ <<<"$2"
  IFS=$'\t' read -r v_verdict v_passed v_failed _ v_reason <<<"$3"
  for run in ${ASSERTED[@]+"${ASSERTED[@]}"}; do [ "$run" != "$name" ] || asserted=yes; done
  cell="$v_verdict ($v_passed/$((v_passed + v_failed)))"
  [ "$v_verdict" = passed ] || why+="through vigil ($name): $v_reason. "
  if { [ "$d_verdict" = passed ] && [ "$v_verdict" = failed ]; } \
    || [ "$v_passed" -lt "$d_passed" ] || [ "$v_failed" -gt "$d_failed" ]; then
    if [ "$asserted" = yes ]; then
      cell+=" WORSE"
      worse=1
    else
      cell+=" worse (reported, not asserted)"
    fi
  fi
}

rows=()
worse=0
na_reasons=()
for revision in 2025-11-25 2026-07-28; do
  mapfile -t names < <(scenarios "$revision")
  [ ${#names[@]} -gt 0 ] || die "the suite lists no client scenarios for $revision"
  for scenario in "${names[@]}"; do
    if reason=$(not_applicable "$scenario"); then
      rows+=("$scenario	$revision	n/a	n/a	n/a	not applicable: ${scenario%%/*}")
      [[ " ${na_reasons[*]} " == *" ${scenario%%/*}: "* ]] || na_reasons+=("${scenario%%/*}: $reason")
      continue
    fi
    direct=$(run direct "$revision" "$scenario" "$direct_command")
    auto=$(run vigil-auto "$revision" "$scenario" "$vigil_command" auto)
    pinned=$(run vigil-pinned "$revision" "$scenario" "$vigil_command" "$revision")
    IFS=$'\t' read -r d_verdict d_passed d_failed _ d_reason <<<"$direct"
    why=""
    [ "$d_verdict" = passed ] || why+="directly: $d_reason. "
    verdict auto "$direct" "$auto"
    auto_cell=$cell
    verdict pinned "$direct" "$pinned"
    rows+=("$scenario	$revision	$d_verdict ($d_passed/$((d_passed + d_failed)))	$auto_cell	$cell	${why:--}")
  done
done

echo "scenario	revision	directly	through vigil (protocol auto)	through vigil (protocol = revision)	why"
printf '%s\n' "${rows[@]}"
echo "not applicable:"
printf '  %s\n' "${na_reasons[@]}"
outcome=$worse
if [ "$outcome" = 0 ]; then
  echo "client compare: ok: through vigil no asserted run of an applicable scenario does worse than directly"
else
  echo "client compare: FAIL: through vigil an asserted run does worse than directly (marked WORSE)"
fi
exit "$outcome"
