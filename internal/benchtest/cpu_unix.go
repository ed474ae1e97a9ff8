//go:build unix

package benchtest

import (
	"fmt"
	"syscall"
	"time"
)

// ProcessCPU returns the user and system CPU time this process has used.
func ProcessCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("benchtest: getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
