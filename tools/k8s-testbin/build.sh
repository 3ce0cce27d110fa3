#!/usr/bin/env bash
# Builds the Kubernetes binaries ingot's tests and demo run from the Go modules pinned here (module
# graph read-only, go.sum checked) into a cache outside the repository. A cache hit returns at once.
#   build.sh           etcd, kube-apiserver and kube-controller-manager (this directory's module),
#                      keyed by the Kubernetes and etcd versions and go.sum; prints their directory.
#   build.sh kubectl   kubectl from the same k8s.io/kubernetes release (the module in kubectl/),
#                      keyed by that version and kubectl/go.sum; prints the binary's path.
# The two have separate modules and keys so that each is rebuilt only when its own inputs change.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
what=${1:-control-plane}

pinned_k8s() { awk '($1 == "require" && $2 == "k8s.io/kubernetes") {print $3; exit} $1 == "k8s.io/kubernetes" {print $2; exit}' "$1"; }
k8s_version=$(pinned_k8s go.mod)
cache_root=${INGOT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ingot}
minor=${k8s_version#v1.}; minor=${minor%%.*}
# What the Kubernetes release build stamps, so that `version` reports this release.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # output-directory name package ldflags
  local start=$SECONDS
  go build -trimpath -ldflags "$4" -o "$1/$2" "$3"
  echo "built $2 in $((SECONDS - start)) s" >&2
}

case $what in
control-plane)
  etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' go.mod)
  sum_key=$(sha256sum go.sum | cut -c1-12)
  out="$cache_root/k8s-testbin/$k8s_version-etcd$etcd_version-$sum_key"
  if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -x "$out/kube-controller-manager" ]]; then
    echo "$out"
    exit 0
  fi
  mkdir -p "$out.partial"
  echo "building the control plane ($k8s_version, etcd $etcd_version) into $out; a cold build takes a while" >&2
  build "$out.partial" etcd go.etcd.io/etcd/server/v3 "-s -w"
  build "$out.partial" kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
  build "$out.partial" kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags"
  rm -rf "$out"
  mv "$out.partial" "$out"
  echo "$out"
  ;;
kubectl)
  cd kubectl
  kubectl_version=$(pinned_k8s go.mod)
  if [[ $kubectl_version != "$k8s_version" ]]; then
    echo "kubectl/go.mod pins k8s.io/kubernetes $kubectl_version but go.mod pins $k8s_version; run gen-replaces.sh" >&2
    exit 1
  fi
  sum_key=$(sha256sum go.sum | cut -c1-12)
  out="$cache_root/k8s-testbin/kubectl-$k8s_version-$sum_key"
  if [[ -x "$out/kubectl" ]]; then
    echo "$out/kubectl"
    exit 0
  fi
  mkdir -p "$out.partial"
  echo "building kubectl $k8s_version into $out; a cold build takes a few minutes" >&2
  build "$out.partial" kubectl k8s.io/kubernetes/cmd/kubectl "$ldflags"
  rm -rf "$out"
  mv "$out.partial" "$out"
  echo "$out/kubectl"
  ;;
*)
  echo "usage: build.sh [kubectl]" >&2
  exit 2
  ;;
esac
