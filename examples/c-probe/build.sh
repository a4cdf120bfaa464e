#!/usr/bin/env bash
# Builds examples/c-probe/probe.c into a Vigil probe component.
#
#   bash examples/c-probe/build.sh [OUT_DIR]
#
# Writes OUT_DIR/c-probe.wasm (default OUT_DIR: <repo>/target/examples).
#
# Steps: C bindings for world vigil:plugin/probe from <repo>/wit; clang
# compiles probe.c + the bindings to a core wasm module (wasi-libc, reactor);
# the module is wrapped into a component, with the WASI preview1 adapter for
# wasi-libc's imports. Bindings and componentizing are done by a small Rust
# helper (tool/, crates wit-bindgen-c and wit-component) instead of the
# wit-bindgen and wasm-tools CLIs, which take ~10 minutes to cargo-install.
#
# Needs: Debian 12 with cargo (rustup); as root, missing Debian packages are
# installed with apt-get.
# Env:   CARGO_TARGET_DIR  where the helper is built (default
#                          $HOME/.cache/vigil-c-probe-target, outside the
#                          clone so a fresh clone reuses it)
#        C_PROBE_BUILD_DIR generated bindings and the core module (default
#                          <repo>/target/c-probe-build, git-ignored)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out_dir="${1:-$repo/target/examples}"
build_dir="${C_PROBE_BUILD_DIR:-$repo/target/c-probe-build}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-c-probe-target}"
tool="$CARGO_TARGET_DIR/release/vigil-c-probe-tool"

# The component-model binary starts with this preamble (magic, version 0x0d,
# layer 1); a core module has `01 00 00 00` instead and Vigil would refuse it.
component_magic="0061736d0d000100"

log() { echo "c-probe: $*" >&2; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }

# clang-19 is the newest clang in Debian 12; lld-19 provides wasm-ld; the
# wasm32 compiler-rt builtins and wasi-libc (headers, libc.a, crt1-reactor.o)
# are what clang needs to link for wasm32-wasi.
ensure_packages() {
    local missing=() p
    # The tools by their commands; the libraries, which have none, by dpkg.
    command -v clang-19 >/dev/null || missing+=(clang-19)
    command -v wasm-ld-19 >/dev/null || missing+=(lld-19)
    for p in libclang-rt-19-dev-wasm32 wasi-libc; do
        installed "$p" || missing+=("$p")
    done
    ((${#missing[@]})) || return 0
    if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null; then
        log "install these Debian packages first: ${missing[*]}"
        exit 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start=$SECONDS
ensure_packages
command -v cargo >/dev/null || { log "cargo not found (install Rust with rustup)"; exit 1; }

# The helper: cargo makes this a no-op when it is up to date. --locked keeps
# the crate versions the example was verified with (tool/Cargo.lock).
log "building the helper in $CARGO_TARGET_DIR"
cargo build --quiet --release --locked --manifest-path "$here/tool/Cargo.toml"

rm -rf "$build_dir"
mkdir -p "$build_dir" "$out_dir"
out_dir="$(cd "$out_dir" && pwd)"

# probe.h, probe.c (the glue) and probe_component_type.o (the world's type,
# kept in a custom section of the module for the componentizer).
"$tool" bindgen "$repo/wit" probe "$build_dir/bindings" >/dev/null

# The generated glue is compiled without warnings: they are its business.
cflags=(--target=wasm32-wasi -O2)
clang-19 "${cflags[@]}" -w -c "$build_dir/bindings/probe.c" -o "$build_dir/bindings.o"
clang-19 "${cflags[@]}" -std=c11 -Wall -Wextra -Werror -I "$build_dir/bindings" \
    -c "$here/probe.c" -o "$build_dir/probe.o"
# -mexec-model=reactor: a library with exports and no main (crt1-reactor.o's
# _initialize runs libc's constructors before the first call). A link-time
# option only: clang-19 rejects it when just compiling (-c). --strip-debug:
# Debian's libc.a carries DWARF, two thirds of the module otherwise (the
# component-type custom section is not debug info and stays).
clang-19 "${cflags[@]}" -mexec-model=reactor -Wl,--strip-debug "$build_dir/probe.o" "$build_dir/bindings.o" \
    "$build_dir/bindings/probe_component_type.o" -o "$build_dir/c-probe.core.wasm"

"$tool" componentize "$build_dir/c-probe.core.wasm" "$build_dir/c-probe.wasm" >/dev/null

magic=$(head -c 8 "$build_dir/c-probe.wasm" | od -An -tx1 | tr -d ' \n')
if [[ $magic != "$component_magic" ]]; then
    log "$build_dir/c-probe.wasm is not a component (starts with $magic)"
    exit 1
fi
cp "$build_dir/c-probe.wasm" "$out_dir/c-probe.wasm"
log "built in $((SECONDS - start))s"
echo "$out_dir/c-probe.wasm ($(wc -c <"$out_dir/c-probe.wasm") bytes)"
