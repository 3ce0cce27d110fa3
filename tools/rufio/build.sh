#!/usr/bin/env bash
# Builds upstream Tinkerbell Rufio's manager (`rufio`) from its Go module at the version pinned in
# <version>/go.mod (a `tool` directive; go.sum committed, -mod=readonly) into a cache outside the
# repository, keyed by the version and go.sum. Prints the path of the binary. A cache hit returns
# at once. Usage: build.sh [v0.6.5|v0.3.2]   (default v0.6.5)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=${1:-v0.6.5}
dir="$here/$version"
if [[ ! -f "$dir/go.mod" ]]; then
  echo "no pinned module for rufio $version (have: $(cd "$here" && ls -d v*/ | tr -d / | tr '\n' ' '))" >&2
  exit 2
fi
cd "$dir"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
pinned=$(awk '$1 == "github.com/tinkerbell/rufio" {print $2; exit}' go.mod)
sum_key=$(sha256sum go.sum | cut -c1-12)
cache_root=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
out="$cache_root/rufio/$pinned-$sum_key"
if [[ -x "$out/rufio" ]]; then
  echo "$out/rufio"
  exit 0
fi
mkdir -p "$out.partial"
start=$SECONDS
echo "building rufio $pinned into $out" >&2
go build -trimpath -ldflags "-s -w" -o "$out.partial/rufio" github.com/tinkerbell/rufio
echo "built rufio $pinned in $((SECONDS - start)) s" >&2
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out/rufio"
