package wgdev

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttachListenPort: Attach takes the device's port as wgctrl reads
// it from the UAPI socket, which for a userspace device is any decimal
// number; one that is no port is refused, not truncated to 16 bits
// (70000 used to become 127.0.0.1:4464, another socket).
func TestAttachListenPort(t *testing.T) {
	requireUAPI(t)
	tests := []struct {
		name    string
		port    int
		wantErr string
	}{
		{name: "zero", port: 0, wantErr: "wgdev: device %s has no listen port (is it up?)"},
		{name: "past 65535", port: 70000, wantErr: "wgdev: device %s: listen port 70000 out of range"},
		{name: "negative", port: -1, wantErr: "wgdev: device %s: listen port -1 out of range"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("lt%d-%d", os.Getpid()%100000, i)
			ln, err := ListenUAPI(name)
			require.NoError(t, err)
			srv, err := NewUAPIServer(ln, UAPIConfig{Device: &fakeDevice{get: fmt.Sprintf("listen_port=%d\n", tt.port)}})
			require.NoError(t, err)
			t.Cleanup(func() { _ = srv.Close() })

			d, err := Attach(AttachConfig{Name: name, Bind: newFakeBind()})
			if err == nil {
				d.Close()
			}
			assert.EqualError(t, err, fmt.Sprintf(tt.wantErr, name))
		})
	}
}
