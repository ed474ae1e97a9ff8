package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// LoadJSON reads a report file written by WriteJSON, as a baseline.
// Problems in it are reported as path:line:col; a file with no metrics
// (another JSON file given by mistake) is refused, as it would compare
// nothing and so report no regression.
func LoadJSON(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	const want = "want a bench.json written by lattice-lab bench"
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s: empty file; %s", path, want)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			line, col := lineCol(data, se.Offset)
			return nil, fmt.Errorf("%s:%d:%d: %w; %s", path, line, col, se, want)
		case errors.As(err, &te):
			line, col := lineCol(data, te.Offset)
			return nil, fmt.Errorf("%s:%d:%d: %s: want %s, got %s", path, line, col, te.Field, te.Type, te.Value)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rep.Metrics) == 0 {
		return nil, fmt.Errorf("%s: no metrics; %s", path, want)
	}
	return &rep, nil
}

// lineCol is the 1-based line and column of the byte just before offset:
// encoding/json's offsets point past the offending byte (for a syntax
// error) or past the value of the wrong type.
func lineCol(data []byte, offset int64) (int, int) {
	i := int(min(max(offset-1, 0), int64(len(data))))
	line := 1 + bytes.Count(data[:i], []byte("\n"))
	col := i - bytes.LastIndexByte(data[:i], '\n')
	return line, col
}
