#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kube-controller-manager from the Go modules pinned in go.mod into
# a cache outside the repository, keyed by the Kubernetes and etcd versions and go.sum. Prints the
# directory that holds the three binaries. A cache hit returns at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' go.mod)
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' go.mod)
sum_key=$(sha256sum go.sum | cut -c1-12)
cache_root=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
out="$cache_root/k8s-testbin/$k8s_version-etcd$etcd_version-$sum_key"

if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -x "$out/kube-controller-manager" ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$out.partial"
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # name package ldflags
  local start=$SECONDS
  go build -trimpath -ldflags "$3" -o "$out.partial/$1" "$2"
  echo "built $1 in $((SECONDS - start)) s" >&2
}
echo "building the control plane ($k8s_version, etcd $etcd_version) into $out; a cold build takes a while" >&2
build etcd go.etcd.io/etcd/server/v3 "-s -w"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags"
rm -rf "$out"
mv "$out.partial" "$out"
echo "$out"
