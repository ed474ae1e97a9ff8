package runsc

import (
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// builds are the directories the tests built static binaries into
// (staticAgent, staticFake), shared by the package's tests and removed
// when they end.
var (
	buildsMu sync.Mutex
	builds   []string
)

// buildDir makes a directory for a test binary, removed after the tests.
func buildDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err == nil {
		buildsMu.Lock()
		builds = append(builds, dir)
		buildsMu.Unlock()
	}
	return dir, err
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		for _, dir := range builds {
			_ = os.RemoveAll(dir)
		}
		os.Exit(code)
	}))
}
