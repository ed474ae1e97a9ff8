package scenariotest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"testing/cryptotest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/pcapng"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/runner"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/vtime"
)

// bubbleEpoch is where a synctest bubble's clock starts.
var bubbleEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// detRun is what one run of the determinism scenario left behind.
type detRun struct {
	res      *report.Result // Deterministic, capture paths cut to file names
	json     []byte         // res as result.json has it
	captures string         // directory of the pcapng files
	state    string         // node identities, control's registry
}

// TestDeterministicRun runs a scenario with NAT, loss and jitter, a relay
// fallback, the upgrade to direct and a failover to the relay and back
// (testdata/determinism.yaml) twice in virtual time at GOMAXPROCS=1, with
// crypto/rand seeded the same (testing/cryptotest.SetGlobalRandom), and
// checks what repeats exactly:
//   - the outcome: every step's action, label and status, the nodes, every
//     pair's final path, the capture files' names;
//   - the node identities (keys, node ids): byte-identical files, because
//     every key the product makes comes from crypto/rand;
//   - every capture's section and interface blocks, byte for byte: nothing
//     of the host, the wall clock or the run directory is in them;
//   - every packet timestamp is the lab clock's: on the bubble's clock, from
//     2000-01-01 00:00 UTC to the end of the run's network time;
//   - the captures agree past the first NATS inbox name (packet 11): the
//     overlay draws nats.go's inbox NUIDs from the seeded crypto/rand.
//
// It does not check that result.json and the packet records are identical,
// because they are not, and it logs how far they agree (see
// docs/VIRTUAL_TIME.md, "Determinism"). Goroutines that are runnable at
// the same bubble instant run in an order the Go runtime draws from its own
// unseedable random source (select case order, map order, synctest's
// shuffle of timers due at one instant) and from wall time (sysmon's
// preemption, sync.Mutex starvation, the GC), even at GOMAXPROCS=1. The
// overlay seeds what a test can reach (nats.go's inbox names, nats-server's
// first-PING jitter, both from crypto/rand), each flow draws its loss and
// jitter from its own stream (lab/link Config.Flow), so a moved packet no
// longer shifts every later draw on its link, and the fabric orders the
// frames of each instant itself (lab/fabric instant.go,
// TestInstantOrder), so two hosts sending at one instant reach the wire in
// one order. What still parts the runs is the order of goroutines inside
// one host (two connects drawing ephemeral ports, crypto/rand reads).
func TestDeterministicRun(t *testing.T) {
	if ok, why := vtime.Available(); !ok {
		t.Skip(why)
	}
	f, err := scenario.Load("testdata/determinism.yaml")
	require.NoError(t, err)
	prev := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	a, b := deterministicRun(t, f), deterministicRun(t, f)

	assert.Equal(t, outcome(a.res), outcome(b.res), "the same steps pass, the pairs end on the same paths")
	assert.Equal(t, a.res.Nodes, b.res.Nodes)
	assert.Equal(t, a.res.Captures, b.res.Captures, "the same networks carried traffic")
	assert.Contains(t, a.res.Captures, "internet.pcapng")

	ids, err := filepath.Glob(filepath.Join(a.state, "nodes", "*.json"))
	require.NoError(t, err)
	require.Len(t, ids, 2, "both nodes keep an identity")
	for _, p := range ids {
		want, err := os.ReadFile(p)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(b.state, "nodes", filepath.Base(p)))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "node identity %s: keys come from the seeded crypto/rand", filepath.Base(p))
	}

	end := bubbleEpoch.Add(max(a.res.Duration, b.res.Duration))
	for _, name := range a.res.Captures {
		pa, pb := filepath.Join(a.captures, name), filepath.Join(b.captures, name)
		ha, ra := captureBlocks(t, pa)
		hb, rb := captureBlocks(t, pb)
		assert.Equal(t, ha, hb, "%s: section and interface blocks", name)
		for _, p := range []string{pa, pb} {
			first, last, n := packetTimes(t, p)
			require.Positive(t, n, p)
			assert.False(t, first.Before(bubbleEpoch), "%s: first packet at %v, before the bubble's epoch", p, first)
			assert.False(t, last.After(end), "%s: last packet at %v, after the run's end %v", p, last, end)
		}
		same := 0
		for same < min(len(ra), len(rb)) && bytes.Equal(ra[same], rb[same]) {
			same++
		}
		t.Logf("%s: %d and %d packets, the first %d identical", name, len(ra), len(rb), same)
		// The 11th packet of each capture carried the first inbox name
		// (a NUID); the overlay draws those from the seeded crypto/rand.
		assert.Greater(t, same, 10, "%s: the runs' captures part at packet %d, at or before the first NATS inbox", name, same+1)
	}
	if bytes.Equal(a.json, b.json) {
		t.Log("result.json identical")
	} else {
		t.Logf("result.json differs: network time %v and %v", a.res.Duration, b.res.Duration)
	}
}

// deterministicRun runs f once in virtual time with crypto/rand reset to
// the same seed.
func deterministicRun(t *testing.T, f *scenario.File) detRun {
	t.Helper()
	cryptotest.SetGlobalRandom(t, 24)
	r := detRun{captures: t.TempDir(), state: t.TempDir()}
	res := Run(t, f, Options{Clock: "virtual", Options: runner.Options{StateDir: r.state, CaptureDir: r.captures, OrderInstants: true}})
	require.Equal(t, report.Passed, res.Status, res.Error)
	r.res = res.Deterministic()
	for i, c := range r.res.Captures {
		r.res.Captures[i] = filepath.Base(c)
	}
	var buf bytes.Buffer
	require.NoError(t, report.WriteJSON(&buf, []*report.Result{r.res}))
	r.json = buf.Bytes()
	return r
}

// outcome is what a run decided, without when: each step's action, label
// and status, and each pair's final path.
func outcome(r *report.Result) []string {
	var out []string
	for _, s := range r.Steps {
		out = append(out, fmt.Sprintf("step %d %s %q %s", s.Index, s.Action, s.Label, s.Status))
	}
	for _, p := range r.Pairs {
		out = append(out, fmt.Sprintf("pair %s→%s %s", p.From, p.To, p.Path))
	}
	return out
}

// captureBlocks splits a pcapng file into its header blocks (section and
// interface descriptions, in order) and its packet records.
func captureBlocks(t *testing.T, path string) (head, packets [][]byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	const epb = 0x00000006
	for off := 0; off < len(b); {
		require.GreaterOrEqual(t, len(b)-off, 12, "%s: block header at %d", path, off)
		typ := binary.LittleEndian.Uint32(b[off:])
		n := int(binary.LittleEndian.Uint32(b[off+4:]))
		require.True(t, n >= 12 && n%4 == 0 && off+n <= len(b), "%s: block at %d has length %d", path, off, n)
		if typ == epb {
			packets = append(packets, b[off:off+n])
		} else {
			head = append(head, b[off:off+n])
		}
		off += n
	}
	return head, packets
}

// packetTimes reads a capture's first and last packet timestamps.
func packetTimes(t *testing.T, path string) (first, last time.Time, n int) {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	r, err := pcapng.NewReader(fh)
	require.NoError(t, err)
	var times []time.Time
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, path)
		times = append(times, p.Time)
	}
	if len(times) == 0 {
		return first, last, 0
	}
	return slices.MinFunc(times, time.Time.Compare), slices.MaxFunc(times, time.Time.Compare), len(times)
}
