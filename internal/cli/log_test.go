package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logSome writes what a daemon's log holds: plain, grouped (With), quoted
// and error attributes, at two levels.
func logSome(log *slog.Logger) {
	log = log.With("component", "relay")
	log.Info("serving", "addr", "127.0.0.1:4443", "transport", "quic")
	log.Warn("peer refused", "peer", "web 1", "err", errors.New(`token "x" expired`), "attempt", 3)
	log.Debug("hidden at info")
}

// textKeys parses slog's text lines (key=value, values quoted with Go
// syntax when they need it) into each line's keys and values.
func textKeys(t *testing.T, line string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for line != "" {
		k, rest, ok := strings.Cut(line, "=")
		require.True(t, ok, "no = in %q", line)
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			require.NoError(t, err, "quoted value in %q", rest)
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
			rest = " " + rest
		}
		out[k] = v
		line = strings.TrimPrefix(rest, " ")
	}
	return out
}

func lines(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	require.NoError(t, sc.Err())
	return out
}

// TestLogFormatsSameFields: json lines parse one by one and carry the same
// keys, with the same values, as the text lines for the same records.
func TestLogFormatsSameFields(t *testing.T) {
	var text, js bytes.Buffer
	logSome(NewLogger(&text, LogText, slog.LevelInfo))
	logSome(NewLogger(&js, LogJSON, slog.LevelInfo))
	tl, jl := lines(t, text.Bytes()), lines(t, js.Bytes())
	require.Len(t, tl, 2, "text:\n%s", text.String())
	require.Len(t, jl, 2, "json:\n%s", js.String())
	for i := range tl {
		tk := textKeys(t, tl[i])
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(jl[i]), &obj), "json line %d: %s", i+1, jl[i])
		jk := map[string]string{}
		for k, v := range obj {
			switch v := v.(type) {
			case string:
				jk[k] = v
			default:
				b, _ := json.Marshal(v)
				jk[k] = string(b)
			}
		}
		assert.Equal(t, sortedKeys(tk), sortedKeys(jk), "line %d", i+1)
		for _, k := range []string{"level", "msg", "component", "peer", "err", "attempt", "addr"} {
			if v, ok := tk[k]; ok {
				assert.Equal(t, v, jk[k], "line %d key %s", i+1, k)
			}
		}
		assert.Contains(t, tk, "time")
		assert.Equal(t, "relay", jk["component"])
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestLogFlags: --log-format picks the handler, -v the level, and a bad
// format is a usage error naming the flag.
func TestLogFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, stderr string)
	}{
		{name: "default text", args: nil, check: func(t *testing.T, s string) {
			assert.True(t, strings.HasPrefix(s, "time="), "%q", s)
			assert.NotContains(t, s, "hidden")
		}},
		{name: "json", args: []string{"--log-format", "json"}, check: func(t *testing.T, s string) {
			for _, l := range lines(t, []byte(s)) {
				assert.True(t, json.Valid([]byte(l)), "%q", l)
			}
			assert.NotContains(t, s, "hidden")
		}},
		{name: "json verbose", args: []string{"--log-format=JSON", "-v"}, check: func(t *testing.T, s string) {
			assert.Contains(t, s, `"msg":"hidden at info"`)
		}},
		{name: "bad", args: []string{"--log-format", "xml"}, wantErr: `invalid argument "xml" for "--log-format" flag: want text or json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := &cobra.Command{Use: "daemon", Args: cobra.NoArgs}
			logger := LogFlags(cmd)
			cmd.RunE = func(*cobra.Command, []string) error { logSome(logger()); return nil }
			Configure(cmd)
			var stderr bytes.Buffer
			code := Execute(context.Background(), cmd, tc.args, io.Discard, &stderr)
			if tc.wantErr != "" {
				assert.Equal(t, ExitUsage, code)
				assert.Contains(t, stderr.String(), tc.wantErr)
				return
			}
			require.Equal(t, ExitOK, code, stderr.String())
			tc.check(t, stderr.String())
		})
	}
}
