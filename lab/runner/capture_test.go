package runner

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/pcapng/pcapngtest"
	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
)

// TestRunCaptureComments runs a scenario with a capture directory, as
// lattice-lab run --capture does, and reads the files back with tshark: the
// internet segment's file names the NAT mappings the nodes opened and the
// frames the UDP-blocking firewall dropped, with the reason; networks
// without traffic leave no file.
func TestRunCaptureComments(t *testing.T) {
	ts := pcapngtest.Require(t)
	comment := ts.CommentField(t)
	f, err := scenario.Load("../../scenarios/pair-full-cone+udp-blocked.yaml")
	require.NoError(t, err)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	res := RunScenario(ctx, f, Options{CaptureDir: dir, Progress: func(s string) { t.Log(s) }})
	require.Equal(t, report.Passed, res.Status, "%s", res.Error)

	internet := filepath.Join(dir, "internet.pcapng")
	require.Contains(t, res.Captures, internet)
	files, err := filepath.Glob(filepath.Join(dir, "*.pcapng"))
	require.NoError(t, err)
	slices.Sort(files)
	got := slices.Clone(res.Captures)
	slices.Sort(got)
	assert.Equal(t, files, got, "the result lists exactly the files on disk")
	assert.NotContains(t, files, filepath.Join(dir, "symmetric-a.pcapng"), "a network no node used has no file")
	for _, p := range files {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Positive(t, st.Size(), p)
	}

	// A new mapping shows where the translated frame leaves the NAT (the
	// internet); a firewall drop where the frame was refused (the LAN).
	comments := func(file string) string {
		out := ts.Run(t, "-r", filepath.Join(dir, file), "-Y", "frame.comment", "-T", "fields", "-e", comment)
		t.Logf("%s comments:\n%s", file, out)
		return out
	}
	var mapping, firewall bool
	for line := range strings.Lines(comments("internet.pcapng")) {
		mapping = mapping || strings.HasPrefix(line, "nat: udp 192.168.1.2:") && strings.Contains(line, "(new mapping)")
	}
	for line := range strings.Lines(comments("udp-blocked-b.pcapng")) {
		firewall = firewall || strings.TrimSpace(line) == "udp-blocked-b-nat/lan: dropped by firewall rule 2 (deny udp)"
	}
	assert.True(t, mapping, "a NAT mapping is annotated in the internet capture")
	assert.True(t, firewall, "a firewall drop is annotated with its reason in the LAN capture")
}
