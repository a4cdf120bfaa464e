#!/usr/bin/env bash
# Builds the test-fixture plugins of tests/plugins (hostile and well-behaved
# WebAssembly components) and copies them as NAME.wasm into OUT_DIR.
#
#   bash scripts/build-test-plugins.sh [OUT_DIR]     (default: target/test-plugins)
#
# Environment:
#   CARGO_TARGET_DIR   default $HOME/.cache/vigil-test-plugins-target (kept
#                      apart from the host's target dir: different target,
#                      and a warm cache makes reruns take about a second)
# Prints one line per plugin (name, size, path); exits non-zero on any failure.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# OUT_DIR is taken relative to the caller's directory, the default to the repo.
out_dir="${1:-$repo/target/test-plugins}"
mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-test-plugins-target}"
# Cargo hands its own flags to build scripts in this variable; if we are run
# from one, they are meant for the host build, not for these wasm guests.
unset CARGO_ENCODED_RUSTFLAGS

target=wasm32-wasip2
# The component magic: "\0asm", version 0x0d, layer 1 (a core module has 01 00 00 00).
component_magic=0061736d0d000100

# Run from the workspace so a rust-toolchain file there (if any) applies.
cd "$repo/tests/plugins"

command -v cargo >/dev/null || { echo "cargo is needed: install Rust (https://rustup.rs)" >&2; exit 1; }
# The wasm32-wasip2 standard library is a separate download; fetch it once.
if [ ! -d "$(rustc --print sysroot)/lib/rustlib/$target" ]; then
    command -v rustup >/dev/null || {
        echo "the $target target is missing and rustup is not available to add it" >&2
        exit 1
    }
    rustup target add "$target"
fi

# The lock file is committed: fixtures build from the same crates everywhere.
cargo build --release --locked --target "$target" --workspace --quiet

# The members' package names (each crate's directory carries the same name).
names=()
for manifest in */Cargo.toml; do
    names+=("$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)")
done

for name in "${names[@]}"; do
    # Cargo names a cdylib after the crate, with underscores.
    built="$CARGO_TARGET_DIR/$target/release/${name//-/_}.wasm"
    [ -f "$built" ] || { echo "$name: $built was not built" >&2; exit 1; }
    # A core module here would mean the toolchain skipped the component step.
    magic=$(head -c 8 "$built" | od -An -tx1 | tr -d ' \n')
    if [ "$magic" != "$component_magic" ]; then
        echo "$name: $built is not a component (starts with $magic)" >&2
        exit 1
    fi
    # Copy then rename, so a concurrent reader never sees a half-written file.
    tmp="$out_dir/.$name.wasm.$$"
    cp "$built" "$tmp"
    mv -f "$tmp" "$out_dir/$name.wasm"
    printf '%-18s %9d bytes  %s\n' "$name" "$(wc -c <"$out_dir/$name.wasm")" "$out_dir/$name.wasm"
done

# Hand-written components no compiler makes (tests/plugins/memories): WAT
# text assembled with the `wasmtime` Python package of the test venv
# (tests/e2e/requirements.txt). NAME MEMORIES PAGES per variant.
python="${VIGIL_WAT_PYTHON:-$HOME/.cache/vigil/venv/bin/python}"
[ -x "$python" ] || python=python3
"$python" -c 'import wasmtime' 2>/dev/null || {
    echo "assembling tests/plugins/memories needs the wasmtime Python package: $python -m pip install -r $repo/tests/e2e/requirements.txt" >&2
    exit 1
}
while read -r name memories pages; do
    tmp="$out_dir/.$name.wasm.$$"
    "$python" memories/assemble.py memories/memories.wat.in "$memories" "$pages" "$tmp"
    mv -f "$tmp" "$out_dir/$name.wasm"
    printf '%-18s %9d bytes  %s\n' "$name" "$(wc -c <"$out_dir/$name.wasm")" "$out_dir/$name.wasm"
done <<'VARIANTS'
two-memories 2 192
many-memories 4 192
VARIANTS
