#!/bin/sh
# Prints the go flags that give this module's gVisor stacks virtual time in a
# testing/synctest bubble:
#
#   go test $(scripts/vtime-flags.sh) ./lab/vtime/
#
# gVisor's pkg/sleep and pkg/syncevent park goroutines with the runtime's
# plain "select" wait reason, which synctest does not count as durably
# blocked, so a bubble holding a gVisor stack never advances its clock. The
# fix is one constant in one file (pkg/sync/runtime_constants_go_impl.go):
# WaitReasonSelect must name the runtime's waitReasonSynctestSelect ("select
# (durable)"). `go build -overlay` may not replace files beneath GOMODCACHE,
# so this script, in a temp dir keyed by the gVisor and Go versions, writes:
#   gvisor        a symlink to the module cache's own gVisor (read-only),
#   go.mod/.sum   copies of ours plus `replace gvisor.dev/gvisor => <dir>/gvisor`,
#   overlay.json  swapping that one file for a copy patched with sed,
# and prints `-modfile=<dir>/go.mod -overlay=<dir>/overlay.json`. Nothing of
# gVisor is committed or copied beyond the one patched file, and the build
# uses the very gVisor version go.mod pins. See docs/VIRTUAL_TIME.md.
#
# The same overlay patches wireguard-go (no finalizers on bubble channels;
# durable locks), nats.go (no pooled timers; a connection lock whose waits
# are durable; inbox names from crypto/rand) and nats-server (its first
# PING's jitter from crypto/rand), each explained where it is patched below.
#
# It fails, naming what did not match, if a gVisor or Go upgrade moved what
# it patches.
set -eu

die() {
	echo "vtime-flags: $*" >&2
	exit 1
}

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
GO=${GO:-go}

gvdir=$($GO list -m -f '{{.Dir}}' gvisor.dev/gvisor) || die "go list gvisor.dev/gvisor failed"
[ -n "$gvdir" ] || die "gvisor.dev/gvisor is not downloaded (run: $GO mod download gvisor.dev/gvisor)"
gvver=$($GO list -m -f '{{.Version}}' gvisor.dev/gvisor)
goroot=$($GO env GOROOT)
gover=$($GO env GOVERSION)
src=$gvdir/pkg/sync/runtime_constants_go_impl.go
rt=$goroot/src/runtime/runtime2.go
[ -f "$src" ] || die "$src is missing: gVisor moved its wait-reason constants"
[ -f "$rt" ] || die "$rt is missing: cannot read the runtime's wait reasons"

# reason NAME prints the value of the runtime's waitReason constant NAME: its
# position in the iota block that starts at waitReasonZero.
reason() {
	awk -v want="$1" '
		/^\twaitReasonZero[ \t]+waitReason = iota/ { on = 1; n = 0 }
		on && /^\)/ { exit }
		on && $1 ~ /^waitReason[A-Za-z0-9]+$/ { if ($1 == want) { print n; found = 1; exit } n++ }
		END { if (!found) exit 1 }
	' "$rt"
}
plain=$(reason waitReasonSelect) || die "no waitReasonSelect in $rt"
durable=$(reason waitReasonSynctestSelect) || die "no waitReasonSynctestSelect in $rt (Go $gover)"

line="WaitReasonSelect      uint8 = $plain"
grep -qx "	$line" "$src" || die "$src has no line '$line': gVisor's constant no longer matches Go $gover's waitReasonSelect"

grep -q '^replace[[:space:]].*gvisor.dev/gvisor' go.mod && die "go.mod already replaces gvisor.dev/gvisor; the overlay would hide it"

# wireguard-go drains each peer's inbound and outbound queue from a
# finalizer. Finalizers run outside any bubble, and a receive on a channel
# made in a bubble from outside it is fatal ("receive on synctest channel
# from outside bubble") as soon as the GC collects a closed peer. The overlay
# drops those two SetFinalizer calls; the queues' buffers then go to the GC
# instead of back to wireguard-go's pools (unbounded on Linux), nothing else
# changes.
wgdir=$($GO list -m -f '{{.Dir}}' golang.zx2c4.com/wireguard) || die "go list golang.zx2c4.com/wireguard failed"
[ -n "$wgdir" ] || die "golang.zx2c4.com/wireguard is not downloaded (run: $GO mod download golang.zx2c4.com/wireguard)"
wgsrc=$wgdir/device/channels.go
[ -f "$wgsrc" ] || die "$wgsrc is missing: wireguard-go moved its autodraining queues"
for q in Inbound Outbound; do
	grep -qx "	runtime.SetFinalizer(q, device.flush${q}Queue)" "$wgsrc" || die "$wgsrc has no line 'runtime.SetFinalizer(q, device.flush${q}Queue)': wireguard-go's queues changed"
done
# wireguard-go holds its locks across waits: a timer's runningLock while
# its expiration runs (a handshake retransmission sends through the Bind,
# which can wait on the network), the device's peers lock while a removed
# peer stops (and waits for that timer). A goroutine waiting for such a lock
# (a sync.Mutex or RWMutex) is never durably blocked, so the bubble's clock
# stops (seen in the 20-node soak after NAT reboots and restarts). The
# overlay gives every lock in package device the durable locks below.
wglocked=$(grep -l 'sync\.\(RW\)\{0,1\}Mutex' "$wgdir"/device/*.go | grep -v '_test\.go$') ||
	die "$wgdir/device has no sync.Mutex or RWMutex: wireguard-go's locks changed"
grep -q '^replace[[:space:]].*golang.zx2c4.com/wireguard' go.mod && die "go.mod already replaces golang.zx2c4.com/wireguard; the overlay would hide it"

# nats.go keeps a process-wide sync.Pool of timers (Flush, NextMsg, Request,
# and Flush inside its reconnect): a timer made in one bubble and taken from
# the pool in another is fatal ("select on synctest channel from outside
# bubble"). The overlay stops putting timers back, so each is new.
nvdir=$($GO list -m -f '{{.Dir}}' github.com/nats-io/nats.go) || die "go list github.com/nats-io/nats.go failed"
[ -n "$nvdir" ] || die "github.com/nats-io/nats.go is not downloaded"
nvsrc=$nvdir/timer.go
grep -qx '	tp.p.Put(t)' "$nvsrc" || die "$nvsrc has no line 'tp.p.Put(t)': nats.go's timer pool changed"
# nats.go holds the connection's lock (Conn.mu, a sync.RWMutex) across a
# reconnect's dial and its CONNECT/PONG round trip. A goroutine that
# publishes meanwhile waits for that lock, and synctest never counts a mutex
# wait as durable, so the bubble's clock cannot move on to deliver the PONG
# (seen at every NAT reboot of the 20-node soak). The overlay gives Conn a
# reader/writer lock of the same semantics whose waiters park in
# sync.Cond.Wait, which is durable; the file it adds is written below.
nvconn=$nvdir/nats.go
[ "$(awk 'prev == "\tStatistics" && $0 == "\tmu sync.RWMutex" { n++ } { prev = $0 } END { print n + 0 }' "$nvconn")" = 1 ] ||
	die "$nvconn has no Conn field 'mu sync.RWMutex' after Statistics: nats.go's connection lock changed"
grep -q '^replace[[:space:]].*github.com/nats-io/nats.go' go.mod && die "go.mod already replaces github.com/nats-io/nats.go; the overlay would hide it"

# nats-server delays its first PING to each client by up to 20% of the
# interval, drawn from math/rand/v2's global generator, which the runtime
# seeds and nothing can reseed: two runs of one seeded scenario sent that
# PING at different instants. The overlay draws the delay from crypto/rand,
# which a test seeds (testing/cryptotest.SetGlobalRandom).
nsdir=$($GO list -m -f '{{.Dir}}' github.com/nats-io/nats-server/v2) || die "go list github.com/nats-io/nats-server/v2 failed"
[ -n "$nsdir" ] || die "github.com/nats-io/nats-server/v2 is not downloaded"
nssrc=$nsdir/server/client.go
nsline='	addDelay := rand.Int64N(int64(d / 5))'
[ "$(grep -cxF "$nsline" "$nssrc")" = 1 ] || die "$nssrc has no single line '$nsline': nats-server's first-PING jitter changed"
grep -q '^replace[[:space:]].*github.com/nats-io/nats-server' go.mod && die "go.mod already replaces github.com/nats-io/nats-server/v2; the overlay would hide it"

# The overlay is built whole in a fresh temp dir and renamed into place, so a
# concurrent build sees either no overlay or a complete one, never a
# half-written file or a go.mod from another checkout. Its name is keyed by
# everything its contents depend on except our go.mod and go.sum (the
# module dirs, Go, this script): the paths it holds stay the same from run
# to run, so the build cache keeps serving the patched packages. The go.mod
# and go.sum copies live beside it in a subdir keyed by their contents,
# built and renamed the same way.
base=${TMPDIR:-/tmp}/lattice-vtime-$(id -u)
mkdir -p "$base"
key=$(printf '%s\n' "$gvdir" "$wgdir" "$nvdir" "$nsdir" "$goroot" "$gover" "$plain" "$durable" | cat - "$self" | sha256sum | cut -c1-12)
out=$base/$gvver-$gover-$key
modkey=$(cat go.mod go.sum | sha256sum | cut -c1-12)
mod=$out/mod-$modkey
case "$gvdir$nsdir$out" in *'"'* | *'\'* | *' '*) die "a path holds a quote, backslash or space: $gvdir, $out" ;; esac

# modfiles DIR: our go.mod, with the replaces that point at the overlay's
# module symlinks, and go.sum, into DIR.
modfiles() {
	{
		cat go.mod
		printf '\n// Added by scripts/vtime-flags.sh: the same gVisor, wireguard-go and nats.go, seen outside GOMODCACHE so -overlay may patch them.\n'
		printf 'replace gvisor.dev/gvisor => %s/gvisor\n' "$out"
		printf 'replace golang.zx2c4.com/wireguard => %s/wireguard\n' "$out"
		printf 'replace github.com/nats-io/nats.go => %s/nats.go\n' "$out"
		printf 'replace github.com/nats-io/nats-server/v2 => %s/nats-server\n' "$out"
	} >"$1/go.mod"
	cp go.sum "$1/go.sum"
}
# publish TMP DIR: rename the finished TMP to DIR; if another run got there
# first, its DIR has the same contents and TMP goes.
publish() {
	mv -T "$1" "$2" 2>/dev/null || { [ -d "$2" ] && rm -rf "$1"; } || die "cannot rename $1 to $2"
}
if [ ! -d "$mod" ] && [ -d "$out" ]; then
	tmp=$(mktemp -d "$out/.mod.XXXXXX") || die "mktemp in $out failed"
	trap 'rm -rf "$tmp"' EXIT
	modfiles "$tmp"
	publish "$tmp" "$mod"
	trap - EXIT
fi
[ -d "$out" ] && { echo "-modfile=$mod/go.mod -overlay=$out/overlay.json"; exit 0; }

tmp=$(mktemp -d "$base/.build.XXXXXX") || die "mktemp in $base failed"
trap 'rm -rf "$tmp"' EXIT
put() { # put NAME: stdin becomes NAME in the overlay being built
	cat >"$tmp/$1"
}
ln -s "$gvdir" "$tmp/gvisor"
ln -s "$wgdir" "$tmp/wireguard"
ln -s "$nvdir" "$tmp/nats.go"
ln -s "$nsdir" "$tmp/nats-server"
mkdir "$tmp/mod-$modkey"
modfiles "$tmp/mod-$modkey"
sed "s/^	$line\$/	WaitReasonSelect      uint8 = $durable \/\/ lattice vtime overlay: waitReasonSynctestSelect/" "$src" | put runtime_constants_go_impl.go
grep -q "uint8 = $durable // lattice vtime overlay" "$tmp/runtime_constants_go_impl.go" || die "patching $src failed"
sed 's/^	runtime.SetFinalizer(q, device.flush\(In\|Out\)boundQueue)$/	runtime.KeepAlive(q) \/\/ lattice vtime overlay: no finalizer, it would receive on a bubble'"'"'s channel from outside the bubble/' "$wgsrc" | put channels.go
[ "$(grep -c 'lattice vtime overlay' "$tmp/channels.go")" = 2 ] || die "patching $wgsrc failed"
sed 's/^	tp.p.Put(t)$/	_ = tp \/\/ lattice vtime overlay: no pooling, a timer must not cross a bubble'"'"'s edge/' "$nvsrc" | put timer.go
grep -q 'lattice vtime overlay' "$tmp/timer.go" || die "patching $nvsrc failed"
# Inbox names end in a NUID from nuid's process-wide generator, seeded from
# crypto/rand when the package loads, before a test can seed it
# (testing/cryptotest.SetGlobalRandom), and carrying on from run to run: the
# first thing two runs of one scenario differ in. The overlay draws inbox
# NUIDs from crypto/rand at each call instead (the same 22 base-62
# characters), so a seeded run names its inboxes the same.
for l in '	"github.com/nats-io/nuid"' '	copy(ns, nuid.Next())' '	sb.WriteString(nuid.Next())'; do
	grep -qxF "$l" "$nvconn" || die "$nvconn has no line '$l': nats.go's inbox names changed"
done
awk 'prev == "\tStatistics" && $0 == "\tmu sync.RWMutex" { $0 = "\tmu vtimeRWMutex // lattice vtime overlay: waits park durably in a bubble" }
	$0 == "\t\"github.com/nats-io/nuid\"" { $0 = "\t// lattice vtime overlay: inbox NUIDs from crypto/rand (vtimeNUID)" }
	{ gsub(/nuid\.Next\(\)/, "vtimeNUID()"); print; prev = $0 }' "$nvconn" | put nats_conn.go
[ "$(grep -c 'lattice vtime overlay' "$tmp/nats_conn.go")" = 2 ] && [ "$(grep -c 'vtimeNUID()' "$tmp/nats_conn.go")" = 2 ] ||
	die "patching $nvconn failed"
put nats_vtime_nuid.go <<'GO'
// Added by lattice's scripts/vtime-flags.sh (an -overlay for tests on
// virtual time; not part of this module).

package nats

import "crypto/rand"

// vtimeNUID is an inbox token like nuid.Next's (22 base-62 characters),
// drawn from crypto/rand at each call, so that a test that seeds
// crypto/rand names its inboxes the same from run to run.
func vtimeNUID() string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var b [22]byte
	_, _ = rand.Read(b[:]) // never fails
	for i, c := range b {
		b[i] = digits[int(c)%len(digits)]
	}
	return string(b[:])
}
GO
awk -v l="$nsline" '$0 == l { $0 = "\taddDelay := vtimeInt64N(int64(d / 5)) // lattice vtime overlay: from crypto/rand, which a test can seed" } { print }' "$nssrc" | put ns_client.go
grep -q 'lattice vtime overlay' "$tmp/ns_client.go" || die "patching $nssrc failed"
put ns_vtime_rand.go <<'GO'
// Added by lattice's scripts/vtime-flags.sh (an -overlay for tests on
// virtual time; not part of this module).

package server

import (
	"crypto/rand"
	"encoding/binary"
)

// vtimeInt64N is rand.Int64N(n) drawn from crypto/rand, so that a test
// that seeds crypto/rand sends its first PINGs at the same instants from
// run to run. The modulo bias is immaterial for a jitter.
func vtimeInt64N(n int64) int64 {
	if n <= 0 {
		return 0
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return int64(binary.LittleEndian.Uint64(b[:]) % uint64(n))
}
GO
locks() { # locks PKG: the durable locks' Go file for package PKG
	sed "s/^package PKG\$/package $1/" <<'GO'
// Added by lattice's scripts/vtime-flags.sh (an -overlay for
// tests on virtual time; not part of this module).

package PKG

import "sync"

// vtimeRWMutex is a reader/writer lock with sync.RWMutex's semantics (a
// waiting writer holds off new readers) whose waiters park in
// sync.Cond.Wait. A testing/synctest bubble counts that wait as durable and
// a sync.RWMutex wait as not, so a goroutine waiting for the connection's
// lock while its holder waits on the network (a reconnect's CONNECT/PONG)
// no longer stops the bubble's clock.
//
// The overlay gives it to nats.go's Conn and wireguard-go's Timer, whose
// locks are held across waits on the network.
type vtimeRWMutex struct {
	mu      sync.Mutex // guards the following fields; held only briefly
	cond    *sync.Cond
	writer  bool
	readers int
	writers int // waiting for the lock
	waiting int // parked in cond
}

func (m *vtimeRWMutex) waitLocked() {
	if m.cond == nil {
		m.cond = sync.NewCond(&m.mu)
	}
	m.waiting++
	m.cond.Wait()
	m.waiting--
}

func (m *vtimeRWMutex) wakeLocked() {
	if m.waiting > 0 {
		m.cond.Broadcast()
	}
}

func (m *vtimeRWMutex) Lock() {
	m.mu.Lock()
	m.writers++
	for m.writer || m.readers > 0 {
		m.waitLocked()
	}
	m.writers--
	m.writer = true
	m.mu.Unlock()
}

func (m *vtimeRWMutex) Unlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.writer {
		panic("vtimeRWMutex: Unlock of an unlocked lock")
	}
	m.writer = false
	m.wakeLocked()
}

func (m *vtimeRWMutex) RLock() {
	m.mu.Lock()
	for m.writer || m.writers > 0 {
		m.waitLocked()
	}
	m.readers++
	m.mu.Unlock()
}

func (m *vtimeRWMutex) RUnlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readers == 0 {
		panic("vtimeRWMutex: RUnlock without RLock")
	}
	m.readers--
	if m.readers == 0 {
		m.wakeLocked()
	}
}

// vtimeMutex is vtimeRWMutex's writer half, for a sync.Mutex.
type vtimeMutex struct{ rw vtimeRWMutex }

func (m *vtimeMutex) Lock()   { m.rw.Lock() }
func (m *vtimeMutex) Unlock() { m.rw.Unlock() }
GO
}
locks nats | put nats_vtime_mutex.go
locks device | put wg_vtime_mutex.go
wgover=
for f in $wglocked; do
	b=wg_$(basename "$f")
	# Embedded locks change their field name with their type (c.Mutex).
	sed 's/sync\.RWMutex/vtimeRWMutex/g; s/sync\.Mutex/vtimeMutex/g; s/\.\(RW\)\{0,1\}Mutex\([^A-Za-z0-9_]\)/.vtime\1Mutex\2/g' "$f" >"$tmp/$b"
	# The locks may have been the file's only use of package sync.
	grep -q 'sync\.' "$tmp/$b" || sed -i '/^	"sync"$/d; /^import "sync"$/d' "$tmp/$b"
	wgover="$wgover\"$out/wireguard/device/$(basename "$f")\":\"$out/$b\","
done
case "$wgdir$nvdir" in *'"'* | *'\'* | *' '*) die "a path holds a quote, backslash or space: $wgdir, $nvdir" ;; esac
# overlay.json: each patched file replaces its original; the lock's file is new.
{
	printf '{"Replace":{'
	printf '"%s":"%s",' "$out/gvisor/pkg/sync/runtime_constants_go_impl.go" "$out/runtime_constants_go_impl.go"
	printf '"%s":"%s",' "$out/wireguard/device/channels.go" "$out/channels.go"
	printf '%s' "$wgover"
	printf '"%s":"%s",' "$out/wireguard/device/lattice_vtime_mutex.go" "$out/wg_vtime_mutex.go"
	printf '"%s":"%s",' "$out/nats.go/timer.go" "$out/timer.go"
	printf '"%s":"%s",' "$out/nats.go/nats.go" "$out/nats_conn.go"
	printf '"%s":"%s",' "$out/nats.go/lattice_vtime_nuid.go" "$out/nats_vtime_nuid.go"
	printf '"%s":"%s",' "$out/nats-server/server/client.go" "$out/ns_client.go"
	printf '"%s":"%s",' "$out/nats-server/server/lattice_vtime_rand.go" "$out/ns_vtime_rand.go"
	printf '"%s":"%s"' "$out/nats.go/lattice_vtime_mutex.go" "$out/nats_vtime_mutex.go"
	printf '}}\n'
} | put overlay.json
publish "$tmp" "$out"
trap - EXIT
echo "-modfile=$mod/go.mod -overlay=$out/overlay.json"
