package podinit

import (
	"errors"
	"fmt"
	"os"
	"path"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is the second wall around the state dir: the init's mounts
// hide it from the agent, and Landlock denies the agent every file under
// it by path, so that a mount the agent could not have made (a bind of an
// ancestor elsewhere, a tmpfs gone) still leaves the files out of reach.
// A Landlock domain also refuses mount, umount and pivot_root to its
// processes, and (ABI 6, Linux 6.12) signals to and abstract Unix sockets
// of processes outside it.
//
// Landlock only allows: the files it handles are denied except beneath a
// rule. The rules are the entries of each directory above a hidden path,
// except the entry on the way to it; so the agent keeps everything else,
// but cannot create, remove or rename entries directly in those
// directories (/, /var, /var/lib, ... for /var/lib/lattice/state). Reading
// a directory is not handled: listing / must keep working, and the state
// dir's file names are no secret.

// landlockFileRights are the rights a rule on a file (not a directory)
// may carry.
const landlockFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
	unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

// landlockRuleset is struct landlock_ruleset_attr up to ABI 6; the kernel
// takes a shorter struct from an older caller.
type landlockRuleset struct {
	handledFS, handledNet, scoped uint64
}

// LandlockABI is the kernel's Landlock ABI version, 0 without Landlock
// (not built, or not enabled at boot).
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// landlockRights are the filesystem rights handled at abi, and the scopes.
func landlockRights(abi int) (fs, scoped uint64) {
	fs = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	if abi >= 2 {
		fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 6 {
		scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	return fs, scoped
}

// landlockRule is one path the agent keeps, and whether it is a
// directory.
type landlockRule struct {
	path string
	dir  bool
}

// landlockAllowed lists what the agent keeps when deny (absolute paths)
// are denied: each entry of each directory above a denied path that is
// not itself on the way to one. Symbolic links need no rule (access goes
// by the path they resolve to); entries that vanish are skipped.
func landlockAllowed(deny []string) ([]landlockRule, error) {
	onPath, denied := map[string]bool{}, map[string]bool{}
	for _, p := range deny {
		if !path.IsAbs(p) {
			return nil, fmt.Errorf("landlock: %q is not an absolute path", p)
		}
		p = path.Clean(p)
		denied[p] = true
		for q := p; ; q = path.Dir(q) {
			onPath[q] = true
			if q == "/" {
				break
			}
		}
	}
	var rules []landlockRule
	for dir := range onPath {
		if denied[dir] {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("landlock: listing %s: %w", dir, err)
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			if onPath[p] || e.Type()&os.ModeSymlink != 0 {
				continue
			}
			rules = append(rules, landlockRule{path: p, dir: e.IsDir()})
		}
	}
	return rules, nil
}

// restrictLandlock puts the calling thread, and every process it starts
// from now on, in a Landlock domain that denies deny. It returns the ABI
// used, 0 (and no error) where the kernel has no Landlock. The caller
// must hold its OS thread (runtime.LockOSThread) until it has started the
// agent: Landlock restricts one thread, and a child inherits the domain of
// the thread that forked it. The thread needs CAP_SYS_ADMIN in its user
// namespace, which the init (root of its own) has.
func restrictLandlock(deny []string) (int, error) {
	abi := LandlockABI()
	if abi == 0 || len(deny) == 0 {
		return 0, nil
	}
	fs, scoped := landlockRights(abi)
	attr := landlockRuleset{handledFS: fs, scoped: scoped}
	size := unsafe.Sizeof(attr)
	if abi < 6 {
		size = unsafe.Offsetof(attr.scoped)
	}
	rfd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return abi, fmt.Errorf("landlock: creating the ruleset (ABI %d): %w", abi, errno)
	}
	defer unix.Close(int(rfd))
	rules, err := landlockAllowed(deny)
	if err != nil {
		return abi, err
	}
	for _, r := range rules {
		if err := landlockAddRule(int(rfd), r, fs); err != nil {
			return abi, err
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, rfd, 0, 0); errno != 0 {
		return abi, fmt.Errorf("landlock: restricting the agent (ABI %d): %w", abi, errno)
	}
	return abi, nil
}

func landlockAddRule(rfd int, r landlockRule, handled uint64) error {
	fd, err := unix.Open(r.path, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) {
			return nil // gone, or out of the agent's reach anyway
		}
		return fmt.Errorf("landlock: opening %s: %w", r.path, err)
	}
	defer unix.Close(fd)
	allowed := handled
	if !r.dir {
		allowed &= landlockFileRights
	}
	pb := unix.LandlockPathBeneathAttr{Allowed_access: allowed, Parent_fd: int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rfd), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&pb)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock: rule for %s: %w", r.path, errno)
	}
	return nil
}
