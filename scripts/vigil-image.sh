#!/usr/bin/env bash
# Builds the container image of Vigil itself from deploy/Containerfile
# (FROM scratch): the vigil binary, stripped, with the shared libraries it
# links and their loader (as `ldd` lists them), Debian's CA bundle, an
# /etc/passwd naming user 10001 (vigil), /etc/vigil and /data owned by it.
#
#   bash scripts/vigil-image.sh            # from the debug build: the tests'
#   bash scripts/vigil-image.sh --release  # builds and uses a release binary
#
# No base image is pulled: the root filesystem is gathered into a build
# context here and `podman build` (or `docker build`) copies it in. Copying
# the dynamically linked binary with its libraries costs no second build;
# a static build (musl) would add a full rebuild of every dependency. The
# work is skipped when the image carries the hash of the current binary
# (label vigil.binary.sha256).
#
# Environment:
#   CARGO_TARGET_DIR   default $HOME/.cache/vigil-target
#   VIGIL_IMAGE        default localhost/vigil:test
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-target}"
image="${VIGIL_IMAGE:-localhost/vigil:test}"
profile=debug
[ "${1:-}" = --release ] && profile=release

say() { echo "vigil-image: $*" >&2; }
die() { say "$*"; exit 1; }

if command -v podman >/dev/null 2>&1; then
  engine=podman
elif command -v docker >/dev/null 2>&1; then
  engine=docker
else
  die "neither podman nor docker found: run scripts/container-engine.sh first"
fi
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "$ca" ] || die "no CA bundle at $ca (Debian: apt-get install ca-certificates)"

if [ "$profile" = release ]; then
  say "building vigil (release)"
  cargo build --quiet --release -p vigil
else
  cargo build --quiet -p vigil
fi
bin="$CARGO_TARGET_DIR/$profile/vigil"
[ -x "$bin" ] || die "no binary at $bin after the build"

hash=$(sha256sum "$bin" | cut -d' ' -f1)
have=$("$engine" image inspect --format '{{index .Labels "vigil.binary.sha256"}}' "$image" 2>/dev/null || true)
if [ "$have" = "$hash" ]; then
  say "$image is up to date (binary sha256 ${hash:0:12})"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/etc/vigil" "$root/tmp" "$work/data"
strip -o "$root/usr/local/bin/vigil" "$bin"
# Every library the binary links, and the loader, at the paths it names.
ldd "$bin" | awk '/=>/ { print $3 } /^\t\// { print $1 }' | while read -r lib; do
  [ -e "$lib" ] || continue
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0::/:/sbin/nologin\nvigil:x:10001:10001::/data:/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nvigil:x:10001:\n' > "$root/etc/group"
printf 'hosts: files dns\n' > "$root/etc/nsswitch.conf"
chmod 1777 "$root/tmp"
chmod 0700 "$work/data"
cp deploy/Containerfile "$work/Containerfile"

say "building $image from $profile/vigil (sha256 ${hash:0:12})"
"$engine" build --quiet --label "vigil.binary.sha256=$hash" -t "$image" -f "$work/Containerfile" "$work" >/dev/null
"$engine" run --rm "$image" --version >/dev/null || die "$image does not run"
say "$image built"
