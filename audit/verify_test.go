package audit

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLog returns the lines, newlines included, of a 5-line log.
func testLog(t *testing.T) []string {
	t.Helper()
	path := logPath(t)
	writeLog(t, path, 5)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(data), "\n")
	require.Len(t, lines, 6)
	return lines[:5]
}

// seal ends body (a line up to its hash) with its hash and a newline.
func seal(body string) string {
	return body + hashKey + sha256Hex(body) + "\"}\n"
}

// unseal returns a line's body: everything before its hash.
func unseal(line string) string {
	return strings.TrimSuffix(line, "\n")[:len(line)-1-hashSuffix]
}

// hashOf returns a line's hash.
func hashOf(line string) string {
	rec, err := parseLine([]byte(strings.TrimSuffix(line, "\n")))
	if err != nil {
		panic(err)
	}
	return rec.Hash
}

func TestVerifyTampered(t *testing.T) {
	const genesisBody = `{"seq":1,"time":"2026-05-04T10:20:31.123456789Z","kind":"egress","prev":"` + Genesis + `"`
	tests := []struct {
		name      string
		mangle    func(l []string) []string
		wantErr   string
		wantErrIs error
		lines     int // verified before the bad line
	}{
		{
			name:      "edit a byte in the middle line",
			mangle:    func(l []string) []string { l[2] = strings.Replace(l[2], "event 3", "event 8", 1); return l },
			wantErr:   "line 3: hash mismatch: the line was edited",
			wantErrIs: ErrEdited,
			lines:     2,
		},
		{
			name:      "change a value keeping JSON valid",
			mangle:    func(l []string) []string { l[2] = strings.Replace(l[2], `"deny"`, `"allow"`, 1); return l },
			wantErr:   "line 3: hash mismatch: the line was edited",
			wantErrIs: ErrEdited,
			lines:     2,
		},
		{
			name:      "edit the hash",
			mangle:    func(l []string) []string { l[1] = unseal(l[1]) + hashKey + strings.Repeat("0", 64) + "\"}\n"; return l },
			wantErr:   "line 2: hash mismatch: the line was edited",
			wantErrIs: ErrEdited,
			lines:     1,
		},
		{
			name: "edit a line and recompute its hash",
			mangle: func(l []string) []string {
				l[2] = seal(strings.Replace(unseal(l[2]), `"deny"`, `"allow"`, 1))
				return l
			},
			wantErr:   "line 4: prev does not match line 3: a line was removed, reordered or duplicated",
			wantErrIs: ErrChain,
			lines:     3,
		},
		{
			name:      "delete a line",
			mangle:    func(l []string) []string { return append(l[:2], l[3:]...) },
			wantErr:   "line 3: prev does not match line 2: a line was removed, reordered or duplicated",
			wantErrIs: ErrChain,
			lines:     2,
		},
		{
			name:      "delete the first line",
			mangle:    func(l []string) []string { return l[1:] },
			wantErr:   "line 1: prev is not the genesis value: a line was removed, reordered or duplicated",
			wantErrIs: ErrChain,
		},
		{
			name:      "swap two lines",
			mangle:    func(l []string) []string { l[1], l[2] = l[2], l[1]; return l },
			wantErr:   "line 2: prev does not match line 1: a line was removed, reordered or duplicated",
			wantErrIs: ErrChain,
			lines:     1,
		},
		{
			name:      "duplicate a line",
			mangle:    func(l []string) []string { return append(l[:3], l[2:]...) },
			wantErr:   "line 4: prev does not match line 3: a line was removed, reordered or duplicated",
			wantErrIs: ErrChain,
			lines:     3,
		},
		{
			name:      "duplicate the last line",
			mangle:    func(l []string) []string { return append(l, l[4]) },
			wantErr:   "line 6: prev does not match line 5: a line was removed, reordered or duplicated",
			wantErrIs: ErrChain,
			lines:     5,
		},
		{
			name: "forge a seq",
			mangle: func(l []string) []string {
				l[1] = seal(`{"seq":7,"time":"2026-05-04T10:20:31Z","kind":"x","prev":"` + hashOf(l[0]) + `"`)
				return l[:2]
			},
			wantErr:   "line 2: seq out of order: seq 7, want 2",
			wantErrIs: ErrSeq,
			lines:     1,
		},
		{
			name:      "bad JSON",
			mangle:    func(l []string) []string { l[2] = "not json\n"; return l },
			wantErr:   "line 3: malformed line: not an audit entry",
			wantErrIs: ErrMalformed,
			lines:     2,
		},
		{
			name:      "cut JSON",
			mangle:    func(l []string) []string { l[2] = l[2][:len(l[2])/2] + "\n"; return l },
			wantErr:   "line 3: malformed line: no hash at the end of the line",
			wantErrIs: ErrMalformed,
			lines:     2,
		},
		{
			name:      "sealed bad JSON",
			mangle:    func(l []string) []string { return []string{seal(`{"seq":1,`)} },
			wantErr:   `line 1: malformed line: invalid JSON: invalid character ',' looking for beginning of object key string`,
			wantErrIs: ErrMalformed,
		},
		{
			name:      "sealed unknown field",
			mangle:    func(l []string) []string { return []string{seal(genesisBody + `,"admin":true`)} },
			wantErr:   `line 1: malformed line: invalid JSON: json: unknown field "admin"`,
			wantErrIs: ErrMalformed,
		},
		{
			name: "sealed without kind",
			mangle: func(l []string) []string {
				return []string{seal(strings.Replace(genesisBody, `"kind":"egress",`, "", 1))}
			},
			wantErr:   `line 1: malformed line: no kind`,
			wantErrIs: ErrMalformed,
		},
		{
			name:      "sealed without time",
			mangle:    func(l []string) []string { return []string{seal(`{"seq":1,"kind":"x","prev":"` + Genesis + `"`)} },
			wantErr:   `line 1: malformed line: no time`,
			wantErrIs: ErrMalformed,
		},
		{
			name:      "sealed without seq",
			mangle:    func(l []string) []string { return []string{seal(strings.Replace(genesisBody, `"seq":1,`, "", 1))} },
			wantErr:   `line 1: malformed line: no seq`,
			wantErrIs: ErrMalformed,
		},
		{
			name: "sealed short prev",
			mangle: func(l []string) []string {
				return []string{seal(`{"seq":1,"time":"2026-05-04T10:20:31Z","kind":"x","prev":"abc"`)}
			},
			wantErr:   `line 1: malformed line: prev is not a SHA-256`,
			wantErrIs: ErrMalformed,
		},
		{
			name:      "sealed trailing data",
			mangle:    func(l []string) []string { return []string{seal(`{"seq":1} {"a":1`)} },
			wantErr:   `line 1: malformed line: data after the JSON object`,
			wantErrIs: ErrMalformed,
		},
		{
			name: "uppercase hash",
			mangle: func(l []string) []string {
				l[0] = unseal(l[0]) + hashKey + strings.ToUpper(hashOf(l[0])) + "\"}\n"
				return l
			},
			wantErr:   "line 1: malformed line: no hash at the end of the line",
			wantErrIs: ErrMalformed,
		},
		{
			name:      "blank line",
			mangle:    func(l []string) []string { return append(l[:2], append([]string{"\n"}, l[2:]...)...) },
			wantErr:   "line 3: malformed line: empty line",
			wantErrIs: ErrMalformed,
			lines:     2,
		},
		{
			name:      "carriage return",
			mangle:    func(l []string) []string { l[1] = strings.TrimSuffix(l[1], "\n") + "\r\n"; return l },
			wantErr:   "line 2: malformed line: no hash at the end of the line",
			wantErrIs: ErrMalformed,
			lines:     1,
		},
		{
			name:      "space before newline",
			mangle:    func(l []string) []string { l[1] = strings.TrimSuffix(l[1], "\n") + " \n"; return l },
			wantErr:   "line 2: malformed line: no hash at the end of the line",
			wantErrIs: ErrMalformed,
			lines:     1,
		},
		{
			name:      "missing last newline",
			mangle:    func(l []string) []string { l[4] = strings.TrimSuffix(l[4], "\n"); return l },
			wantErr:   "line 5: incomplete line (no trailing newline)",
			wantErrIs: ErrIncomplete,
			lines:     4,
		},
		{
			name:      "line too long",
			mangle:    func(l []string) []string { return append(l[:1], strings.Repeat("x", MaxLineLen+1)+"\n") },
			wantErr:   "line 2: line too long: more than 65536 bytes",
			wantErrIs: ErrTooLong,
			lines:     1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := strings.Join(tt.mangle(testLog(t)), "")
			rep, err := Verify(strings.NewReader(data))
			require.Error(t, err)
			assert.EqualError(t, err, "audit: "+tt.wantErr)
			assert.ErrorIs(t, err, tt.wantErrIs)
			var le *LineError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tt.lines, rep.Lines)
			assert.Equal(t, tt.lines, le.Line-1)
		})
	}
}

func TestVerifyLimits(t *testing.T) {
	lines := testLog(t)
	full, err := Verify(strings.NewReader(strings.Join(lines, "")))
	require.NoError(t, err)

	// Truncating the tail leaves a valid log: only the anchored head shows it.
	cut, err := Verify(strings.NewReader(strings.Join(lines[:3], "")))
	require.NoError(t, err)
	assert.Equal(t, 3, cut.Lines)
	assert.NotEqual(t, full.LastHash, cut.LastHash)

	// So does rewriting a line and every line after it.
	rewritten := append([]string(nil), lines...)
	prev := hashOf(lines[1])
	for i := 2; i < len(rewritten); i++ {
		body := unseal(rewritten[i])
		body = body[:strings.LastIndex(body, `"prev":"`)] + `"prev":"` + prev + `"`
		if i == 2 {
			body = strings.Replace(body, `"deny"`, `"allow"`, 1)
		}
		rewritten[i] = seal(body)
		prev = hashOf(rewritten[i])
	}
	rep, err := Verify(strings.NewReader(strings.Join(rewritten, "")))
	require.NoError(t, err)
	assert.Equal(t, 5, rep.Lines)
	assert.NotEqual(t, full.LastHash, rep.LastHash, "the anchored head catches the rewrite")
}

func TestVerifyEmpty(t *testing.T) {
	rep, err := Verify(strings.NewReader(""))
	require.NoError(t, err)
	assert.Equal(t, Report{LastHash: Genesis}, rep)
}

func TestVerifyFile(t *testing.T) {
	path := logPath(t)
	writeLog(t, path, 2)
	rep, err := VerifyFile(path)
	require.NoError(t, err)
	require.NotNil(t, rep.Checkpoint)
	assert.Equal(t, Report{Lines: 2, First: t0.Add(time.Second), Last: t0.Add(2 * time.Second), LastHash: rep.LastHash, Checkpoint: rep.Checkpoint}, rep)
	assert.Equal(t, Checkpoint{Seq: 2, Hash: rep.LastHash, Time: rep.Checkpoint.Time}, *rep.Checkpoint)

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, bytes.Replace(data, []byte("event 2"), []byte("event 9"), 1), 0o600))
	_, err = VerifyFile(path)
	assert.EqualError(t, err, "audit: "+path+": line 2: hash mismatch: the line was edited")

	_, err = VerifyFile(path + ".missing")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

type failingReader struct{ r *strings.Reader }

func (f failingReader) Read(p []byte) (int, error) {
	if f.r.Len() == 0 {
		return 0, errors.New("disk on fire")
	}
	return f.r.Read(p[:min(len(p), 10)])
}

func TestVerifyReadError(t *testing.T) {
	lines := testLog(t)
	rep, err := Verify(failingReader{strings.NewReader(strings.Join(lines[:2], ""))})
	assert.EqualError(t, err, "audit: read line 3: disk on fire")
	assert.Equal(t, 2, rep.Lines)
}
