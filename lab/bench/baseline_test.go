package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadJSONMistakes: a baseline that is not a report is refused at the
// line and column where it goes wrong, or saying what it lacks.
func TestLoadJSONMistakes(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, in, wantErr string }{
		{"empty", "\n", "F: empty file; want a bench.json written by lattice-lab bench"},
		{"YAML, not JSON", "date: 2026-12-01\nmetrics: []\n", "F:1:1: invalid character 'd' looking for beginning of value; want a bench.json written by lattice-lab bench"},
		{"trailing comma", "{\n  \"cpus\": 2,\n  \"metrics\": [],\n}\n", "F:4:1: invalid character '}' looking for beginning of object key string; want a bench.json written by lattice-lab bench"},
		{"string for a number", "{\n  \"cpus\": \"two\",\n  \"metrics\": []\n}\n", "F:2:15: cpus: want int, got string"},
		{"another JSON file", "{\"name\": \"link-flap\", \"passed\": true}\n", "F: no metrics; want a bench.json written by lattice-lab bench"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "b.json")
			require.NoError(t, os.WriteFile(p, []byte(tt.in), 0o644))
			_, err := LoadJSON(p)
			assert.EqualError(t, err, replaceF(tt.wantErr, p))
		})
	}

	_, err := LoadJSON(dir)
	assert.EqualError(t, err, "bench: read "+dir+": is a directory")

	var b bytes.Buffer
	require.NoError(t, WriteJSON(&b, report(300, 100)))
	p := filepath.Join(dir, "good.json")
	require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
	got, err := LoadJSON(p)
	require.NoError(t, err)
	assert.Equal(t, report(300, 100), got)
}

func replaceF(s, path string) string {
	if len(s) > 0 && s[0] == 'F' {
		return path + s[1:]
	}
	return s
}
