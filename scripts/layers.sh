#!/usr/bin/env bash
# Checks that the crate's layers point one way: no module below the front
# names the front, the composition root or the control API (`crate::gateway`,
# `crate::front`, `crate::app`, `crate::api`). Those edges compose the lower
# modules; a lower module that reached back would tie the data path, the
# store or the health model to one way of serving them.
#
#   bash scripts/layers.sh        (run by scripts/test.sh)
#
# Prints each offending line (file:line: text) and exits 1 if there is one.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
src="$repo/host/src"

# The edges: they may name anything.
edges='^(gateway|front|app|api|cli|main\.rs|lib\.rs)$'

found=0
for entry in "$src"/*; do
  name=$(basename "$entry")
  if [[ $name =~ $edges ]]; then
    continue
  fi
  # Code lines only (doc comments may name a module to explain a contract).
  hits=$(grep -rnE 'crate::(gateway|front|app|api)\b|crate::\{[^}]*\b(gateway|front|app|api)\b' "$entry" --include='*.rs' |
    grep -vE '^[^:]+:[0-9]+:\s*//' || true)
  if [ -n "$hits" ]; then
    echo "$hits" | sed "s|^$repo/||"
    found=1
  fi
done
if [ "$found" = 1 ]; then
  echo "layers: a module below the front names the front, the composition root or the control API (above); move what it needs down, or pass it in" >&2
  exit 1
fi
echo "layers: ok"
