//go:build tools

// Package tools pins the commands this module builds: prometheus (the server, its HTTP API;
// the web UI's assets are not built in) and promtool (hack/build-binaries.sh --monitoring).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
