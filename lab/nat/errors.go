package nat

import "errors"

// ErrInvalidConfig is matched (with errors.Is) by every error that
// Config.Validate, Firewall.Validate, New, Profile and the Parse functions
// return. The error text names the offending field or value.
var ErrInvalidConfig = errors.New("invalid nat configuration")

// configError is an ErrInvalidConfig whose message is exactly msg, so that
// messages read "nat: port range 5000-4000 is empty" rather than carrying the
// sentinel's own text.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

// Is reports whether target is ErrInvalidConfig.
func (e *configError) Is(target error) bool { return target == ErrInvalidConfig }

func invalid(msg string) error { return &configError{msg: "nat: " + msg} }
