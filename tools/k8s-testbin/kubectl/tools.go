//go:build tools

// Package tools pins kubectl from the same k8s.io/kubernetes release as the control plane in the
// parent directory. It is a module of its own so that its go.sum, which keys kubectl's cache, is
// apart from the one that keys the server binaries.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
