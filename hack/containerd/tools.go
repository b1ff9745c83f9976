//go:build tools

// Package tools pins the commands this module builds (hack/build-binaries.sh --node): the
// containerd daemon, its runc shim (containerd finds it on PATH) and ctr (hack/node.sh imports
// images and cleans up with it).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
