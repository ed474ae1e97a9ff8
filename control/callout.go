package control

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// On an external NATS, the embedded server's authenticator is not there
// to confine each node to its own subjects. Control then serves the
// server's auth callout: nats-server hands every login (but the callout's
// own users) to control as a signed request on SubjectAuthCallout;
// control decides as the authenticator does, and answers with a user JWT
// carrying exactly that login's permissions, signed with the account key
// the server's configuration names as the callout's issuer:
//
//	authorization {
//	  users: [ { user: lattice-control, password: "…" } ]
//	  auth_callout { issuer: "A…(AuthCallout.IssuerSeed's public key)", auth_users: [ lattice-control ] }
//	}
//
// Control connects as one of auth_users (NATSUser), which the callout
// leaves alone. A refused login is logged with the user it claimed.

// SubjectAuthCallout is where nats-server sends authorization requests.
const SubjectAuthCallout = "$SYS.REQ.USER.AUTH"

// AuthCallout configures control as an external NATS's auth callout.
type AuthCallout struct {
	// IssuerSeed is the seed of the account nkey ("SA…") that signs the
	// answers; the server's auth_callout issuer is its public key.
	// Required.
	IssuerSeed []byte
	// Account the admitted users belong to. If empty, the global account
	// ("$G", for a server configuration without accounts).
	Account string
	// UserTTL bounds a user JWT's life: the server drops the connection
	// when it expires, and the node logs in again (through the callout).
	// If zero, 24h.
	UserTTL time.Duration
}

type callout struct {
	kp      nkeys.KeyPair
	account string
	ttl     time.Duration
}

func newCallout(c *AuthCallout) (*callout, error) {
	kp, err := nkeys.FromSeed(c.IssuerSeed)
	if err != nil {
		return nil, fmt.Errorf("control: auth callout issuer seed: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, errors.New("control: auth callout issuer seed: not an account key (want a seed starting SA)")
	}
	co := &callout{kp: kp, account: c.Account, ttl: c.UserTTL}
	if co.account == "" {
		co.account = "$G"
	}
	if co.ttl == 0 {
		co.ttl = 24 * time.Hour
	}
	return co, nil
}

// serveCallout subscribes to the server's authorization requests.
func (s *Server) serveCallout() error {
	if _, err := s.nc.QueueSubscribe(SubjectAuthCallout, "lattice-callout", s.onAuthRequest); err != nil {
		return fmt.Errorf("control: subscribe %s: %w", SubjectAuthCallout, err)
	}
	return s.nc.Flush()
}

func (s *Server) onAuthRequest(m *nats.Msg) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		s.log.Warn("auth callout: malformed request", "err", err)
		return // unanswered: the server refuses the login
	}
	user, host := req.ConnectOptions.Username, req.ClientInformation.Host
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	perms := s.auth.decide(user, req.ConnectOptions.Password)
	if perms == nil {
		s.refused.Add(1)
		s.log.Warn("NATS login refused", "user", truncate(user, 80), "client", host, "server", req.Server.Name)
		resp.Error = "not a registered node, or a wrong password"
	} else if resp.Jwt, err = s.callout.userJWT(req.UserNkey, user, perms, s.cfg.Now()); err != nil {
		s.log.Error("auth callout: sign user", "user", truncate(user, 80), "err", err)
		resp.Error = "control could not sign the login"
	}
	tok, err := resp.Encode(s.callout.kp)
	if err != nil {
		s.log.Error("auth callout: sign answer", "err", err)
		return
	}
	if err := m.Respond([]byte(tok)); err != nil {
		s.log.Warn("auth callout: answer", "err", err)
	}
}

// userJWT is the user JWT for a login as name with perms.
func (c *callout) userJWT(nkey, name string, perms *server.Permissions, now time.Time) (string, error) {
	uc := jwt.NewUserClaims(nkey)
	uc.Name = name
	uc.Audience = c.account
	uc.Expires = now.Add(c.ttl).Unix()
	if p := perms.Publish; p != nil {
		uc.Pub.Allow.Add(p.Allow...)
	}
	if p := perms.Subscribe; p != nil {
		uc.Sub.Allow.Add(p.Allow...)
	}
	return uc.Encode(c.kp)
}

// PublicKeyOfSeed returns the public key of an nkey seed (the
// auth_callout issuer for a server configuration).
func PublicKeyOfSeed(seed []byte) (string, error) {
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return "", fmt.Errorf("nkey seed: %w", err)
	}
	return kp.PublicKey()
}
