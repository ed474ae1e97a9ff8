package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/latticelab/lattice/internal/atomicfile"
	"github.com/latticelab/lattice/key"
)

// Identity is who a node is: its WireGuard key pair and what control
// assigned to it. It survives restarts through a CredentialStore, so a
// restarted node keeps its ID and overlay address. It prints without its
// private key.
type Identity struct {
	Name string
	// Private is the node's WireGuard private key.
	Private key.Private
	NodeID  string
	Address netip.Prefix
	// ControlKey is control's register key from the last registration's
	// answer (public): the next registration, after a restart too, proves
	// the private key in one request (controlapi.Join.ControlKey).
	ControlKey key.Public
}

// newIdentity returns an identity with private key priv.
func newIdentity(name string, priv key.Private) *Identity {
	return &Identity{Name: name, Private: priv}
}

// PublicKey derives the public key.
func (id *Identity) PublicKey() key.Public { return id.Private.Public() }

// String describes id by its name, public key and assignment.
func (id Identity) String() string {
	return fmt.Sprintf("{Name:%s PublicKey:%s NodeID:%s Address:%s}", id.Name, id.Private.Public(), id.NodeID, id.Address)
}

// Format prints String for every verb, so %+v and %#v show the public key
// rather than Private's placeholder.
func (id Identity) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, id.String()) }

// LogValue implements slog.LogValuer without the private key.
func (id Identity) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", id.Name), slog.String("public_key", id.Private.Public().String()),
		slog.String("node_id", id.NodeID), slog.String("address", id.Address.String()))
}

var (
	_ fmt.Formatter  = Identity{}
	_ slog.LogValuer = Identity{}
)

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

// credFile is the file's layout (version 1). The private key is the
// standard base64 `wg genkey` prints.
type credFile struct {
	Version    int          `json:"version"`
	Name       string       `json:"name"`
	PrivateKey string       `json:"private_key"`
	NodeID     string       `json:"node_id,omitempty"`
	Address    netip.Prefix `json:"address,omitzero"`
	ControlKey string       `json:"control_key,omitempty"` // hex, as in a control URL's key=
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
	case c.PrivateKey == "":
		return nil, fmt.Errorf("credentials %s hold no private key", f.Path)
	}
	priv, err := key.ParsePrivate(c.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("credentials %s are corrupt (left untouched; move them away to start as a new node): private_key: %w", f.Path, err)
	}
	if priv.IsZero() {
		return nil, fmt.Errorf("credentials %s hold no private key", f.Path)
	}
	id := newIdentity(c.Name, priv)
	id.NodeID, id.Address = c.NodeID, c.Address
	if c.ControlKey != "" {
		// Only an optimisation: a key that does not parse is left out
		// (the registration then takes a challenge), never fatal.
		if ck, err := key.ParsePublicHex(c.ControlKey); err == nil {
			id.ControlKey = ck
		}
	}
	return id, nil
}

func (f *FileCredentials) Save(id *Identity) error {
	c := credFile{Version: 1, Name: id.Name, PrivateKey: id.Private.RevealBase64(), NodeID: id.NodeID, Address: id.Address}
	if !id.ControlKey.IsZero() {
		c.ControlKey = id.ControlKey.Hex()
	}
	b, err := json.MarshalIndent(c, "", "  ") //nolint:gosec // the identity file is the private key's home: written 0600, atomically
	if err != nil {
		return fmt.Errorf("credentials: %w", err)
	}
	return atomicfile.WriteFile(f.Path, b, 0o600)
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
	id = newIdentity(name, key.NewPrivate())
	if err := s.Save(id); err != nil {
		return nil, false, err
	}
	return id, true, nil
}
