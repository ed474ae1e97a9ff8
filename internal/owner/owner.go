// Package owner gives the files a root process creates on a user's behalf
// to that user: `sudo lattice-lab run --report DIR` leaves DIR to the user
// who typed it, not to root.
package owner

import (
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Owner is the user and group that files and directories created through it
// are given to. It only ever changes what it created itself: an existing
// file keeps its owner, and a symbolic link is never followed to change its
// target. The zero Owner gives nothing away.
type Owner struct {
	uid, gid int
	set      bool
	log      *slog.Logger
}

// Sudo is the user who ran this process through sudo: SUDO_UID:SUDO_GID
// when the process runs as root (euid 0) and both name a numeric id.
// Otherwise, and when they name root, it is the zero Owner. A malformed
// SUDO_UID or SUDO_GID is logged at debug level and ignored. log, if nil,
// discards; it is also where Owner reports a failed chown.
func Sudo(log *slog.Logger) Owner {
	return fromEnv(os.Getenv, os.Geteuid(), log)
}

func fromEnv(getenv func(string) string, euid int, log *slog.Logger) Owner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "owner")
	if euid != 0 {
		return Owner{}
	}
	u, g := getenv("SUDO_UID"), getenv("SUDO_GID")
	if u == "" && g == "" {
		return Owner{}
	}
	uid, uerr := parseID(u)
	gid, gerr := parseID(g)
	if err := errors.Join(uerr, gerr); err != nil {
		log.Debug("files stay root's: SUDO_UID or SUDO_GID is not a user and group id", "SUDO_UID", u, "SUDO_GID", g, "err", err)
		return Owner{}
	}
	if uid == 0 && gid == 0 {
		return Owner{}
	}
	return Owner{uid: uid, gid: gid, set: true, log: log}
}

// parseID parses a uid or gid as sudo writes it: decimal, 32 bits, and not
// 4294967295, which chown(2) reads as "leave unchanged".
func parseID(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, err
	}
	if n == math.MaxUint32 {
		return 0, strconv.ErrRange
	}
	return int(n), nil
}

// Create is os.Create, giving the file to o when Create made it.
func (o Owner) Create(name string) (*os.File, error) {
	return o.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// OpenFile is os.OpenFile, giving the file to o when OpenFile made it: it
// creates with O_EXCL first and changes the owner of the descriptor it
// got, so neither an existing file nor a symbolic link's target changes
// hands. A failed chown is logged: the file is there, only its owner is
// root.
func (o Owner) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	if !o.set || flag&os.O_CREATE == 0 {
		return os.OpenFile(name, flag, perm) //nolint:gosec // the caller's path and mode
	}
	f, err := os.OpenFile(name, flag|os.O_EXCL, perm) //nolint:gosec // the caller's path and mode
	switch {
	case err == nil:
		if cerr := f.Chown(o.uid, o.gid); cerr != nil {
			o.chownFailed(name, cerr)
		}
		return f, nil
	case flag&os.O_EXCL == 0 && errors.Is(err, fs.ErrExist):
		// There already, or a symbolic link: opened as os.OpenFile would,
		// and not ours to give away.
		return os.OpenFile(name, flag, perm) //nolint:gosec // the caller's path and mode
	}
	return nil, err
}

// MkdirAll is os.MkdirAll, giving each directory it creates to o. It
// changes no directory that existed, nor what a symbolic link on the path
// points to.
func (o Owner) MkdirAll(path string, perm os.FileMode) error {
	if !o.set {
		return os.MkdirAll(path, perm)
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: path, Err: syscall.ENOTDIR} // as os.MkdirAll says it
	}
	if parent := filepath.Dir(path); parent != path && parent != "." {
		if err := o.MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, perm); err != nil {
		// Made by someone else meanwhile (or path ends in "/.."): fine
		// when it is a directory, and not ours to give away.
		if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
			return nil
		}
		return err
	}
	if err := os.Lchown(path, o.uid, o.gid); err != nil {
		o.chownFailed(path, err)
	}
	return nil
}

func (o Owner) chownFailed(path string, err error) {
	o.log.Warn("created for the user who ran sudo, but left to root", "path", path, "uid", o.uid, "gid", o.gid, "err", err)
}
