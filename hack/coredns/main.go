// Command coredns is CoreDNS's own main (its coredns.go) with only the plugins the node's
// Corefile (hack/node/files/Corefile) uses: bind, errors, kubernetes and cache. Each plugin
// registers itself when imported; CoreDNS's standard set (core/plugin) would also compile the
// cloud DNS providers, etcd, tracing and the rest, which tripled the build on a fresh machine.
// A Corefile that names another plugin fails at CoreDNS's start ("unknown directive").
// Built from the Go module proxy at the version go.mod pins (hack/build-binaries.sh --node).
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func main() {
	coremain.Run()
}
