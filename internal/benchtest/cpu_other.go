//go:build !unix

package benchtest

import (
	"errors"
	"fmt"
	"time"
)

// ProcessCPU returns the user and system CPU time this process has used.
// It is not measured here: it returns an error wrapping
// errors.ErrUnsupported.
func ProcessCPU() (time.Duration, error) {
	return 0, fmt.Errorf("benchtest: process CPU time: %w", errors.ErrUnsupported)
}
