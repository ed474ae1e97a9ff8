package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// openFile opens path for appending, creating it 0600 if absent, and never
// through a symbolic link: an attacker who can plant one must not redirect
// the log.
func openFile(path string) (f *os.File, created bool, err error) {
	const flags = os.O_RDWR | os.O_APPEND | syscall.O_NOFOLLOW
	f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, flags, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, false, fmt.Errorf("%s is a symbolic link; refusing to follow it", path)
	}
	return f, false, err
}

// lockFile takes an exclusive flock on f, failing at once if another open
// file description holds one. The lock goes with f's close.
func lockFile(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := sc.Control(func(fd uintptr) {
		lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
	}); err != nil {
		return err
	}
	if errors.Is(lerr, syscall.EWOULDBLOCK) {
		return ErrLocked
	}
	return lerr
}

// syncDir fsyncs a directory, making a new entry in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
