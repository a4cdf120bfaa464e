#!/usr/bin/env bash
# Builds the container image of the demo backend for Vigil's container
# runtime tests: localhost/vigil-demo-backend:test, holding only a statically
# linked vigil-demo-backend at / (entrypoint /vigil-demo-backend).
#
#   bash scripts/container-image.sh
#
# No registry is involved: the image is imported from a tar of that one file
# (`podman import`, or `docker import` where only Docker is installed). The
# engine must be up first (scripts/container-engine.sh for Podman). The work
# is skipped when the image exists and carries the hash of the current binary
# (label vigil.binary.sha256); cargo's no-op build decides whether it changed.
#
# Environment:
#   CARGO_TARGET_DIR   default $HOME/.cache/vigil-target
#   VIGIL_TEST_IMAGE   default localhost/vigil-demo-backend:test
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-target}"
image="${VIGIL_TEST_IMAGE:-localhost/vigil-demo-backend:test}"
target=x86_64-unknown-linux-gnu
bin="$CARGO_TARGET_DIR/$target/debug/vigil-demo-backend"

say() { echo "container-image: $*" >&2; }
die() { say "$*"; exit 1; }

if command -v podman >/dev/null 2>&1; then
  engine=podman
elif command -v docker >/dev/null 2>&1; then
  engine=docker
else
  die "neither podman nor docker found: run scripts/container-engine.sh first"
fi
[ "$(uname -m)" = x86_64 ] || die "this script builds for $target; this machine is $(uname -m)"
command -v cargo >/dev/null 2>&1 || die "cargo is needed: install Rust (https://rustup.rs)"

# Built for an explicit --target so these RUSTFLAGS touch only this copy
# (under $CARGO_TARGET_DIR/$target), never the workspace's usual build.
say "building vigil-demo-backend statically ($target)"
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet -p vigil-demo-backend --target "$target"
[ -x "$bin" ] || die "no binary at $bin after the build"

# It must run with nothing else in the image: no ELF interpreter, no libraries.
if ldd "$bin" >/dev/null 2>&1 && ! ldd "$bin" 2>&1 | grep -q 'statically linked'; then
  ldd "$bin" >&2 || true
  die "$bin is dynamically linked"
fi
"$bin" --version >/dev/null || die "$bin does not run"

hash=$(sha256sum "$bin" | cut -d' ' -f1)
have=$("$engine" image inspect --format '{{index .Labels "vigil.binary.sha256"}}' "$image" 2>/dev/null || true)
if [ "$have" = "$hash" ]; then
  say "$image is up to date (binary sha256 ${hash:0:12})"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/root"
cp "$bin" "$work/root/vigil-demo-backend"
# A stripped copy is smaller to import and store; the build keeps its symbols.
if command -v strip >/dev/null 2>&1; then strip "$work/root/vigil-demo-backend" 2>/dev/null || true; fi
tar -C "$work/root" -cf "$work/rootfs.tar" vigil-demo-backend

say "importing $image with $engine"
old=$("$engine" image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
quiet=()
[ "$engine" = podman ] && quiet=(--quiet)
"$engine" import "${quiet[@]}" \
  --change 'ENTRYPOINT ["/vigil-demo-backend"]' \
  --change "LABEL vigil.binary.sha256=$hash" \
  --message "vigil-demo-backend (sha256 $hash)" \
  "$work/rootfs.tar" "$image" >/dev/null
# The image it replaces is now untagged: drop it (if no container uses it).
if [ -n "$old" ] && [ "$old" != "$("$engine" image inspect --format '{{.Id}}' "$image")" ]; then
  "$engine" image rm "$old" >/dev/null 2>&1 || true
fi
say "built $image (binary sha256 ${hash:0:12})"
