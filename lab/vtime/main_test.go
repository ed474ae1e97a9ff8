package vtime

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// requireShim turns an absent shim from a skip into a failure: make
// vtime-check passes it, so a build that asked for virtual time and did not
// get it cannot pass quietly.
var requireShim = flag.Bool("vtime.require", false, "fail, not skip, when the virtual-time overlay is absent")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// needShim stops the test when this build has no overlay: a skip naming the
// way to get it, or under -vtime.require a failure. A build whose gVisor
// constant was patched must have a working shim: anything else fails, loudly,
// because a gVisor or Go upgrade broke it.
func needShim(t *testing.T) {
	t.Helper()
	ok, why := Available()
	switch {
	case ok:
		t.Log(why)
	case !patched() && !*requireShim:
		t.Skip(why)
	case !patched():
		t.Fatalf("-vtime.require: virtual time is unavailable: %s", why)
	default:
		t.Fatalf("virtual time is broken in this build: %s", why)
	}
}
