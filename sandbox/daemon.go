package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
)

// Daemon is a started sandbox serving its control socket: what `lattice
// sandbox start` keeps up, and what lattice-lab runs for each gvisor
// sandbox in its pod's namespace.
type Daemon struct {
	driver IsolationDriver
	socket string
	stop   func() // stops serving the socket; nil without one

	closeOnce sync.Once
	closeErr  error
}

// StartDaemon builds mode's driver from cfg, starts it (registration and
// the network; in gvisor mode phase 1) and serves the control socket
// (SocketName in cfg.StateDir; none with an ephemeral "mem:" StateDir).
// On error nothing is left running.
func StartDaemon(ctx context.Context, mode Mode, cfg DriverConfig) (*Daemon, error) {
	d, err := New(mode, cfg)
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	dm := &Daemon{driver: d}
	if cfg.StateDir != "" && cfg.StateDir != "mem:" {
		dm.socket = filepath.Join(cfg.StateDir, SocketName)
		if dm.stop, err = ServeAPI(dm.socket, d); err != nil {
			return nil, errors.Join(err, d.Close())
		}
	}
	return dm, nil
}

// Driver is the running sandbox.
func (dm *Daemon) Driver() IsolationDriver { return dm.driver }

// Socket is the control socket's path, "" when there is none.
func (dm *Daemon) Socket() string { return dm.socket }

// Close stops serving the socket, then tears the sandbox down; it is
// idempotent.
func (dm *Daemon) Close() error {
	dm.closeOnce.Do(func() {
		if dm.stop != nil {
			dm.stop()
		}
		dm.closeErr = dm.driver.Close()
	})
	return dm.closeErr
}
