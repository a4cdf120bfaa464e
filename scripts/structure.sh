#!/usr/bin/env bash
# Checks two rules of the host crate's structure (DESIGN.md):
#
# 1. The layers point one way: no module below the front names the front,
#    the composition root or the control API (`crate::gateway`,
#    `crate::front`, `crate::app`, `crate::api`). Those edges compose the
#    lower modules; a lower module that reached back would tie the data
#    path, the store or the health model to one way of serving them. The
#    front (`gateway`) does not name the composition root (`crate::app`)
#    either: the root composes it.
# 2. Every task is tracked: no code calls `tokio::spawn` itself; it goes
#    through `background` (a `Background`, or `background::spawn`), whose
#    trackers a shutdown waits for. Unit tests may spawn freely.
#
#   bash scripts/structure.sh        (run by scripts/test.sh)
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
# The front under the root.
hits=$(grep -rnE 'crate::app\b|crate::\{[^}]*\bapp\b' "$src/gateway" --include='*.rs' |
  grep -vE '^[^:]+:[0-9]+:\s*//' || true)
if [ -n "$hits" ]; then
  echo "$hits" | sed "s|^$repo/||"
  found=1
fi
if [ "$found" = 1 ]; then
  echo "structure: a module below the front names the front, the composition root or the control API (above); move what it needs down, or pass it in" >&2
fi

# Rule 2: tokio::spawn outside background.rs, in code before a file's
# `#[cfg(test)] mod tests` (and not in a tests.rs).
spawned=0
while IFS= read -r file; do
  case $file in */background.rs | */tests.rs) continue ;; esac
  hits=$(awk '/^#\[cfg\(test\)\]/ { test = 1 } !test && /tokio::spawn\(/ && !/^[[:space:]]*\/\// { print FILENAME ":" FNR ": " $0 }' "$file")
  if [ -n "$hits" ]; then
    echo "$hits" | sed "s|^$repo/||"
    spawned=1
  fi
done < <(grep -rl 'tokio::spawn(' "$src" --include='*.rs' || true)
if [ "$spawned" = 1 ]; then
  echo "structure: a task spawned outside the trackers (above): use a Background, or crate::background::spawn" >&2
fi

if [ "$found" = 1 ] || [ "$spawned" = 1 ]; then
  exit 1
fi
echo "structure: ok"
