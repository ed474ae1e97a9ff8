package egress

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if code, ok := runChildIfAsked(); ok {
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
