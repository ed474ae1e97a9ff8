package pagetrim

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release returns the heap's free pages to the operating system, then
// unmaps the resident pages of the executable's read-only file mappings
// (code, read-only data, function tables), skipping any mapping with a
// private copy of a page. Call it once the process is up and about to
// idle; calling it again is harmless.
func Release() (Stats, error) {
	// A collection first: it touches what it touches (stacks' function
	// tables), and what it frees goes back.
	debug.FreeOSMemory()
	return Unmap()
}

// Unmap unmaps the resident pages of the executable's read-only file
// mappings, as Release does, without the collection: for a process
// whose heap has little to give back, whose first collection would cost
// more (the collector's own memory) than it frees.
func Unmap() (Stats, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Stats{}, fmt.Errorf("pagetrim: %w", err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return Stats{}, fmt.Errorf("pagetrim: %w", err)
	}
	maps, err := readSmaps(f, exe)
	f.Close()
	if err != nil {
		return Stats{}, fmt.Errorf("pagetrim: /proc/self/smaps: %w", err)
	}
	var st Stats
	for _, m := range maps {
		if m.anonymous > 0 {
			st.Skipped++
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return st, fmt.Errorf("pagetrim: madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		st.Unmapped += m.rss
	}
	return st, nil
}

// mapping is a read-only file mapping of the executable.
type mapping struct {
	start, end     uintptr
	rss, anonymous int64 // bytes
}

// readSmaps returns the mappings of path in an smaps listing that are
// neither writable nor shared.
func readSmaps(r io.Reader, path string) ([]mapping, error) {
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if k, ok := strings.CutSuffix(fields[0], ":"); ok {
			if cur == nil || len(fields) < 2 {
				continue
			}
			switch k {
			case "Rss", "Anonymous":
				kb, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%q: %w", line, err)
				}
				if k == "Rss" {
					cur.rss = kb << 10
				} else {
					cur.anonymous = kb << 10
				}
			}
			continue
		}
		// A mapping's header: ADDR-ADDR PERMS OFFSET DEV INODE [PATH].
		cur = nil
		if len(fields) < 6 || strings.Join(fields[5:], " ") != path || len(fields[1]) != 4 || fields[1][1] == 'w' || fields[1][3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("mapping %q: bad address range", line)
		}
		out = append(out, mapping{start: uintptr(start), end: uintptr(end)})
		cur = &out[len(out)-1]
	}
	return out, sc.Err()
}
