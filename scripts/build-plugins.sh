#!/usr/bin/env bash
# Builds the first-party WebAssembly plugins (plugins/) and copies each
# component to OUT_DIR as NAME.wasm (package name, hyphens kept).
#
#   bash scripts/build-plugins.sh [OUT_DIR]      # default OUT_DIR: target/plugins
#
# Environment:
#   CARGO_TARGET_DIR         default $HOME/.cache/vigil-plugins-target (kept
#                            outside the clone so rebuilds are incremental and
#                            a fresh clone does not start from scratch)
#   VIGIL_PLUGINS_TOOLCHAIN  `rustup` (default) or `debian`: see below.
#
# Toolchain: `cargo build --target wasm32-wasip2` needs that target's standard
# library; with rustup we add it when missing (a download). Where rustup
# cannot fetch it, VIGIL_PLUGINS_TOOLCHAIN=debian (also chosen automatically
# when `rustup target add` fails) uses Debian's Rust packages instead and
# rebuilds std for the target from source (-Zbuild-std), installing the
# packages with apt-get when running as root.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out_dir=${1:-"$repo/target/plugins"}
target=wasm32-wasip2
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/vigil-plugins-target}"
toolchain=${VIGIL_PLUGINS_TOOLCHAIN:-rustup}
manifest="$repo/plugins/Cargo.toml"

# The component-model binary starts with this preamble (magic, then version
# 0x0d and layer 1); a core wasm module would have `01 00 00 00` instead, which
# means the linker did not componentize and Vigil would refuse the file.
component_magic="0061736d0d000100"

debian_packages=(rustc-web cargo-web rust-web-src lld-22 wasi-libc)

ensure_rustup_target() {
    command -v rustup >/dev/null 2>&1 || return 1
    if rustup target list --installed 2>/dev/null | grep -qx "$target"; then
        return 0
    fi
    echo "build-plugins: adding the $target target with rustup" >&2
    rustup target add "$target"
}

ensure_debian_toolchain() {
    local missing=()
    for p in "${debian_packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        if [[ $(id -u) != 0 ]]; then
            echo "build-plugins: install these Debian packages first: ${missing[*]}" >&2
            return 1
        fi
        echo "build-plugins: installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    fi
}

build() {
    if [[ $toolchain == rustup ]]; then
        cargo build --release --target "$target" --manifest-path "$manifest"
    else
        # Debian's cargo would otherwise pick rustup's rustc from PATH; the
        # packaged std source is unstable-only, hence RUSTC_BOOTSTRAP; lld-22
        # is what Debian's rust-lld link points at; wasi-libc provides the
        # libc the rebuilt std links against.
        RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1 \
            CARGO_TARGET_WASM32_WASIP2_RUSTFLAGS=-L/usr/lib/wasm32-wasi \
            /usr/bin/cargo build --release --target "$target" --manifest-path "$manifest" \
            -Zbuild-std=std,panic_abort
    fi
}

if [[ $toolchain == rustup ]] && ! ensure_rustup_target; then
    echo "build-plugins: no rustup target $target; falling back to Debian's Rust" >&2
    toolchain=debian
fi
if [[ $toolchain == debian ]]; then
    ensure_debian_toolchain
elif [[ $toolchain != rustup ]]; then
    echo "build-plugins: VIGIL_PLUGINS_TOOLCHAIN must be rustup or debian, not $toolchain" >&2
    exit 2
fi

start=$SECONDS
build
echo "build-plugins: built with $toolchain in $((SECONDS - start))s" >&2

mkdir -p "$out_dir"
built=0
# Every plugin is a workspace member directory with a Cargo.toml; cargo names
# the artifact after the package with hyphens turned into underscores.
for cargo_toml in "$repo"/plugins/*/Cargo.toml; do
    name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$cargo_toml" | head -n1)
    artifact="$CARGO_TARGET_DIR/$target/release/${name//-/_}.wasm"
    if [[ ! -f $artifact ]]; then
        echo "build-plugins: $name: no artifact at $artifact" >&2
        exit 1
    fi
    magic=$(head -c 8 "$artifact" | od -An -tx1 | tr -d ' \n')
    if [[ $magic != "$component_magic" ]]; then
        echo "build-plugins: $name: $artifact is not a component (starts with $magic)" >&2
        exit 1
    fi
    cp "$artifact" "$out_dir/$name.wasm"
    echo "build-plugins: $out_dir/$name.wasm ($(wc -c <"$artifact") bytes)"
    built=$((built + 1))
done

if ((built == 0)); then
    echo "build-plugins: no plugin found under $repo/plugins" >&2
    exit 1
fi
