#!/usr/bin/env bash
# Prints the path of helm-controller's HelmChart CRD (helm.cattle.io_helmcharts.yaml) as the Go
# module pinned in go.mod ships it (go.sum checked), from the Go module cache outside the
# repository: downloaded on first use, at once afterwards. The module generates the CRD as YAML,
# so nothing is built.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=readonly
pinned=$(awk '$1 == "require" && $2 == "github.com/k3s-io/helm-controller" {print $3; exit}' go.mod)
dir=$(go mod download -json "github.com/k3s-io/helm-controller" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
crd="$dir/pkg/crds/yaml/generated/helm.cattle.io_helmcharts.yaml"
if [[ -z $dir || ! -f $crd ]]; then
  echo "helm-controller $pinned: no HelmChart CRD at pkg/crds/yaml/generated in its module" >&2
  exit 1
fi
echo "$crd"
