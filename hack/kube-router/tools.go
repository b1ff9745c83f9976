//go:build tools

// Package tools pins the command this module builds.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
