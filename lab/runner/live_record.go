package runner

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The files a live lab keeps in its state directory.
const (
	LiveRecordFile = "live.json"
	LiveSocketFile = "control.sock"
	LivePIDFile    = "lab.pid"
	LiveLogFile    = "lab.log"
)

// LiveRecord is what a live lab writes to its state directory before it
// builds anything, so that down can clean up after it even when it was
// killed (SIGKILL leaves no chance to close): its process, and the
// namespaces it made.
type LiveRecord struct {
	PID int `json:"pid"`
	// Start is the process's start time in clock ticks since boot
	// (/proc/PID/stat field 22): with PID it names the process, so a
	// reused PID is never taken for the lab.
	Start    uint64 `json:"start"`
	Topology string `json:"topology"`
	File     string `json:"file"`
	// Namespaces are the kernel hosts' namespaces, once up. down also
	// removes any lab-*-PID-* namespace: those made before a kill.
	Namespaces []string `json:"namespaces,omitempty"`
}

// ProcStart is a process's start time in clock ticks since boot.
func ProcStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it follow the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// Alive reports whether the recorded process still runs (and is not a
// zombie).
func (r *LiveRecord) Alive() bool {
	st, err := ProcStart(r.PID)
	if err != nil || st != r.Start {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.PID))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}

// WriteLiveRecord writes r to dir atomically, mode 0600.
func WriteLiveRecord(dir string, r *LiveRecord) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, LiveRecordFile), append(b, '\n')); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, LivePIDFile), []byte(strconv.Itoa(r.PID)+"\n"))
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("live: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("live: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("live: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("live: write %s: %w", path, err)
	}
	return nil
}

// ErrNoLiveLab says a state directory holds no live lab's record.
var ErrNoLiveLab = errors.New("no live lab")

// ReadLiveRecord reads dir's record; ErrNoLiveLab if there is none.
func ReadLiveRecord(dir string) (*LiveRecord, error) {
	b, err := os.ReadFile(filepath.Join(dir, LiveRecordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoLiveLab, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	var r LiveRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("live: %s: %w", filepath.Join(dir, LiveRecordFile), err)
	}
	if r.PID <= 0 {
		return nil, fmt.Errorf("live: %s: no pid", filepath.Join(dir, LiveRecordFile))
	}
	return &r, nil
}

// Leftovers is what a live lab left on the machine.
type Leftovers struct {
	// Namespaces under /run/netns.
	Namespaces []string
	// Processes: the lab's own, its session's (children it started) and
	// any running in its namespaces.
	Processes []int
	// Mounts that name one of its namespaces.
	Mounts []string
}

// Empty reports whether nothing is left.
func (lo Leftovers) Empty() bool {
	return len(lo.Namespaces) == 0 && len(lo.Processes) == 0 && len(lo.Mounts) == 0
}

func (lo Leftovers) String() string {
	var parts []string
	if len(lo.Namespaces) > 0 {
		parts = append(parts, "namespaces "+strings.Join(lo.Namespaces, ", "))
	}
	if len(lo.Processes) > 0 {
		parts = append(parts, fmt.Sprintf("processes %v", lo.Processes))
	}
	if len(lo.Mounts) > 0 {
		parts = append(parts, "mounts "+strings.Join(lo.Mounts, ", "))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, "; ")
}

// Find lists what the recorded lab left behind.
func (r *LiveRecord) Find() (Leftovers, error) {
	var lo Leftovers
	nsRe := regexp.MustCompile(`^lab-.+-` + strconv.Itoa(r.PID) + `-[0-9]+$`)
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return lo, fmt.Errorf("live: list namespaces: %w", err)
	}
	inodes := map[uint64]bool{}
	for _, e := range entries {
		if !nsRe.MatchString(e.Name()) && !slices.Contains(r.Namespaces, e.Name()) {
			continue
		}
		lo.Namespaces = append(lo.Namespaces, e.Name())
		if ino, ok := inodeOf(filepath.Join("/run/netns", e.Name())); ok {
			inodes[ino] = true
		}
	}
	lo.Processes = r.processes(inodes)
	mounts, err := mountsNaming(func(p string) bool {
		base := filepath.Base(p)
		return strings.HasPrefix(p, "/run/netns/") && (nsRe.MatchString(base) || slices.Contains(r.Namespaces, base))
	})
	lo.Mounts = mounts
	return lo, err
}

// processes lists the lab process (if it is still the one recorded), the
// processes of its session and those whose network namespace is one of
// the lab's.
func (r *LiveRecord) processes(netns map[uint64]bool) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || zombie(pid) {
			continue
		}
		if pid == r.PID {
			if r.Alive() {
				out = append(out, pid)
			}
			continue
		}
		if sid, err := procSession(pid); err == nil && sid == r.PID && r.sessionOurs() {
			out = append(out, pid)
			continue
		}
		if ino, ok := inodeOf(fmt.Sprintf("/proc/%d/ns/net", pid)); ok && len(netns) > 0 && netns[ino] {
			out = append(out, pid)
		}
	}
	return out
}

// sessionOurs reports whether a session whose id is r.PID is the lab's:
// true while the lab runs, and after it died as long as no process took
// its PID (a session id outlives its leader).
func (r *LiveRecord) sessionOurs() bool {
	_, err := ProcStart(r.PID)
	return err != nil || r.Alive()
}

func procSession(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return 0, errors.New("short stat")
	}
	return strconv.Atoi(f[3]) // field 6: session id
}

// mountsNaming lists the mount points of this mount namespace for which
// match is true.
func mountsNaming(match func(string) bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && match(fields[4]) {
			out = append(out, fields[4])
		}
	}
	return out, sc.Err()
}

// Clean removes what the recorded lab left: it kills its processes
// (SIGKILL: the lab is being torn down, or is dead already), deletes its
// namespaces (unmounting them) and its live files, and returns what it
// removed. What it could not remove is in the error.
func (r *LiveRecord) Clean(dir string) (Leftovers, error) {
	lo, err := r.Find()
	if err != nil {
		return lo, err
	}
	for _, pid := range lo.Processes {
		_ = killPID(pid)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range lo.Processes {
		for time.Now().Before(deadline) && pidExists(pid) && !zombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	var errs []error
	for _, ns := range lo.Namespaces {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out))))
		}
	}
	for _, m := range lo.Mounts {
		if _, serr := os.Stat(m); serr == nil { // ip netns del unmounts its own; this is for strays
			if err := unmountDetached(m); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	for _, name := range []string{LiveSocketFile, LivePIDFile, LiveRecordFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	left, err := r.Find()
	errs = append(errs, err)
	if !left.Empty() {
		errs = append(errs, fmt.Errorf("live: still left: %s", left))
	}
	return lo, errors.Join(errs...)
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(string(b[i+1:])), "Z")
}
