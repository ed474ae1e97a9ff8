package controlapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/latticelab/lattice/key"
)

// FuzzRegisterExchange answers a node's two registration requests with
// arbitrary replies. The client never panics, never sends its private
// key, answers exactly the challenge it was given, and succeeds only
// after a challenge and then an answer without one; a refusal in the
// reply comes back as an *Error.
func FuzzRegisterExchange(f *testing.F) {
	priv := key.NewPrivate()
	// A challenge as control issues it: a one-time X25519 key, 16 bytes
	// of nonce, an expiry.
	c := &Challenge{Key: key.NewPrivate().Public(), Nonce: bytes.Repeat([]byte{7}, 16), Expires: 1_800_000_030_000}
	first, _ := json.Marshal(RegisterResponse{Challenge: c})
	second, _ := json.Marshal(RegisterResponse{NodeID: "n1", NATS: NATSCreds{User: "n1", Password: "p"}, Peers: []Peer{{NodeID: "n2", PublicKey: priv.Public()}}})
	f.Add(first, second)
	f.Add(first, first)
	f.Add([]byte(`{"node_id":"n1"}`), second)
	f.Add(first, []byte(`{"error":{"code":"bad_proof","message":"no"}}`))
	f.Add([]byte(`{"challenge":{"key":"AAAA","nonce":null,"expires":-1}}`), second)
	f.Add([]byte(`{"challenge":{"nonce":"`+string(bytes.Repeat([]byte("A"), 4096))+`"}}`), []byte(`null`))
	f.Fuzz(func(t *testing.T, r1, r2 []byte) {
		j := Join{Token: testToken, Name: "laptop", Key: priv}
		var sent [][]byte
		send := func(_ context.Context, body []byte) ([]byte, error) {
			sent = append(sent, body)
			if len(sent) == 1 {
				return r1, nil
			}
			return r2, nil
		}
		resp, err := Register(context.Background(), j, send)
		secret := []byte(priv.RevealBase64())
		for i, body := range sent {
			if bytes.Contains(body, secret) {
				t.Fatalf("request %d carries the private key", i+1)
			}
		}
		var firstReply RegisterResponse
		firstOK := DecodeReply(r1, &firstReply) == nil
		if len(sent) == 2 {
			var req RegisterRequest
			if err := json.Unmarshal(sent[1], &req); err != nil {
				t.Fatalf("second request does not decode: %v", err)
			}
			if !firstOK || firstReply.Challenge == nil || !reflect.DeepEqual(req.Challenge, firstReply.Challenge) || req.Proof == nil {
				t.Fatalf("answered challenge %+v with %+v", firstReply.Challenge, req.Challenge)
			}
		}
		var e ErrorReply
		refused := func(b []byte) bool { return json.Unmarshal(b, &e) == nil && e.Error != nil }
		if err != nil {
			if resp != nil {
				t.Fatalf("response %+v with error %v", resp, err)
			}
			var ce *Error
			if (refused(r1) || (len(sent) == 2 && refused(r2))) && !errors.As(err, &ce) {
				t.Fatalf("refusal came back as %T %v", err, err)
			}
			return
		}
		if len(sent) != 2 || resp.Challenge != nil {
			t.Fatalf("succeeded after %d requests, challenge %+v", len(sent), resp.Challenge)
		}
	})
}

// FuzzPeerEvent delivers arbitrary peer events and signals to a session.
// Nothing panics; an event reaches the node only if it decodes, and
// decodes to itself once encoded again; a signal only within
// MaxSignalBytes, with the sender from its header.
func FuzzPeerEvent(f *testing.F) {
	pub := key.NewPrivate().Public()
	ev, _ := json.Marshal(PeerEvent{Type: PeerAdded, Peer: Peer{NodeID: "n2", Name: "b", PublicKey: pub}})
	f.Add(ev, "n2", []byte("sealed"))
	f.Add([]byte(`{"type":"remove","peer":{"node_id":"n2"}}`), "", []byte(nil))
	f.Add([]byte(`{"type":"offline","peer":{"address":"100.64.0.2/10","public_key":"!!"}}`), "n3", make([]byte, MaxSignalBytes+1))
	f.Add([]byte(`{"type":"update","peer":{"address":"100.64.0.2"}}`), "x", make([]byte, MaxSignalBytes))
	f.Fuzz(func(t *testing.T, data []byte, from string, signal []byte) {
		var got []PeerEvent
		var sigs int
		s := &Session{
			onPeer: func(ev PeerEvent) { got = append(got, ev) },
			onSignal: func(f string, p []byte) {
				sigs++
				if f != from || !bytes.Equal(p, signal) {
					t.Fatalf("signal from %q (%d bytes), sent from %q (%d bytes)", f, len(p), from, len(signal))
				}
			},
		}
		s.peerMsg(&nats.Msg{Data: data})
		var want PeerEvent
		decodes := json.Unmarshal(data, &want) == nil
		if len(got) != boolInt(decodes) {
			t.Fatalf("%d events delivered; decodes %t", len(got), decodes)
		}
		if decodes {
			again, err := json.Marshal(got[0])
			if err != nil {
				t.Fatalf("delivered event does not encode: %v", err)
			}
			var back PeerEvent
			if err := json.Unmarshal(again, &back); err != nil || !reflect.DeepEqual(back, got[0]) {
				t.Fatalf("event %+v encodes as %s, decoding to %+v (%v)", got[0], again, back, err)
			}
		}
		m := &nats.Msg{Data: signal, Header: nats.Header{}}
		m.Header.Set(HeaderFrom, from)
		s.signalMsg(m)
		if want := len(signal) <= MaxSignalBytes; (sigs == 1) != want {
			t.Fatalf("%d-byte signal delivered %d times", len(signal), sigs)
		}
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
