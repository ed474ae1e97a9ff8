package bpf

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		what        string
		err         error
		unavailable bool
	}{
		{"not supported", "load program", ebpf.ErrNotSupported, true},
		{"not root", "create rules map", unix.EPERM, true},
		{"no TCX", "attach", unix.EINVAL, true},
		{"other", "load program", unix.E2BIG, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := unavailable(tc.what, tc.err)
			assert.ErrorIs(t, err, tc.err)
			assert.Equal(t, tc.unavailable, errors.Is(err, ErrUnavailable), "%v", err)
		})
	}
}
