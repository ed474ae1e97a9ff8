package control

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/key"
)

// FuzzDecodeRequest: registration bodies from the network never panic the
// parser, and whatever it accepts is valid.
func FuzzDecodeRequest(f *testing.F) {
	k := key.Public{1, 2, 3}
	f.Add([]byte(`{"token":"` + testToken + `","name":"laptop","public_key":"` + k.String() + `"}`))
	f.Add([]byte(`{"token":"x","name":"Bad","public_key":"AAAA"}`))
	f.Add([]byte(`{"token":"` + testToken + `","name":"laptop","public_key":"` + k.String() + `","stamp":5,"control_key":"` + k.String() + `","proof":"AA=="}`))
	f.Add([]byte(`{"token":"` + testToken + `","name":"laptop","public_key":"` + k.String() + `","control_key":"` + k.String() + `"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			if _, ok := err.(*controlapi.Error); !ok { //nolint:errorlint // the error itself must be an *Error, not wrap one
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted an invalid request: %v", err)
		}
	})
}

// FuzzVerifyProof: whatever a registration carries as its challenge and
// proof, verification refuses it with an *Error, never panics, and never
// accepts one not made with the key.
func FuzzVerifyProof(f *testing.F) {
	secret := []byte("fuzz secret 0123456789abcdef0123")
	// Fixed, not random: every fuzz worker process runs this setup.
	priv := key.PrivateFromRaw([32]byte{1, 2, 3, 4, 5, 6, 7, 8})
	now := time.UnixMilli(1_800_000_000_000)
	c, _, err := newChallenge(secret, priv.Public(), now)
	if err != nil {
		f.Fatal(err)
	}
	proof, _ := controlapi.ProveKey(priv, c, "laptop")
	good, _ := json.Marshal(controlapi.RegisterRequest{Token: testToken, Name: "laptop", PublicKey: priv.Public(), Challenge: c, Proof: proof})
	f.Add(good)
	f.Add([]byte(`{"token":"` + testToken + `","name":"x","public_key":"` + priv.Public().String() + `","challenge":{"key":"AAAA","nonce":"","expires":1},"proof":"AA=="}`))
	f.Add([]byte(`{"challenge":{"nonce":null},"proof":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil || r.Proof == nil {
			return
		}
		err = verifyProof(secret, r, now)
		if err == nil {
			if r.PublicKey != priv.Public() || r.Name != "laptop" {
				t.Fatalf("accepted a proof for %s %q", r.PublicKey, r.Name)
			}
			return
		}
		var e *controlapi.Error
		if !errors.As(err, &e) || e.Code != controlapi.CodeBadProof {
			t.Fatalf("refusal %v is not a bad_proof *Error", err)
		}
	})
}

// FuzzJudgeStamp: whatever a registration carries as its stamp and proof,
// judge never panics, refuses with a bad_proof *Error or asks for a
// challenge, and accepts only a proof made with the key, for the name,
// token, stamp and control key it was made for.
func FuzzJudgeStamp(f *testing.F) {
	// Fixed, not random: every fuzz worker process runs this setup.
	st, err := newStamper([]byte("fuzz secret 0123456789abcdef0123"))
	if err != nil {
		f.Fatal(err)
	}
	priv := key.PrivateFromRaw([32]byte{1, 2, 3, 4, 5, 6, 7, 8})
	now := time.Unix(1_800_000_000, 0)
	good := controlapi.RegisterRequest{Token: testToken, Name: "laptop", PublicKey: priv.Public(), SharedEvents: true}
	if err := controlapi.ProveKeyAt(priv, st.pub, now, &good); err != nil {
		f.Fatal(err)
	}
	b, _ := json.Marshal(good)
	f.Add(b)
	late := good
	late.Stamp += int64(time.Minute)
	b, _ = json.Marshal(late)
	f.Add(b)
	f.Add([]byte(`{"token":"` + testToken + `","name":"x","public_key":"` + priv.Public().String() + `","stamp":1,"control_key":"` + st.pub.String() + `","proof":"AA=="}`))
	f.Add([]byte(`{"stamp":-9223372036854775808,"control_key":"AAAA","proof":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil || r.Stamp == 0 {
			return
		}
		ok, err := st.judge(r, now)
		if err != nil {
			var e *controlapi.Error
			if ok || !errors.As(err, &e) || e.Code != controlapi.CodeBadProof {
				t.Fatalf("refusal %v (ok %t) is not a bad_proof *Error", err, ok)
			}
			return
		}
		if ok && (r.PublicKey != good.PublicKey || r.Name != good.Name || r.Token != good.Token || r.Stamp != good.Stamp || r.SharedEvents != good.SharedEvents) {
			t.Fatalf("accepted a proof for %+v", r)
		}
	})
}

// FuzzRegisterReply: whatever control answers, the node's parsing of a
// registration reply, a peer page and a challenge never panics.
func FuzzRegisterReply(f *testing.F) {
	priv := key.NewPrivate()
	c, _, _ := newChallenge([]byte("s"), priv.Public(), time.Now())
	b, _ := json.Marshal(controlapi.RegisterResponse{Challenge: c})
	f.Add(b)
	f.Add([]byte(`{"node_id":"n1","address":"100.64.0.1/10","peers":[],"more_peers":true,"nats":{"user":"n1"}}`))
	f.Add([]byte(`{"peers":[{"node_id":"n2","public_key":"` + priv.Public().String() + `"}],"more":true}`))
	f.Add([]byte(`{"error":{"code":"bad_proof","message":"x"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp controlapi.RegisterResponse
		if controlapi.DecodeReply(b, &resp) == nil && resp.Challenge != nil {
			_, _ = controlapi.ProveKey(priv, resp.Challenge, "laptop")
		}
		var page controlapi.PeerPage
		_ = controlapi.DecodeReply(b, &page)
	})
}

// FuzzAllowedReply: the reply check never panics and never allows a
// subject outside the requester's inbox.
func FuzzAllowedReply(f *testing.F) {
	f.Add("lattice.v1.node.nabc.peers.get", "_INBOX.nabc.x")
	f.Add(controlapi.SubjectRegister, "_INBOX.join.0123456789abcdef0123.x")
	f.Add("lattice.v1.node.nabc.signal.out", "lattice.v1.node.nother.signal.in")
	f.Fuzz(func(t *testing.T, subject, reply string) {
		if !allowedReply(subject, reply) || reply == "" {
			return
		}
		if subject == controlapi.SubjectRegister {
			if !strings.HasPrefix(reply, controlapi.InboxPrefix+"."+joinPrefix) {
				t.Fatalf("register reply %q allowed", reply)
			}
			return
		}
		if !strings.HasPrefix(reply, controlapi.InboxPrefix+"."+nodeOf(subject)+".") || !strings.HasPrefix(subject, subjectNodes) {
			t.Fatalf("%s: reply %q allowed", subject, reply)
		}
	})
}
