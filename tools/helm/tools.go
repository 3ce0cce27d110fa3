//go:build tools

// Package tools pins the Helm release whose command tools/helm/build.sh builds.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
