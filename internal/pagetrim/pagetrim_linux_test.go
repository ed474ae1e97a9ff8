package pagetrim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const smapsSample = `00400000-00ce2000 r-xp 00000000 fe:00 9981087                            /opt/lattice sandbox
Size:               9096 kB
Rss:                7940 kB
Anonymous:             0 kB
00ce2000-0173d000 r--p 008e2000 fe:00 9981087                            /opt/lattice sandbox
Size:              10604 kB
Rss:                8744 kB
Anonymous:             8 kB
0173d000-017ad000 rw-p 0133d000 fe:00 9981087                            /opt/lattice sandbox
Rss:                 384 kB
Anonymous:           100 kB
017ad000-017b0000 r--s 00000000 fe:00 9981087                            /opt/lattice sandbox
Rss:                  12 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 r--p 00000000 fe:00 12                         /usr/lib/other
Rss:                1024 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
`

func TestReadSmaps(t *testing.T) {
	for _, tc := range []struct {
		name, in, path string
		want           []mapping
		wantErr        string
	}{
		{"own read-only private mappings", smapsSample, "/opt/lattice sandbox", []mapping{
			{start: 0x400000, end: 0xce2000, rss: 7940 << 10},
			{start: 0xce2000, end: 0x173d000, rss: 8744 << 10, anonymous: 8 << 10},
		}, ""},
		{"another file", smapsSample, "/usr/lib/other", []mapping{{start: 0x7f0000000000, end: 0x7f0000100000, rss: 1 << 20}}, ""},
		{"not mapped", smapsSample, "/opt/lattice", nil, ""},
		{"bad range", "zz-00400000 r-xp 0 fe:00 1 /x\n", "/x", nil, `mapping "zz-00400000 r-xp 0 fe:00 1 /x": bad address range`},
		{"empty range", "00400000-00400000 r-xp 0 fe:00 1 /x\n", "/x", nil, "bad address range"},
		{"bad size", "00400000-00500000 r-xp 0 fe:00 1 /x\nRss: many kB\n", "/x", nil, `"Rss: many kB": strconv.ParseInt: parsing "many": invalid syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readSmaps(strings.NewReader(tc.in), tc.path)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzReadSmaps: any listing parses or is refused, never panics; a
// mapping returned is of the path, not writable, and non-empty.
func FuzzReadSmaps(f *testing.F) {
	f.Add(smapsSample, "/opt/lattice sandbox")
	f.Add("00400000-00500000 r-xp 0 fe:00 1 /x\nRss: 4 kB\nAnonymous: -1 kB\n", "/x")
	f.Add("Rss: 4 kB\n", "")
	f.Fuzz(func(t *testing.T, in, path string) {
		maps, err := readSmaps(strings.NewReader(in), path)
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.end <= m.start {
				t.Fatalf("mapping %#x-%#x", m.start, m.end)
			}
		}
	})
}

// TestRelease: the test binary's own code pages leave its resident set,
// and the code keeps running (its pages come back at their next use).
func TestRelease(t *testing.T) {
	before := rssFile(t)
	st, err := Release()
	require.NoError(t, err)
	assert.Positive(t, st.Unmapped)
	after := rssFile(t)
	assert.Less(t, after, before, "RssFile %d kB before, %d kB after", before, after)
	assert.Equal(t, "12 kB", fmt.Sprintf("%d kB", 12), "code still runs")
	_, err = Release()
	require.NoError(t, err, "again")
}

// TestUnmap: the code pages leave the resident set without a collection.
func TestUnmap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rss := rssFile(t)
	st, err := Unmap()
	require.NoError(t, err)
	assert.Positive(t, st.Unmapped)
	assert.Less(t, rssFile(t), rss)
	runtime.ReadMemStats(&after)
	assert.Equal(t, before.NumGC, after.NumGC, "no collection")
}

// rssFile is this process's RssFile in kB.
func rssFile(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// BenchmarkRelease: what one Release costs (a collection, smaps, the
// madvise calls), and the page faults that bring back what the loop
// runs.
func BenchmarkRelease(b *testing.B) {
	var before, after unix.Rusage
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &before))
	for b.Loop() {
		if _, err := Release(); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &after))
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(after.Minflt-before.Minflt)/float64(b.N), "faults/op")
}
