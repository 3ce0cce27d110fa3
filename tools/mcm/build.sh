#!/usr/bin/env bash
# Builds upstream Gardener machine-controller-manager (the MachineSet / MachineDeployment
# controllers) from the Go module pinned in go.mod into a cache outside the repository, keyed by
# its version and go.sum. Prints the directory that holds the binary. A cache hit returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

version=$(awk '$1 == "github.com/gardener/machine-controller-manager" {print $2; exit}' go.mod)
[[ -n $version ]] || version=$(awk '$1 == "require" && $2 == "github.com/gardener/machine-controller-manager" {print $3; exit}' go.mod)
sum_key=$(sha256sum go.sum | cut -c1-12)
cache_root=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
out="$cache_root/mcm/$version-$sum_key"

if [[ -x "$out/machine-controller-manager" ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$out.partial"
echo "building machine-controller-manager $version into $out; a cold build takes a few minutes" >&2
start=$SECONDS
go build -trimpath -ldflags "-s -w" -o "$out.partial/machine-controller-manager" \
  github.com/gardener/machine-controller-manager/cmd/machine-controller-manager
echo "built machine-controller-manager in $((SECONDS - start)) s" >&2
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out"
