// pause: the node's sandbox ("pause") image process. Sleeps until SIGTERM/SIGINT, then exits 0,
// and reaps children (it is PID 1 of the pod's shared PID namespace when one is used).
// Built static (CGO_ENABLED=0) by hack/images.sh into an image FROM scratch.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			for {
				var status syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
