// Command coredns is CoreDNS's own main (its coredns.go), built from the Go module proxy at
// the version go.mod pins (hack/build-binaries.sh --node: cluster DNS for a real node).
// core/plugin registers CoreDNS's standard plugin set (kubernetes, errors, cache, health,
// ready, loop, forward, ...), exactly as the upstream binary does.
package main

import (
	_ "github.com/coredns/coredns/core/plugin" // the standard plugins
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
