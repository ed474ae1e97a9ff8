//go:build !linux

package sandbox

import (
	"context"
	"errors"
)

var errNoNamespaces = errors.New("sandbox: namespace isolation needs Linux; pass --isolation proxy")

func (d *PodDriver) probeIsolation(context.Context) error { return errNoNamespaces }

func (d *PodDriver) runIsolated(context.Context, []string, Stdio) (int, error) {
	return -1, errNoNamespaces
}

type spareSlot struct{}

func (d *PodDriver) startSpare() {}

func (d *PodDriver) closeSpare() { d.spareCancel() }
