package report

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzResultJSON reads arbitrary JSON as a Result, as --baseline reads a
// report back: no panic, and a Result that reads writes back the same and
// reads back equal. Wall travels as float seconds, so it comes back exact
// below about eleven days and to float precision above.
func FuzzResultJSON(f *testing.F) {
	for _, r := range sample() {
		b, err := json.Marshal(r)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"scenario":"s","wall_seconds":-1}`))
	f.Add([]byte(`{"scenario":"s","started":"2026-11-29T12:00:00+01:00","tags":[],"wall_seconds":0.000000001}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r1 Result
		if err := json.Unmarshal(data, &r1); err != nil {
			return
		}
		require.GreaterOrEqual(t, r1.Wall, time.Duration(0), "negative Wall from %s", data)
		b1, err := json.Marshal(&r1)
		require.NoError(t, err, "a Result read from %s does not write", data)
		var r2 Result
		require.NoError(t, json.Unmarshal(b1, &r2), "cannot read back %s", b1)
		if r1.Wall < 1e15 {
			require.Equal(t, r1.Wall, r2.Wall, "wall from %s via %s", data, b1)
		} else {
			require.InDelta(t, float64(r1.Wall), float64(r2.Wall), float64(r1.Wall)*1e-15, "wall from %s via %s", data, b1)
		}
		// Compare the rest through JSON: reading normalises empty lists
		// (omitted on write) and zones to what writing keeps.
		r2.Wall = r1.Wall
		b2, err := json.Marshal(&r2)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b1, b2), "read back differently:\n%s\n%s", b1, b2)
		var r3 Result
		require.NoError(t, json.Unmarshal(b2, &r3))
		r3.Wall = r2.Wall
		require.Equal(t, r2, r3)
	})
}
