package controlapi

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

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

// FuzzStampedRegisterExchange answers a node's registration with a
// control key by arbitrary replies. The client never panics, never sends
// its private key, and its first request carries a stamped proof that
// verifies with the control key's private half. It succeeds only on an
// answer without a challenge: to that first request; to the proof of the
// challenge that request got; or, after a bad_request or bad_proof
// refusal of it, to the proof of a challenge asked without one. Any other
// refusal comes back as an *Error.
func FuzzStampedRegisterExchange(f *testing.F) {
	// Fixed, not random: every fuzz worker process runs this setup.
	priv := key.PrivateFromRaw([32]byte{1, 2, 3})
	control := key.PrivateFromRaw([32]byte{9, 8, 7})
	at := time.Unix(1_800_000_000, 0)
	c := &Challenge{Key: key.PrivateFromRaw([32]byte{4}).Public(), Nonce: bytes.Repeat([]byte{7}, 16), Expires: 1_800_000_030_000}
	challenge, _ := json.Marshal(RegisterResponse{Challenge: c, ControlKey: control.Public()})
	done, _ := json.Marshal(RegisterResponse{NodeID: "n1", NATS: NATSCreds{User: "n1", Password: "p"}, ControlKey: control.Public()})
	badReq := []byte(`{"error":{"code":"bad_request","message":"challenge and proof come together or not at all"}}`)
	f.Add(done, done, done)
	f.Add(challenge, done, done)
	f.Add(badReq, challenge, done)
	f.Add([]byte(`{"error":{"code":"bad_proof","message":"used already"}}`), challenge, done)
	f.Add([]byte(`{"error":{"code":"bad_token","message":"no"}}`), challenge, done)
	f.Add(badReq, badReq, badReq)
	f.Add(challenge, challenge, challenge)
	f.Fuzz(func(t *testing.T, r1, r2, r3 []byte) {
		var sent []RegisterRequest
		replies := [][]byte{r1, r2, r3}
		secret := []byte(priv.RevealBase64())
		send := func(_ context.Context, body []byte) ([]byte, error) {
			if bytes.Contains(body, secret) {
				t.Fatalf("request %d carries the private key", len(sent)+1)
			}
			var req RegisterRequest
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatalf("request %d does not decode: %v", len(sent)+1, err)
			}
			if err := req.Validate(); err != nil {
				t.Fatalf("request %d is invalid: %v", len(sent)+1, err)
			}
			sent = append(sent, req)
			if len(sent) > len(replies) {
				t.Fatalf("%d requests", len(sent))
			}
			return replies[len(sent)-1], nil
		}
		j := Join{Token: testToken, Name: "laptop", Key: priv, ControlKey: control.Public(), Now: func() time.Time { return at }}
		resp, err := Register(context.Background(), j, send)

		first := sent[0]
		if first.Stamp != at.UnixNano() || first.ControlKey != control.Public() || first.Challenge != nil {
			t.Fatalf("first request %+v is not stamped", first)
		}
		cr := control.Reveal()
		csk, _ := ecdh.X25519().NewPrivateKey(cr[:])
		pp := priv.Public()
		ppk, _ := ecdh.X25519().NewPublicKey(pp[:])
		shared, _ := csk.ECDH(ppk)
		if !bytes.Equal(StampedProofMAC(shared, &first), first.Proof) {
			t.Fatal("the stamped proof does not verify with control's key")
		}
		decode := func(b []byte) (*RegisterResponse, *Error) {
			var r RegisterResponse
			err := DecodeReply(b, &r)
			var e *Error
			if errors.As(err, &e) {
				return nil, e
			}
			if err != nil {
				return nil, &Error{}
			}
			return &r, nil
		}
		a1, e1 := decode(r1)
		if err != nil {
			if resp != nil {
				t.Fatalf("response %+v with error %v", resp, err)
			}
			return
		}
		if resp.Challenge != nil {
			t.Fatalf("succeeded with a challenge %+v", resp.Challenge)
		}
		switch len(sent) {
		case 1:
			if a1 == nil || a1.Challenge != nil {
				t.Fatalf("succeeded on %q", r1)
			}
		case 2:
			if a1 == nil || a1.Challenge == nil || !reflect.DeepEqual(sent[1].Challenge, a1.Challenge) || sent[1].Stamp != 0 {
				t.Fatalf("second request %+v after %q", sent[1], r1)
			}
		case 3:
			a2, _ := decode(r2)
			if e1 == nil || (e1.Code != CodeBadRequest && e1.Code != CodeBadProof) || sent[1].Proof != nil || sent[1].Stamp != 0 ||
				a2 == nil || !reflect.DeepEqual(sent[2].Challenge, a2.Challenge) {
				t.Fatalf("fell back on %q to %+v, %+v", r1, sent[1], sent[2])
			}
		}
	})
}
