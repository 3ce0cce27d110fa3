#!/usr/bin/env bash
# Builds the helm command from the Helm release pinned in go.mod (module graph read-only, go.sum
# checked) into a cache outside the repository, keyed by its version and go.sum. Prints the
# directory that holds the binary. A cache hit returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly

version=$(awk '($1 == "require" && $2 == "helm.sh/helm/v3") {print $3; exit} $1 == "helm.sh/helm/v3" {print $2; exit}' go.mod)
sum_key=$(sha256sum go.sum | cut -c1-12)
cache_root=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
out="$cache_root/helm/$version-$sum_key"

if [[ -x "$out/helm" ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$out.partial"
echo "building helm $version into $out; a cold build takes a few minutes" >&2
start=$SECONDS
go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$version" \
  -o "$out.partial/helm" helm.sh/helm/v3/cmd/helm
echo "built helm in $((SECONDS - start)) s" >&2
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out"
