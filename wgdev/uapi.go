package wgdev

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// setRequest is the body of a UAPI "set=1" as wgctrl takes it. Endpoints
// stay text: the node's name peers (node.EndpointString), and only the
// bridge knows which local address stands for each.
type setRequest struct {
	cfg wgtypes.Config
	// endpoints holds each peer's endpoint= value, by index in cfg.Peers.
	endpoints map[int]string
}

// maxUAPILines bounds a set body: a node's configuration is a few lines
// per peer.
const maxUAPILines = 1 << 16

// parseSet parses a UAPI set body (wireguard-go's IpcSet text, the
// cross-platform userspace protocol's keys). Errors name the line.
func parseSet(body string) (setRequest, error) {
	req := setRequest{endpoints: map[int]string{}}
	var peer *wgtypes.PeerConfig
	n := 0
	for line := range strings.Lines(body) {
		n++
		if n > maxUAPILines {
			return setRequest{}, fmt.Errorf("wgdev: uapi: more than %d lines", maxUAPILines)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return setRequest{}, fmt.Errorf("wgdev: uapi line %d: %q is not key=value", n, line)
		}
		if k == "public_key" {
			pk, err := parseKey(v)
			if err != nil {
				return setRequest{}, fmt.Errorf("wgdev: uapi line %d: public_key: %w", n, err)
			}
			req.cfg.Peers = append(req.cfg.Peers, wgtypes.PeerConfig{PublicKey: pk})
			peer = &req.cfg.Peers[len(req.cfg.Peers)-1]
			continue
		}
		var err error
		if peer == nil {
			err = req.deviceKey(k, v)
		} else {
			err = req.peerKey(peer, len(req.cfg.Peers)-1, k, v)
		}
		if err != nil {
			return setRequest{}, fmt.Errorf("wgdev: uapi line %d: %s: %w", n, k, err)
		}
	}
	return req, nil
}

func (r *setRequest) deviceKey(k, v string) error {
	switch k {
	case "private_key":
		pk, err := parseKey(v)
		if err != nil {
			return err
		}
		r.cfg.PrivateKey = &pk
	case "listen_port":
		p, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return fmt.Errorf("bad port %q", v)
		}
		port := int(p)
		r.cfg.ListenPort = &port
	case "fwmark":
		m, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return fmt.Errorf("bad mark %q", v)
		}
		mark := int(m)
		r.cfg.FirewallMark = &mark
	case "replace_peers":
		if v != "true" {
			return fmt.Errorf("want true, not %q", v)
		}
		r.cfg.ReplacePeers = true
	default:
		return fmt.Errorf("unknown device key")
	}
	return nil
}

func (r *setRequest) peerKey(p *wgtypes.PeerConfig, i int, k, v string) error {
	switch k {
	case "remove", "update_only", "replace_allowed_ips":
		if v != "true" {
			return fmt.Errorf("want true, not %q", v)
		}
		switch k {
		case "remove":
			p.Remove = true
		case "update_only":
			p.UpdateOnly = true
		default:
			p.ReplaceAllowedIPs = true
		}
	case "preshared_key":
		psk, err := parseKey(v)
		if err != nil {
			return err
		}
		p.PresharedKey = &psk
	case "endpoint":
		if v == "" {
			return fmt.Errorf("empty")
		}
		r.endpoints[i] = v
	case "persistent_keepalive_interval":
		s, err := strconv.ParseUint(v, 10, 16)
		if err != nil {
			return fmt.Errorf("bad interval %q", v)
		}
		d := time.Duration(s) * time.Second
		p.PersistentKeepaliveInterval = &d
	case "allowed_ip":
		pfx, err := netip.ParsePrefix(v)
		if err != nil {
			return err
		}
		pfx = pfx.Masked()
		p.AllowedIPs = append(p.AllowedIPs, net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())})
	case "protocol_version":
		if v != "1" {
			return fmt.Errorf("unsupported %q", v)
		}
	default:
		return fmt.Errorf("unknown peer key")
	}
	return nil
}

func parseKey(s string) (wgtypes.Key, error) {
	var k wgtypes.Key
	if len(s) != 2*len(k) {
		return k, fmt.Errorf("want %d hex digits, got %d", 2*len(k), len(s))
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, fmt.Errorf("not hex: %w", err)
	}
	return k, nil
}

// renderGet writes d as the body of a UAPI "get=1" answer, the way
// wireguard-go's IpcGet does; endpoint names each peer's endpoint (the
// bridge's local address back to the node's EndpointString) and may
// return "" to leave it out.
func renderGet(d *wgtypes.Device, endpoint func(*net.UDPAddr) string) string {
	var b strings.Builder
	kv := func(k, v string) { b.WriteString(k + "=" + v + "\n") }
	var zero wgtypes.Key
	if d.PrivateKey != zero {
		kv("private_key", hex.EncodeToString(d.PrivateKey[:]))
	}
	if d.ListenPort != 0 {
		kv("listen_port", strconv.Itoa(d.ListenPort))
	}
	if d.FirewallMark != 0 {
		kv("fwmark", strconv.Itoa(d.FirewallMark))
	}
	for _, p := range d.Peers {
		kv("public_key", hex.EncodeToString(p.PublicKey[:]))
		if p.PresharedKey != zero {
			kv("preshared_key", hex.EncodeToString(p.PresharedKey[:]))
		}
		kv("protocol_version", "1")
		if p.Endpoint != nil {
			if e := endpoint(p.Endpoint); e != "" {
				kv("endpoint", e)
			}
		}
		var sec, nsec int64
		if !p.LastHandshakeTime.IsZero() {
			sec, nsec = p.LastHandshakeTime.Unix(), int64(p.LastHandshakeTime.Nanosecond())
		}
		kv("last_handshake_time_sec", strconv.FormatInt(sec, 10))
		kv("last_handshake_time_nsec", strconv.FormatInt(nsec, 10))
		kv("tx_bytes", strconv.FormatInt(p.TransmitBytes, 10))
		kv("rx_bytes", strconv.FormatInt(p.ReceiveBytes, 10))
		kv("persistent_keepalive_interval", strconv.Itoa(int(p.PersistentKeepaliveInterval/time.Second)))
		for _, a := range p.AllowedIPs {
			kv("allowed_ip", a.String())
		}
	}
	return b.String()
}
