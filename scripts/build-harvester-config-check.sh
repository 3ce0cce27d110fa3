#!/usr/bin/env bash
# Builds tools/harvester-config-check (harvester-installer's config loader as a command) into
# the cache, keyed by go.mod and go.sum, and prints the binary's path. A cache hit returns at
# once. Exits non-zero, with the Go tool's error, when the module cannot be fetched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/tools/harvester-config-check"
cache_root=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
key=$(for f in go.mod go.sum main.go; do [[ -f "$src/$f" ]] && cat "$src/$f"; done | sha256sum | cut -c1-12)
out="$cache_root/harvester-config-check/$key/harvester-config-check"
if [[ -x "$out" ]]; then
  echo "$out"
  exit 0
fi
mkdir -p "$(dirname "$out")"
cd "$src"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
echo "building harvester-config-check into $out" >&2
go build -trimpath -o "$out.partial" . >&2
mv "$out.partial" "$out"
echo "$out"
