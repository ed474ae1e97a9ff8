//go:build !linux

package audit

import "os"

// openFile opens path for appending, creating it 0600 if absent.
func openFile(path string) (f *os.File, created bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f, true, nil
	}
	if !os.IsExist(err) {
		return nil, false, err
	}
	f, err = os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	return f, false, err
}

// lockFile does nothing here: only Linux builds lock the log.
func lockFile(*os.File) error { return nil }

// syncDir does nothing here.
func syncDir(string) error { return nil }
