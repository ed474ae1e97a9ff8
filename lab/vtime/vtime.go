package vtime

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go"
	"golang.zx2c4.com/wireguard/device"
	"gvisor.dev/gvisor/pkg/sleep"
	gsync "gvisor.dev/gvisor/pkg/sync"
)

// HowTo is the one line that says how to get virtual time.
const HowTo = "build with the overlay: go test $(scripts/vtime-flags.sh) ... (or make vtime-check)"

// plainSelect is the runtime's waitReasonSelect, the value gVisor's
// WaitReasonSelect has unpatched. It has been 18 since Go 1.11.
const plainSelect = 18

// durableSelect is how the runtime prints waitReasonSynctestSelect in a
// goroutine's traceback header; synctest counts that reason as durable.
const durableSelect = "select (durable)"

var (
	once   sync.Once
	avail  bool
	reason string
)

// Available reports whether gVisor's sleepers park durably in this build, so
// that a synctest bubble holding gVisor stacks advances its clock. The reason
// says what was found, and when virtual time is unavailable, how to get it.
// The check parks one goroutine in a gVisor Sleeper, once per process; it
// reads no clock and may be called inside a bubble or outside.
func Available() (ok bool, why string) {
	once.Do(func() { avail, reason = check() })
	return avail, reason
}

func check() (bool, string) {
	if !patched() {
		return false, "vtime: gVisor's sleepers park as plain select, which synctest does not count as durable; " + HowTo
	}
	state, err := sleeperState()
	if err != nil {
		return false, err.Error()
	}
	if l := plainLock(); l != "" {
		return false, "vtime: gVisor is patched but " + l + ", whose waits would stop the bubble's clock: " +
			"the overlay is not this script's; regenerate it with scripts/vtime-flags.sh"
	}
	if state != durableSelect {
		return false, fmt.Sprintf("vtime: gVisor's WaitReasonSelect is %d, which Go %s names %q, not %q: "+
			"the overlay does not fit this Go; regenerate it with scripts/vtime-flags.sh",
			gsync.WaitReasonSelect, runtime.Version(), state, durableSelect)
	}
	return true, fmt.Sprintf("vtime: gVisor's sleepers park as %q (WaitReasonSelect %d, Go %s)",
		state, gsync.WaitReasonSelect, runtime.Version())
}

// sleeperState parks a goroutine in a gVisor Sleeper and returns the wait
// reason its traceback shows.
func sleeperState() (string, error) {
	var s sleep.Sleeper
	var w sleep.Waker
	s.AddWaker(&w)
	done := make(chan struct{})
	go func() {
		defer close(done)
		parkInSleeper(&s)
	}()
	defer func() {
		w.Assert()
		<-done
		s.Done()
	}()
	buf := make([]byte, 64<<10)
	// Yield rather than sleep: this may run inside a bubble, where a sleep
	// would wait for the very goroutine under test to block durably.
	for range 100_000 {
		runtime.Gosched()
		n := runtime.Stack(buf, true)
		for n == len(buf) {
			buf = make([]byte, 2*len(buf))
			n = runtime.Stack(buf, true)
		}
		state, found := stateOf(buf[:n], probeFunc)
		if found && state != "running" && state != "runnable" {
			return state, nil
		}
	}
	return "", errors.New("vtime: the probe goroutine never parked in gVisor's Sleeper.Fetch")
}

// probeFunc names parkInSleeper in tracebacks.
const probeFunc = "lab/vtime.parkInSleeper("

//go:noinline
func parkInSleeper(s *sleep.Sleeper) { s.Fetch(true) }

// stateOf finds the goroutine whose traceback mentions fn and returns the
// wait reason of its header ("goroutine 7 [select (durable), 2 minutes]:").
func stateOf(dump []byte, fn string) (string, bool) {
	for g := range bytes.SplitSeq(dump, []byte("\n\n")) {
		if !bytes.Contains(g, []byte(fn)) {
			continue
		}
		header, _, _ := bytes.Cut(g, []byte("\n"))
		_, state, ok := bytes.Cut(header, []byte("["))
		if !ok {
			return "", false
		}
		state, _, _ = bytes.Cut(state, []byte("]"))
		state, _, _ = bytes.Cut(state, []byte(", "))
		return string(state), true
	}
	return "", false
}

// patched reports whether this build carries the overlay: gVisor's constant
// no longer names the plain select.
func patched() bool { return gsync.WaitReasonSelect != plainSelect }

// durableLocks are the locks the overlay swaps for ones whose waits are
// durable in a bubble: each is held across a wait on the network.
var durableLocks = []struct {
	name  string // for messages
	typ   reflect.Type
	field string
	want  string // the overlay's type
}{
	{"nats.go's connection lock", reflect.TypeFor[nats.Conn](), "mu", "nats.vtimeRWMutex"},
	{"wireguard-go's timer lock", reflect.TypeFor[device.Timer](), "runningLock", "device.vtimeMutex"},
}

// plainLock names the first lock of durableLocks that this build lacks,
// and its type; "" when the build has them all.
func plainLock() string {
	for _, l := range durableLocks {
		f, ok := l.typ.FieldByName(l.field)
		got := "no such field"
		if ok {
			got = f.Type.String()
		}
		if got != l.want {
			return fmt.Sprintf("%s (%s.%s) is %s, not %s", l.name, l.typ, l.field, got, l.want)
		}
	}
	return ""
}
