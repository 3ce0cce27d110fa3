#!/usr/bin/env bash
# Regenerates go.mod and go.sum for a Kubernetes release, for both modules here: this directory
# (etcd, kube-apiserver, kube-controller-manager) and kubectl/ (kubectl, kept apart so that adding
# or updating it leaves the server binaries' go.sum, and so their cache, alone). k8s.io/kubernetes
# requires its staging modules at v0.0.0 and points them at ./staging, which a consumer cannot
# follow, so every staging module is replaced here by its published v0.MINOR.PATCH tag. The list
# is read from the release's own go.mod.
#   usage: gen-replaces.sh 1.34.4
set -euo pipefail
cd "$(dirname "$0")"
version=${1:?usage: gen-replaces.sh MAJOR.MINOR.PATCH}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
modfile=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
staging_version="v0.${version#*.}"
go_line=$(sed -n 's/^go \(.*\)/\1/p' "$modfile")
staging=$(grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$modfile" | awk '{print $1}')

generate() { # directory module-path; the directory's tools.go names the packages to build
  (
    cd "$1"
    rm -f go.mod go.sum
    go mod init "$2" >/dev/null 2>&1
    go mod edit -go="$go_line" -godebug=default=go1.24 -require="k8s.io/kubernetes@v$version"
    for mod in $staging; do
      go mod edit -replace="$mod=$mod@$staging_version"
    done
    go mod tidy
  )
}
# kubectl/ first: until it has a go.mod of its own, its tools.go would count as part of this module.
generate kubectl ingot.invalid/k8s-testbin/kubectl
generate . ingot.invalid/k8s-testbin
