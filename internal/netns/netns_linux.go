// Package netns runs code inside a Linux network namespace, so that the
// sockets and devices it creates live there.
package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a fresh OS thread that has joined the network namespace
// at path (e.g. /run/netns/pod) and returns fn's error. Sockets and TUN
// devices fn creates stay in that namespace when other threads use them.
// `ip netns exec` cannot do this for a process's own goroutines.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: when the goroutine ends, Go retires the thread
		// rather than reuse it in the wrong namespace.
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			errc <- fmt.Errorf("netns: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: setns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
