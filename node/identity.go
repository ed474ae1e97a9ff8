// Package node is a Lattice node: it registers with control, reaches every
// peer through the relay at once, upgrades to a direct ICE path when the
// NATs allow it, and runs WireGuard over whichever path each peer is on.
package node

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"golang.org/x/crypto/curve25519"

	"github.com/latticelab/lattice/control"
)

// Identity is who a node is: its WireGuard key pair and what control
// assigned to it. It survives restarts through a CredentialStore, so a
// restarted node keeps its ID and overlay address.
type Identity struct {
	Name       string       `json:"name"`
	PrivateKey control.Key  `json:"private_key"`
	NodeID     string       `json:"node_id,omitempty"`
	Address    netip.Prefix `json:"address,omitzero"`
}

// PublicKey derives the public key.
func (id *Identity) PublicKey() control.Key { return PublicKey(id.PrivateKey) }

// NewPrivateKey returns a fresh, clamped X25519 private key (a WireGuard
// key).
func NewPrivateKey() (control.Key, error) {
	var k control.Key
	if _, err := rand.Read(k[:]); err != nil {
		return k, fmt.Errorf("generate key: %w", err)
	}
	k[0] &= 248
	k[31] = (k[31] & 127) | 64
	return k, nil
}

// PublicKey returns the X25519 public key of priv.
func PublicKey(priv control.Key) control.Key {
	var pub control.Key
	out, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		panic("x25519 with the base point cannot fail: " + err.Error())
	}
	copy(pub[:], out)
	return pub
}

// CredentialStore keeps a node's identity.
type CredentialStore interface {
	// Load returns the stored identity, or ErrNoCredentials when there
	// is none yet. Any other error (unreadable, corrupt, too open) must
	// stop the node: it is never answered by making a new identity.
	Load() (*Identity, error)
	// Save stores id, replacing what was there atomically.
	Save(id *Identity) error
}

// ErrNoCredentials means a store holds no identity yet.
var ErrNoCredentials = errors.New("node: no stored credentials")

// OpenCredentials returns the store a --state flag names: "mem:" for an
// ephemeral identity, anything else a JSON file path.
func OpenCredentials(spec string) CredentialStore {
	if spec == "mem:" || strings.HasPrefix(spec, "mem:") {
		return &memCredentials{}
	}
	return &FileCredentials{Path: spec}
}

type memCredentials struct{ id *Identity }

func (m *memCredentials) Load() (*Identity, error) {
	if m.id == nil {
		return nil, ErrNoCredentials
	}
	c := *m.id
	return &c, nil
}

func (m *memCredentials) Save(id *Identity) error {
	c := *id
	m.id = &c
	return nil
}

// FileCredentials keeps the identity in a JSON file with mode 0600,
// written atomically.
type FileCredentials struct{ Path string }

type credFile struct {
	Version int `json:"version"`
	Identity
}

func (f *FileCredentials) Load() (*Identity, error) {
	fi, err := os.Stat(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoCredentials
	}
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", f.Path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("credentials %s have mode %v: they hold a private key; chmod 600 %s", f.Path, fi.Mode().Perm(), f.Path)
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", f.Path, err)
	}
	var c credFile
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("credentials %s are corrupt (left untouched; move them away to start as a new node): %w", f.Path, err)
	}
	switch {
	case c.Version != 1:
		return nil, fmt.Errorf("credentials %s: unsupported version %d", f.Path, c.Version)
	case c.PrivateKey.IsZero():
		return nil, fmt.Errorf("credentials %s hold no private key", f.Path)
	}
	return &c.Identity, nil
}

func (f *FileCredentials) Save(id *Identity) error {
	b, err := json.MarshalIndent(credFile{Version: 1, Identity: *id}, "", "  ")
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return control.WriteFileAtomic(f.Path, b, 0o600)
}

// LoadOrCreate returns the stored identity, or creates one named name and
// saves it. A stored identity under another name is an error.
func LoadOrCreate(s CredentialStore, name string) (*Identity, bool, error) {
	id, err := s.Load()
	switch {
	case err == nil:
		if name != "" && id.Name != name {
			return nil, false, fmt.Errorf("stored identity is %q, not %q", id.Name, name)
		}
		return id, false, nil
	case !errors.Is(err, ErrNoCredentials):
		return nil, false, err
	}
	priv, err := NewPrivateKey()
	if err != nil {
		return nil, false, err
	}
	id = &Identity{Name: name, PrivateKey: priv}
	if err := s.Save(id); err != nil {
		return nil, false, err
	}
	return id, true, nil
}
