// Package edition says which edition of Lattice this binary is. The
// community edition has everything a mesh and a pod-mode sandbox need; the
// Pro edition (built with the "pro" tag: make EDITION=pro build) attaches
// more: egress policies, inbound forwarding, sandbox run and agent, and
// gvisor mode. Both editions compile the same code; in the community
// build a Pro entry point returns an error wrapping ErrProFeature.
package edition

import (
	"errors"
	"fmt"
)

// ErrProFeature is wrapped by the error a Pro entry point returns in the
// community edition.
var ErrProFeature = errors.New("is a Pro feature")

// pro is set by pro.go's init in the Pro build: the only place the tag
// attaches anything.
var pro bool

// Pro reports whether this is the Pro edition.
func Pro() bool { return pro }

// Name is "pro" or "community".
func Name() string {
	if pro {
		return "pro"
	}
	return "community"
}

// Require returns nil in the Pro edition and, in the community edition,
// "<feature> is a Pro feature" with how to get it.
func Require(feature string) error {
	if pro {
		return nil
	}
	return &proError{feature}
}

type proError struct{ feature string }

func (e *proError) Error() string {
	return fmt.Sprintf("%s %v (this is the community edition; build the Pro edition with: make EDITION=pro build)", e.feature, ErrProFeature)
}

func (e *proError) Unwrap() error { return ErrProFeature }
