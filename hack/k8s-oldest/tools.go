//go:build tools

// Package tools pins the commands this module builds: the control plane at the OLDEST
// supported Kubernetes (hack/build-binaries.sh --oldest, KUBE_OLDEST_VERSION in
// hack/versions.env). kubectl, the node's binaries and kwok stay the newest ones (hack/k8s).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
