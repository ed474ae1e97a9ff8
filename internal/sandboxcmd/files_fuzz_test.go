package sandboxcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writePrivate writes b to a new file of mode 0600 named name.
func writePrivate(t *testing.T, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// FuzzReadCredentials reads arbitrary bytes as the proxy's USER:PASSWORD
// file. Nothing panics; what is accepted is the file's one USER:PASSWORD
// pair, each 1-255 bytes; a refusal is the one message naming the file,
// which quotes nothing of it.
func FuzzReadCredentials(f *testing.F) {
	f.Add([]byte("agent:s3cret-password\n"))
	f.Add([]byte("agent:"))
	f.Add([]byte(":pw"))
	f.Add([]byte("a:b:c"))
	f.Add([]byte("no colon"))
	f.Add(append([]byte("u:"), bytes.Repeat([]byte("p"), 256)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := writePrivate(t, "creds", b)
		other := writePrivate(t, "creds", []byte("no colon"))
		_, generic := readCredentials(other)
		c, err := readCredentials(path)
		user, pass, _ := strings.Cut(strings.TrimSpace(string(b)), ":")
		if err != nil {
			if generic == nil || err.Error() != strings.ReplaceAll(generic.Error(), other, path) {
				t.Fatalf("refusal %q, want %q", err, generic)
			}
			return
		}
		if c.Username != user || c.Password != pass || user == "" || pass == "" || len(user) > 255 || len(pass) > 255 {
			t.Fatalf("accepted %q:%q from %q", c.Username, c.Password, b)
		}
	})
}
