package wgdev

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDevice records sets and answers gets.
type fakeDevice struct {
	get  string
	sets []string
	err  error
}

func (f *fakeDevice) IpcSet(s string) error { f.sets = append(f.sets, s); return f.err }
func (f *fakeDevice) IpcGet() (string, error) {
	return f.get, f.err
}
func (f *fakeDevice) Close() {}

// rw is a connection as serve sees it: requests in, answers out.
type rw struct {
	in  io.Reader
	out bytes.Buffer
}

func (c *rw) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *rw) Write(p []byte) (int, error) { return c.out.Write(p) }

func TestUAPIServe(t *testing.T) {
	tests := []struct {
		name     string
		req      string
		devErr   error
		want     string
		wantSets []string
		wantErr  string
	}{
		{name: "get rewrites endpoints", req: "get=1\n\n",
			want: "public_key=aa\nendpoint=10.0.0.1:9\nrx_bytes=1\nerrno=0\n\n"},
		{name: "set then get", req: "set=1\npublic_key=bb\nremove=true\n\nget=1\n\n",
			want:     "errno=0\n\npublic_key=aa\nendpoint=10.0.0.1:9\nrx_bytes=1\nerrno=0\n\n",
			wantSets: []string{"public_key=bb\nremove=true\n"}},
		{name: "set refused", req: "set=1\nendpoint=1.2.3.4:5\n\n", devErr: errors.New("no"),
			want: "errno=-22\n\n", wantSets: []string{"endpoint=1.2.3.4:5\n"}},
		{name: "get with trailing", req: "get=1\nx\n", want: "errno=-22\n\n", wantErr: "EOF"},
		{name: "unknown op", req: "frob=1\n", wantErr: `wgdev: uapi: unknown operation "frob=1"`},
		{name: "long line", req: "set=1\n" + strings.Repeat("a", 5000) + "\n", wantErr: "wgdev: uapi: line too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := &fakeDevice{get: "public_key=aa\nendpoint=lattice:x\nrx_bytes=1\n", err: tt.devErr}
			s := &UAPIServer{dev: dev, log: slog.New(slog.DiscardHandler), endpoint: func(v string) string {
				if v == "lattice:x" {
					return "10.0.0.1:9"
				}
				return ""
			}}
			c := &rw{in: strings.NewReader(tt.req)}
			err := s.serve(c)
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
			} else {
				assert.ErrorIs(t, err, io.EOF)
			}
			assert.Equal(t, tt.want, c.out.String())
			assert.Equal(t, tt.wantSets, dev.sets)
		})
	}
}

// TestUAPIServerClose: Close ends an idle connection and the accept loop.
func TestUAPIServerClose(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", dir+"/x.sock")
	require.NoError(t, err)
	s, err := NewUAPIServer(ln, UAPIConfig{Device: &fakeDevice{get: "listen_port=1\n"}})
	require.NoError(t, err)
	c, err := net.Dial("unix", dir+"/x.sock")
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("get=1\n\n"))
	require.NoError(t, err)
	buf := make([]byte, 64)
	n, err := io.ReadAtLeast(c, buf, len("listen_port=1\nerrno=0\n\n"))
	require.NoError(t, err)
	assert.Equal(t, "listen_port=1\nerrno=0\n\n", string(buf[:n]))
	require.NoError(t, s.Close())
	_, err = c.Read(buf)
	assert.ErrorIs(t, err, io.EOF, "the server closed the connection")
}

// FuzzUAPIServe: any byte stream on the socket ends in an error or EOF,
// never a panic, and what reaches the device is whole lines.
func FuzzUAPIServe(f *testing.F) {
	f.Add([]byte("get=1\n\n"))
	f.Add([]byte("set=1\npublic_key=aa\nendpoint=lattice:x\n\nget=1\n\n"))
	f.Add([]byte("set=1\n\n\n"))
	f.Fuzz(func(t *testing.T, req []byte) {
		dev := &fakeDevice{get: "endpoint=lattice:x\n"}
		s := &UAPIServer{dev: dev, log: slog.New(slog.DiscardHandler), endpoint: func(string) string { return "" }}
		if err := s.serve(&rw{in: bytes.NewReader(req)}); err == nil {
			t.Fatal("serve returned without an error")
		}
		for _, set := range dev.sets {
			if set != "" && !strings.HasSuffix(set, "\n") {
				t.Fatalf("set body %q does not end a line", set)
			}
		}
	})
}
