package node

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/latticelab/lattice/key"
)

// FuzzFileCredentials loads arbitrary bytes as a node's credentials file.
// Nothing panics; a refusal names the file and never quotes the private
// key; what loads saves and loads back as the same identity.
func FuzzFileCredentials(f *testing.F) {
	priv := key.NewPrivate()
	good, _ := json.Marshal(credFile{Version: 1, Name: "laptop", PrivateKey: priv.RevealBase64(), NodeID: "n1", Address: netip.MustParsePrefix("100.64.0.7/10")})
	f.Add(good)
	f.Add([]byte(`{"version":1,"name":"x","private_key":"` + priv.RevealBase64() + `"}`))
	f.Add([]byte(`{"version":2,"private_key":"` + priv.RevealBase64() + `"}`))
	f.Add([]byte(`{"version":1,"private_key":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`))
	f.Add([]byte(`{"version":1,"private_key":"not base64 at all, a secret"}`))
	f.Add([]byte(`{"version":1,"private_key":"` + priv.RevealBase64() + `","address":"100.64.0.1/33"}`))
	f.Add([]byte(`{"version":1,"private_key":7}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "node.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		id, err := (&FileCredentials{Path: path}).Load()
		if err != nil {
			if id != nil {
				t.Fatalf("identity %v with error %v", id, err)
			}
			if errors.Is(err, ErrNoCredentials) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			var c struct {
				PrivateKey string `json:"private_key"`
			}
			if json.Unmarshal(b, &c) == nil && len(c.PrivateKey) >= 8 && strings.Contains(err.Error(), c.PrivateKey) {
				t.Fatalf("error quotes the private key: %v", err)
			}
			return
		}
		if id.Private.IsZero() {
			t.Fatal("loaded a zero private key")
		}
		again := &FileCredentials{Path: filepath.Join(dir, "again.json")}
		if err := again.Save(id); err != nil {
			t.Fatalf("save what loaded: %v", err)
		}
		id2, err := again.Load()
		if err != nil {
			t.Fatalf("load what was saved: %v", err)
		}
		if !id2.Private.Equal(id.Private) || id2.Name != id.Name || id2.NodeID != id.NodeID || id2.Address != id.Address {
			t.Fatalf("saved %v, loaded back %v", id, id2)
		}
	})
}
