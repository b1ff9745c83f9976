//go:build tools

// Package tools pins the command this module builds: prometheus-adapter, the custom metrics API
// server (custom.metrics.k8s.io) that serves the gateways' turns in flight to the HPA controller
// (hack/build-binaries.sh --autoscaling; hack/verify-autoscaling.py).
package tools

import (
	_ "sigs.k8s.io/prometheus-adapter/cmd/adapter"
)
