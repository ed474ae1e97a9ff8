package runsc

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/internal/syncbuf"
	"github.com/latticelab/lattice/runsc/gate"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// staticAgent builds testdata/agent without cgo: a static binary.
func staticAgent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := buildDir("runsc-agent")
		if err != nil {
			agentErr = err
			return
		}
		agentPath = filepath.Join(dir, "agent")
		cmd := exec.Command("go", "build", "-o", agentPath, "./testdata/agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = err
			agentPath = string(out)
		}
	})
	require.NoError(t, agentErr, agentPath)
	return agentPath
}

func TestFind(t *testing.T) {
	_, err := Find(filepath.Join(t.TempDir(), "runsc"))
	require.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), "CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@"+GVisorVersion)

	text := filepath.Join(t.TempDir(), "runsc")
	require.NoError(t, os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755))
	_, err = Find(text)
	assert.ErrorContains(t, err, "is not an executable")

	if sh, err := exec.LookPath("sh"); err == nil {
		_, err = Find(sh)
		require.ErrorIs(t, err, ErrDynamic, "sh is dynamically linked on every distribution we run on")
		assert.Contains(t, err.Error(), "fork/exec /proc/self/exe")
	}
	got, err := Find(staticAgent(t))
	require.NoError(t, err, "a static binary is accepted")
	assert.Equal(t, staticAgent(t), got)
}

func TestSpec(t *testing.T) {
	agent := staticAgent(t)
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	oci, err := Spec{ID: "a", Args: []string{agent, "hello", "0"}, Env: []string{"X=1"}}.oci(bundle)
	require.NoError(t, err)
	b, err := json.Marshal(oci)
	require.NoError(t, err)
	js := string(b)
	assert.NotContains(t, js, `"network"`, "no network namespace: --network=host means the pod's")
	assert.Contains(t, js, `"capabilities":{"bounding":[],"effective":[],"inheritable":[],"permitted":[],"ambient":[]}`)
	assert.Contains(t, js, `"noNewPrivileges":true`)
	assert.Contains(t, js, `"root":{"path":"`+rootfs+`","readonly":true}`)
	assert.Equal(t, ociUser{UID: 65534, GID: 65534}, oci.Process.User)
	assert.Equal(t, []string{"/lattice/agent/agent", "hello", "0"}, oci.Process.Args)
	assert.Contains(t, oci.Process.Env, "X=1")
	var dests []string
	for _, m := range oci.Mounts {
		dests = append(dests, m.Destination)
		if m.Type == "bind" {
			assert.Contains(t, m.Options, "ro", "%s is read-only", m.Destination)
		}
	}
	assert.Contains(t, dests, "/lattice/agent/agent")
	assert.Contains(t, dests, "/usr")
	for _, d := range dests {
		assert.False(t, strings.HasPrefix(d, "/var") || strings.HasPrefix(d, "/root") || strings.HasPrefix(d, "/run"), "host %s must stay invisible", d)
	}
	assert.NotContains(t, dests, "/etc/hosts", "without Hosts the host's /etc/hosts shows through /etc")
	assert.NoFileExists(t, filepath.Join(bundle, hostsFile))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"relative", []string{"agent"}, `agent "agent": want an absolute path`},
		{"none", nil, `agent "": want an absolute path`},
		{"missing", []string{"/no/such/agent"}, "agent binary: stat /no/such/agent: no such file"},
		{"not executable", []string{writeFile(t, "data", 0o644)}, "is not an executable file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Spec{ID: "a", Args: tc.args}.oci(t.TempDir())
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestSpecHosts: Spec.Hosts becomes bundle/hosts (localhost and the
// entries, nothing of the host's), mounted read-only at /etc/hosts after
// the /etc bind it covers.
func TestSpecHosts(t *testing.T) {
	agent := staticAgent(t)
	bundle := t.TempDir()
	oci, err := Spec{ID: "a", Args: []string{agent}, Hosts: []HostEntry{
		{Addr: netip.MustParseAddr("100.64.0.2"), Names: []string{"web", "web.lattice"}},
		{Addr: netip.MustParseAddr("fd7a::3"), Names: []string{"db-1", "db-1.lattice"}},
	}}.oci(bundle)
	require.NoError(t, err)

	src := filepath.Join(bundle, "hosts")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1\tlocalhost\n"+
		"::1\tlocalhost ip6-localhost ip6-loopback\n"+
		"100.64.0.2\tweb web.lattice\n"+
		"fd7a::3\tdb-1 db-1.lattice\n", string(b))
	fi, err := os.Stat(src)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm())

	etc, hosts := -1, -1
	for i, m := range oci.Mounts {
		switch m.Destination {
		case "/etc":
			etc = i
		case "/etc/hosts":
			hosts = i
			assert.Equal(t, ociMount{Destination: "/etc/hosts", Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}}, m)
		}
	}
	require.NotEqual(t, -1, etc, "the host's /etc is mounted")
	require.NotEqual(t, -1, hosts, "the hosts file is mounted")
	assert.Greater(t, hosts, etc, "/etc/hosts must be mounted after /etc, or /etc hides it")

	web := netip.MustParseAddr("100.64.0.2")
	for _, tc := range []struct {
		name    string
		hosts   []HostEntry
		wantErr string
	}{
		{"zero address", []HostEntry{{Names: []string{"web"}}}, `runsc: hosts entry 0 ["web"]: invalid address`},
		{"zone", []HostEntry{{Addr: netip.MustParseAddr("fe80::1%eth0"), Names: []string{"web"}}}, "runsc: hosts entry 0 (fe80::1%eth0): address has a zone, which a hosts file cannot hold"},
		{"no names", []HostEntry{{Addr: web}}, "runsc: hosts entry 0 (100.64.0.2): no names"},
		{"empty name", []HostEntry{{Addr: web, Names: []string{"web", ""}}}, `runsc: hosts entry 0 (100.64.0.2): name "": want a hostname (letters, digits and '-' in dot-separated labels; no spaces or '#')`},
		{"space", []HostEntry{{Addr: web, Names: []string{"web"}}, {Addr: web, Names: []string{"a b"}}}, `runsc: hosts entry 1 (100.64.0.2): name "a b": want a hostname`},
		{"comment", []HostEntry{{Addr: web, Names: []string{"web#x"}}}, `name "web#x": want a hostname`},
		{"newline", []HostEntry{{Addr: web, Names: []string{"web\n1.2.3.4 evil"}}}, `name "web\n1.2.3.4 evil": want a hostname`},
		{"underscore", []HostEntry{{Addr: web, Names: []string{"my_web"}}}, `name "my_web": want a hostname`},
		{"leading hyphen", []HostEntry{{Addr: web, Names: []string{"-web"}}}, `name "-web": want a hostname`},
		{"empty label", []HostEntry{{Addr: web, Names: []string{"web..lattice"}}}, `name "web..lattice": want a hostname`},
		{"long label", []HostEntry{{Addr: web, Names: []string{strings.Repeat("a", 64)}}}, "want a hostname"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := t.TempDir()
			_, err := Spec{ID: "a", Args: []string{agent}, Hosts: tc.hosts}.oci(bundle)
			assert.ErrorContains(t, err, tc.wantErr)
			assert.NoFileExists(t, filepath.Join(bundle, "hosts"))
			assert.NoDirExists(t, filepath.Join(bundle, "rootfs"), "a bad entry is refused before anything is written")
		})
	}
}

func writeFile(t *testing.T, name string, mode os.FileMode) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte("x"), mode))
	return p
}

// needRunsc skips where runsc cannot run: no root or no runsc.
func needRunsc(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run runsc")
	}
	if _, err := Find(""); err != nil {
		t.Skipf("needs runsc: %v", err)
	}
	m, err := NewManager(Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Close()) })
	return m
}

// TestRun: the agent runs as PID 1 under gVisor as nobody, its exit code
// comes back, and the container is gone afterwards.
func TestRun(t *testing.T) {
	m := needRunsc(t)
	var out, errOut bytes.Buffer
	code, err := m.Run(t.Context(), Spec{ID: "hello", Args: []string{staticAgent(t), "hello", "7"}}, Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err, errOut.String())
	assert.Equal(t, 7, code)
	assert.Contains(t, out.String(), "pid 1 uid 65534")
	ids, err := m.List()
	require.NoError(t, err)
	assert.Empty(t, ids, "the container is deleted after it exits")
}

// TestRunStaleAndCancel: a second container under a live one's name is
// refused with the fix; cancelling stops the agent (SIGTERM: 143).
func TestRunStaleAndCancel(t *testing.T) {
	m := needRunsc(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var errOut bytes.Buffer
	go func() {
		code, err := m.Run(ctx, Spec{ID: "sleeper", Args: []string{staticAgent(t), "sleep"}}, Stdio{Stderr: &errOut})
		assert.NoError(t, err)
		done <- code
	}()
	require.Eventually(t, func() bool { ok, err := m.exists(t.Context(), "sleeper"); return err == nil && ok }, 20*time.Second, 50*time.Millisecond, "container starts")
	_, err := m.Run(t.Context(), Spec{ID: "sleeper", Args: []string{staticAgent(t), "hello", "0"}}, Stdio{})
	require.ErrorIs(t, err, ErrExists)
	assert.Contains(t, err.Error(), "delete --force sleeper")
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 128+15, code)
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not stop")
	}
	exists, err := m.exists(t.Context(), "sleeper")
	require.NoError(t, err)
	assert.False(t, exists)
}

// TestRunHosts: the agent resolves Spec.Hosts' names with its own
// resolver, and its /etc/hosts holds nothing of the host's.
func TestRunHosts(t *testing.T) {
	m := needRunsc(t)
	hosts := []HostEntry{{Addr: netip.MustParseAddr("100.64.0.2"), Names: []string{"web", "web.lattice"}}}
	want, err := hostsContent(hosts)
	require.NoError(t, err)

	var out, errOut bytes.Buffer
	code, err := m.Run(t.Context(), Spec{ID: "hosts-cat", Args: []string{staticAgent(t), "cat", "/etc/hosts"}, Hosts: hosts}, Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err, errOut.String())
	require.Equal(t, 0, code, errOut.String())
	assert.Equal(t, string(want), out.String())

	out.Reset()
	errOut.Reset()
	code, err = m.Run(t.Context(), Spec{ID: "hosts-resolve", Args: []string{staticAgent(t), "resolve", "web", "web.lattice", "localhost"}, Hosts: hosts}, Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err, errOut.String())
	require.Equal(t, 0, code, errOut.String())
	assert.Contains(t, out.String(), "web [100.64.0.2]\n")
	assert.Contains(t, out.String(), "web.lattice [100.64.0.2]\n")
	assert.Contains(t, out.String(), "localhost [127.0.0.1 ::1]\n")
}

func TestNewManagerErrors(t *testing.T) {
	_, err := NewManager(Config{Binary: staticAgent(t), Platform: "kvm", StateDir: t.TempDir()})
	assert.ErrorContains(t, err, `platform "kvm": want systrap or ptrace`)
	_, err = NewManager(Config{Binary: "/no/runsc"})
	assert.ErrorIs(t, err, ErrNotFound)
}

// TestMayExist: the state directory's file names decide whether runsc is
// asked at all; a name that merely contains the ID still asks (a false
// positive costs one runsc process, a false negative the ErrExists fix).
func TestMayExist(t *testing.T) {
	m := &Manager{root: t.TempDir()}
	assert.True(t, m.mayExist("web"), "no state directory: ask runsc")
	require.NoError(t, os.MkdirAll(m.stateRoot(), 0o700))
	assert.False(t, m.mayExist("web"))
	require.NoError(t, os.WriteFile(filepath.Join(m.stateRoot(), "null-netns"), nil, 0o600))
	assert.False(t, m.mayExist("web"), "runsc's shared files name no container")
	require.NoError(t, os.WriteFile(filepath.Join(m.stateRoot(), "web_sandbox:web.state"), nil, 0o600))
	assert.True(t, m.mayExist("web"))
	assert.True(t, m.mayExist("we"), "a prefix of a live ID asks runsc")
	assert.False(t, m.mayExist("api"))
}

// TestPrepare: a prepared container's sandbox boots but its agent does
// not run until Start, which also fills its /etc/hosts; it then runs and
// exits as Run's would, and nothing is left.
func TestPrepare(t *testing.T) {
	m := needRunsc(t)
	var out, errOut syncBuffer
	c, err := m.Prepare(Spec{ID: "held", Args: []string{staticAgent(t), "cat", "/etc/hosts"}}, Stdio{Stdout: &out, Stderr: &errOut})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	require.Eventually(t, func() bool { return gateWaiting(c) }, 20*time.Second, 50*time.Millisecond, "the sandbox boots and the hook waits")
	// Held: the agent must not run, however long we wait for it.
	select {
	case <-c.Exited():
		t.Fatalf("runsc run exited while held: %s", errOut.String())
	case <-time.After(time.Second):
	}
	assert.Empty(t, out.String(), "the agent ran before Start")

	hosts := []HostEntry{{Addr: netip.MustParseAddr("100.64.0.2"), Names: []string{"web", "web.lattice"}}}
	require.NoError(t, c.Start(hosts))
	assert.ErrorContains(t, c.Start(hosts), "not held", "a second Start")
	code, err := c.Wait(t.Context())
	require.NoError(t, err, errOut.String())
	assert.Equal(t, 0, code, errOut.String())
	want, err := hostsContent(hosts)
	require.NoError(t, err)
	assert.Equal(t, string(want), out.String(), "the hosts Start gave, not Prepare's (none)")
	assertGone(t, m, c)
}

// TestPrepareClose: a prepared container called off, while its sandbox
// boots or once it waits, leaves no container, bundle, hook or runsc
// process behind, and its log says why.
func TestPrepareClose(t *testing.T) {
	m := needRunsc(t)
	for _, tc := range []struct {
		name   string
		booted bool
	}{{"while booting", false}, {"held", true}} {
		t.Run(tc.name, func(t *testing.T) {
			id := "off-" + strings.ReplaceAll(tc.name, " ", "-")
			var errOut syncBuffer
			c, err := m.Prepare(Spec{ID: id, Args: []string{staticAgent(t), "hello", "0"}}, Stdio{Stderr: &errOut})
			require.NoError(t, err)
			if tc.booted {
				require.Eventually(t, func() bool { return gateWaiting(c) }, 20*time.Second, 50*time.Millisecond)
			}
			require.NoError(t, c.Close())
			assert.NotContains(t, errOut.String(), "pid 1", "the agent never ran")
			assertGone(t, m, c)
			code, err := c.Wait(t.Context())
			assert.NoError(t, err, "Wait after Close reports how runsc ended")
			assert.NotEqual(t, 0, code)
		})
	}
}

// assertGone checks that nothing of c is left: not the container, not its
// bundle, not a process naming its bundle (runsc, its gofer and sandbox,
// the gate hook).
func assertGone(t *testing.T, m *Manager, c *Container) {
	t.Helper()
	ids, err := m.List()
	require.NoError(t, err)
	assert.NotContains(t, ids, c.ID())
	assert.NoDirExists(t, c.bundle)
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(c.bundle)) {
			t.Errorf("a process is left: %s: %q", p, b)
		}
	}
}

// TestPrepareCgroup: runsc's sandbox and gofer processes stay in the
// caller's cgroups (--ignore-cgroups), and runsc makes none named after
// the container.
func TestPrepareCgroup(t *testing.T) {
	m := needRunsc(t)
	var errOut syncBuffer
	c, err := m.Prepare(Spec{ID: "cgroup-held", Args: []string{staticAgent(t), "hello", "0"}}, Stdio{Stderr: &errOut})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	require.Eventually(t, func() bool { return gateWaiting(c) }, 20*time.Second, 50*time.Millisecond, "the sandbox boots and the hook waits")
	self, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	var seen []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("--root="+m.stateRoot()+"\x00")) {
			continue
		}
		argv0, _, _ := bytes.Cut(b, []byte{0})
		cg, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cgroup"))
		if err != nil {
			continue // gone meanwhile
		}
		seen = append(seen, string(argv0))
		assert.Equal(t, string(self), string(cg), "%s's cgroups", argv0)
	}
	assert.Contains(t, seen, "runsc-sandbox")
	assert.Contains(t, seen, "runsc-gofer")
	made, err := filepath.Glob("/sys/fs/cgroup/*/" + c.ID())
	require.NoError(t, err)
	more, err := filepath.Glob("/sys/fs/cgroup/" + c.ID())
	require.NoError(t, err)
	assert.Empty(t, append(made, more...), "a cgroup named after the container")
}

// gateWaiting reports whether c's gate hook runs: runsc has booted the
// sandbox and holds the start. (runsc state would block on the lock
// runsc run holds meanwhile.)
func gateWaiting(c *Container) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.HasPrefix(b, []byte(gate.Arg0+"\x00"+filepath.Join(c.bundle, gateFIFO))) {
			return true
		}
	}
	return false
}

// syncBuffer is safe to read while a command or logger writes it.
type syncBuffer = syncbuf.Buffer
