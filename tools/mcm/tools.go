//go:build tools

// Package tools pins upstream Gardener machine-controller-manager (the MachineSet and
// MachineDeployment controllers) that ingot's Gardener machine controller runs beside, so that
// `go mod tidy` records every module it needs in go.sum.
package tools

import (
	_ "github.com/gardener/machine-controller-manager/cmd/machine-controller-manager"
)
