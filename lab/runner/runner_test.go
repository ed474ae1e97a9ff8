package runner

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/report"
	"github.com/latticelab/lattice/lab/scenario"
)

func TestMain(m *testing.M) {
	MaybeRunChild()   // the gvisor sandboxes' children are this test binary
	dialUnixIfAsked() // TestCheckPeer's client, as nobody (Linux; a no-op elsewhere)
	goleak.VerifyTestMain(m)
}

func runFile(t *testing.T, path string) *report.Result {
	t.Helper()
	f, err := scenario.Load(path)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	res := RunScenario(ctx, f, Options{Progress: func(s string) { t.Log(s) }})
	require.Equal(t, report.Passed, res.Status, "%s", res.Error)
	return res
}

func TestQuickstart(t *testing.T) {
	res := runFile(t, "../../scenarios/quickstart.yaml")
	assert.NotEmpty(t, res.Pairs)
	assert.NotEmpty(t, res.Events)
}
