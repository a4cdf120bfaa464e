#!/usr/bin/env bash
# Installs the node modules of the OAuth end-to-end harness (oidc-provider, pinned
# by package-lock.json) into a cache outside the clone, where provider.mjs finds
# them (VIGIL_OAUTH_MODULES, default: the cache's node_modules).
#
# Idempotent: reinstalls only when package-lock.json differs from the copy kept
# beside the installed modules. Silent when nothing changed, one line when it
# installed; on failure, npm's output and a non-zero exit.
#
# Usage: bash tests/e2e/oauth/setup.sh   (env: VIGIL_OAUTH_CACHE, default
# $HOME/.cache/vigil/oauth-provider)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${VIGIL_OAUTH_CACHE:-$HOME/.cache/vigil/oauth-provider}

for tool in node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "tests/e2e/oauth/setup.sh: '$tool' not found: the OAuth tests run oidc-provider on Node.js >= 20 with npm; install them (Debian: apt-get install nodejs npm)" >&2
        exit 1
    fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
    echo "tests/e2e/oauth/setup.sh: Node.js $(node --version) is too old: oidc-provider 9 needs Node.js >= 20" >&2
    exit 1
fi

if cmp -s "$here/package-lock.json" "$cache/package-lock.json" \
    && [ -f "$cache/node_modules/oidc-provider/package.json" ]; then
    exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.install.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$work/"
if ! (cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
    cat "$work/npm.log" >&2
    echo "tests/e2e/oauth/setup.sh: npm ci failed (output above)" >&2
    exit 1
fi

# Swap the new modules in, then record the lock they came from (last, so an
# interrupted run is redone next time).
rm -f "$cache/package-lock.json"
rm -rf "$cache/node_modules"
mv "$work/node_modules" "$cache/node_modules"
cp "$here/package.json" "$cache/package.json"
cp "$here/package-lock.json" "$cache/package-lock.json"
version=$(node -p 'require(process.argv[1]).version' "$cache/node_modules/oidc-provider/package.json")
echo "oauth harness: installed oidc-provider $version into $cache/node_modules"
