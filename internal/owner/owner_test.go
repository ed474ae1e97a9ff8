package owner

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		uid, gid string
		euid     int
		want     Owner
		wantLog  string // in the debug log, "" for no log
	}{
		{name: "sudo", uid: "1000", gid: "100", want: Owner{uid: 1000, gid: 100, set: true}},
		{name: "nobody", uid: "65534", gid: "65534", want: Owner{uid: 65534, gid: 65534, set: true}},
		{name: "not root", uid: "1000", gid: "100", euid: 1000},
		{name: "no sudo", uid: "", gid: ""},
		{name: "root ran sudo", uid: "0", gid: "0"},
		{name: "a name", uid: "alice", gid: "100", wantLog: `SUDO_UID=alice SUDO_GID=100 err="strconv.ParseUint: parsing \"alice\": invalid syntax"`},
		{name: "negative", uid: "-1", gid: "100", wantLog: `SUDO_UID=-1`},
		{name: "chown's leave-unchanged", uid: "4294967295", gid: "100", wantLog: `value out of range`},
		{name: "beyond 32 bits", uid: "4294967296", gid: "100", wantLog: `value out of range`},
		{name: "gid missing", uid: "1000", gid: "", wantLog: `SUDO_GID="" err="strconv.ParseUint: parsing \"\": invalid syntax"`},
		{name: "spaces", uid: " 1000", gid: "100", wantLog: `invalid syntax`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			env := map[string]string{"SUDO_UID": tc.uid, "SUDO_GID": tc.gid}
			got := fromEnv(func(k string) string { return env[k] }, tc.euid, log)
			got.log = nil
			assert.Equal(t, tc.want, got)
			if tc.wantLog == "" {
				assert.Empty(t, logs.String())
				return
			}
			assert.Contains(t, logs.String(), "level=DEBUG")
			assert.Contains(t, logs.String(), tc.wantLog)
		})
	}
}
