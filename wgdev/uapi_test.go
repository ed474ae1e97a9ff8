package wgdev

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func hexKey(b byte) string {
	return strings.Repeat(string("0123456789abcdef"[b>>4])+string("0123456789abcdef"[b&15]), 32)
}

func TestParseSet(t *testing.T) {
	k1, k2 := hexKey(0x11), hexKey(0x22)
	tests := []struct {
		name    string
		body    string
		check   func(t *testing.T, r setRequest)
		wantErr string
	}{
		{name: "node peer", body: "public_key=" + k1 + "\nreplace_allowed_ips=true\nendpoint=lattice:abc\nallowed_ip=100.64.0.2/32\npersistent_keepalive_interval=25\n",
			check: func(t *testing.T, r setRequest) {
				require.Len(t, r.cfg.Peers, 1)
				p := r.cfg.Peers[0]
				assert.Equal(t, byte(0x11), p.PublicKey[0])
				assert.True(t, p.ReplaceAllowedIPs)
				assert.Equal(t, "lattice:abc", r.endpoints[0])
				assert.Equal(t, 25*time.Second, *p.PersistentKeepaliveInterval)
				require.Len(t, p.AllowedIPs, 1)
				assert.Equal(t, "100.64.0.2/32", p.AllowedIPs[0].String())
			}},
		{name: "device keys", body: "private_key=" + k2 + "\nlisten_port=51821\nfwmark=0\nreplace_peers=true\n",
			check: func(t *testing.T, r setRequest) {
				assert.Equal(t, byte(0x22), r.cfg.PrivateKey[0])
				assert.Equal(t, 51821, *r.cfg.ListenPort)
				assert.Equal(t, 0, *r.cfg.FirewallMark)
				assert.True(t, r.cfg.ReplacePeers)
			}},
		{name: "remove and update", body: "public_key=" + k1 + "\nremove=true\npublic_key=" + k2 + "\nupdate_only=true\nprotocol_version=1\n",
			check: func(t *testing.T, r setRequest) {
				require.Len(t, r.cfg.Peers, 2)
				assert.True(t, r.cfg.Peers[0].Remove)
				assert.True(t, r.cfg.Peers[1].UpdateOnly)
			}},
		{name: "allowed ip masked", body: "public_key=" + k1 + "\nallowed_ip=10.1.2.3/8\n",
			check: func(t *testing.T, r setRequest) { assert.Equal(t, "10.0.0.0/8", r.cfg.Peers[0].AllowedIPs[0].String()) }},
		{name: "no equals", body: "public_key\n", wantErr: `wgdev: uapi line 1: "public_key" is not key=value`},
		{name: "short key", body: "private_key=abcd\n", wantErr: "wgdev: uapi line 1: private_key: want 64 hex digits, got 4"},
		{name: "bad port", body: "listen_port=70000\n", wantErr: `wgdev: uapi line 1: listen_port: bad port "70000"`},
		{name: "peer key before peer", body: "endpoint=1.2.3.4:5\n", wantErr: "wgdev: uapi line 1: endpoint: unknown device key"},
		{name: "unknown peer key", body: "public_key=" + k1 + "\nfoo=1\n", wantErr: "wgdev: uapi line 2: foo: unknown peer key"},
		{name: "remove false", body: "public_key=" + k1 + "\nremove=false\n", wantErr: `wgdev: uapi line 2: remove: want true, not "false"`},
		{name: "bad prefix", body: "public_key=" + k1 + "\nallowed_ip=10.0.0.0/33\n", wantErr: `wgdev: uapi line 2: allowed_ip: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range`},
		{name: "protocol 2", body: "public_key=" + k1 + "\nprotocol_version=2\n", wantErr: `wgdev: uapi line 2: protocol_version: unsupported "2"`},
		{name: "empty endpoint", body: "public_key=" + k1 + "\nendpoint=\n", wantErr: "wgdev: uapi line 2: endpoint: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := parseSet(tt.body)
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, r)
		})
	}
}

// TestRenderGet: what renderGet writes parses back (as set keys) to the
// same peers, and the handshake and counters are where node/status.go
// and wgctrl's userspace client read them.
func TestRenderGet(t *testing.T) {
	var pk, peer wgtypes.Key
	pk[0], peer[0] = 1, 2
	hs := time.Unix(1700000000, 123)
	_, ipn, _ := net.ParseCIDR("100.64.0.2/32")
	d := &wgtypes.Device{PrivateKey: pk, ListenPort: 40000, Peers: []wgtypes.Peer{{
		PublicKey: peer, Endpoint: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, LastHandshakeTime: hs,
		ReceiveBytes: 7, TransmitBytes: 9, PersistentKeepaliveInterval: 25 * time.Second, AllowedIPs: []net.IPNet{*ipn},
	}, {PublicKey: pk}}}
	got := renderGet(d, func(a *net.UDPAddr) string { return "lattice:" + a.String() })
	assert.Contains(t, got, "listen_port=40000\n")
	assert.Contains(t, got, "endpoint=lattice:127.0.0.1:5555\n")
	assert.Contains(t, got, "last_handshake_time_sec=1700000000\nlast_handshake_time_nsec=123\ntx_bytes=9\nrx_bytes=7\n")
	assert.Contains(t, got, "public_key="+hexKey(1)[:2], "second peer")
	assert.Contains(t, got, "last_handshake_time_sec=0\nlast_handshake_time_nsec=0\n", "no handshake is zero, not year 1")
	var set []string
	for line := range strings.Lines(got) {
		k, _, _ := strings.Cut(line, "=")
		switch k {
		case "private_key", "listen_port", "public_key", "endpoint", "persistent_keepalive_interval", "allowed_ip", "protocol_version":
			set = append(set, line)
		}
	}
	r, err := parseSet(strings.Join(set, ""))
	require.NoError(t, err)
	require.Len(t, r.cfg.Peers, 2)
	assert.Equal(t, peer, r.cfg.Peers[0].PublicKey)
	assert.Equal(t, "100.64.0.2/32", r.cfg.Peers[0].AllowedIPs[0].String())
	assert.Equal(t, "lattice:127.0.0.1:5555", r.endpoints[0])
}

// FuzzParseSet: any body parses or fails with an error, never a panic,
// and a parsed request has one endpoint at most per peer.
func FuzzParseSet(f *testing.F) {
	f.Add("public_key=" + hexKey(1) + "\nreplace_allowed_ips=true\nendpoint=lattice:x\nallowed_ip=100.64.0.2/32\npersistent_keepalive_interval=25\n")
	f.Add("private_key=" + hexKey(2) + "\nlisten_port=1\nfwmark=3\nreplace_peers=true\n")
	f.Add("public_key=" + hexKey(3) + "\nremove=true\n")
	f.Fuzz(func(t *testing.T, body string) {
		r, err := parseSet(body)
		if err != nil {
			return
		}
		for i := range r.endpoints {
			if i < 0 || i >= len(r.cfg.Peers) {
				t.Fatalf("endpoint for peer %d of %d", i, len(r.cfg.Peers))
			}
		}
	})
}
