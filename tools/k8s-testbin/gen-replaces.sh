#!/usr/bin/env bash
# Regenerates go.mod for a Kubernetes release: k8s.io/kubernetes requires its staging modules at
# v0.0.0 and points them at ./staging, which a consumer cannot follow, so every staging module is
# replaced here by its published v0.MINOR.PATCH tag. The list is read from the release's own go.mod.
#   usage: gen-replaces.sh 1.34.4
set -euo pipefail
cd "$(dirname "$0")"
version=${1:?usage: gen-replaces.sh MAJOR.MINOR.PATCH}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
modfile=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging_version="v0.${version#*.}"
go_line=$(sed -n 's/^go \(.*\)/\1/p' "$modfile")

rm -f go.mod go.sum
go mod init ingot.invalid/k8s-testbin >/dev/null 2>&1
go mod edit -go="$go_line" -godebug=default=go1.24 -require="k8s.io/kubernetes@v$version"
grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$modfile" | awk '{print $1}' | while read -r mod; do
  go mod edit -replace="$mod=$mod@$staging_version"
done
go mod tidy
