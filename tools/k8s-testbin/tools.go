//go:build tools

// Package tools pins the main packages of the control plane that ingot's tests and demo run, so
// that `go mod tidy` records every module they need in go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
