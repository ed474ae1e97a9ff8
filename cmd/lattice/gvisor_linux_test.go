//go:build pro

package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
	"github.com/latticelab/lattice/control/controlapi"
	"github.com/latticelab/lattice/internal/netns"
	"github.com/latticelab/lattice/key"
	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/labtest"
	"github.com/latticelab/lattice/meshtest"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/relay"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/stun"
)

// pod is a network namespace joined to the test's by a veth pair: the
// "pod" a gvisor-mode sandbox runs in. Host side .1, pod side .2.
type pod struct {
	ns         string
	host, addr netip.Addr
	lastCPU    time.Duration // user+system time of the last run, its children included
}

func newPod(t *testing.T, subnet byte) *pod { return newPodTB(t, subnet) }

func newPodB(b *testing.B) *pod { return newPodTB(b, 3) }

func newPodTB(t testing.TB, subnet byte) *pod {
	t.Helper()
	needRoot(t, "ip", "nsenter", "iptables")
	if _, err := runsc.Find(""); err != nil {
		t.Skipf("needs runsc (make runsc builds it): %v", err)
	}
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	p := &pod{ns: "lsbx-" + suffix, host: netip.AddrFrom4([4]byte{10, 202, subnet, 1}), addr: netip.AddrFrom4([4]byte{10, 202, subnet, 2})}
	sh(t, "ip", "netns", "add", p.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.ns).Run() })
	sh(t, "ip", "-n", p.ns, "link", "set", "lo", "up")
	vh, vp := "lsh"+suffix, "lsp"+suffix
	sh(t, "ip", "link", "add", vh, "type", "veth", "peer", "name", vp)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", vh).Run() })
	sh(t, "ip", "link", "set", vp, "netns", p.ns)
	sh(t, "ip", "addr", "add", p.host.String()+"/24", "dev", vh)
	sh(t, "ip", "-n", p.ns, "addr", "add", p.addr.String()+"/24", "dev", vp)
	sh(t, "ip", "link", "set", vh, "up")
	sh(t, "ip", "-n", p.ns, "link", "set", vp, "up")
	return p
}

// run runs this test binary as lattice inside the pod and returns its
// output and exit code.
func (p *pod) run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return p.runB(t, args...)
}

func (p *pod) runB(t testing.TB, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + p.ns, self}, args...)...)
	cmd.Env = append(os.Environ(), execMainEnv+"=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	done := make(chan error, 1)
	require.NoError(t, cmd.Start())
	go func() { done <- cmd.Wait() }()
	select {
	case <-done: // the exit code below is what callers check
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("lattice in the pod did not finish:\n%s\n%s", &o, &e)
	}
	p.lastCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// inPod runs a command in the pod and returns its output.
func (p *pod) inPod(name string, args ...string) (string, error) {
	out, err := exec.Command("nsenter", append([]string{"--net=/run/netns/" + p.ns, name}, args...)...).CombinedOutput()
	return string(out), err
}

func buildAgent(t *testing.T) string { return buildAgentB(t) }

func buildAgentB(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.Chmod(filepath.Dir(bin), 0o755))
	return bin
}

// TestSandboxGVisor: phase 1 puts wg0 and the egress rules in the pod,
// phase 2 runs a static agent as PID 1 in runsc. The agent fetches from a
// peer reached directly and from one reached only through the relay,
// cannot reach a port the policy does not allow, cannot create a TUN, add
// a route or read the WireGuard key, and sees gVisor's kernel. Its exit
// code is lattice's, and afterwards the pod has no wg0, no rule and no
// container.
func TestSandboxGVisor(t *testing.T) {
	p := newPod(t, 1)
	w := meshtest.StartOn(t, p.host)
	web := w.Peer(t, "web")
	vault := w.Peer(t, "vault", func(c *node.Config) { c.ICE.RelayOnly = true })
	for _, peer := range []*meshtest.Peer{web, vault} {
		name := peer.Node.Identity().Name
		peer.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "hello from %s", name) }))
		peer.ServeHTTP(t, 22, http.NotFoundHandler())
	}
	agent := buildAgent(t)
	state := t.TempDir()
	pol := writeFile(t, "policy.yaml", "default: deny\nrules:\n  - allow: [peer:web, peer:vault]\n    ports: [8080]\n    proto: tcp\n", 0o600)
	webURL := fmt.Sprintf("http://%s:8080/", web.Addr())
	vaultURL := fmt.Sprintf("http://%s:8080/", vault.Addr())
	// A service in the pod on every address: the agent must reach it on
	// none of them (loopback, the pod's own address), policy or not.
	podService := podListener(t, p, 8099)

	stdout, stderr, code := p.run(t, "sandbox", "run", "--mode", "gvisor", "--name", "agent", "--server-url", w.NATSURL,
		"--token", meshtest.Token, "--state-dir", state, "--listen-addr", p.addr.String(), "--egress-policy", pol, "--",
		agent, "sleep", "2s", "fetch", webURL, "fetch", vaultURL, "fetch", "http://web:8080/", "fetch", "http://vault.lattice:8080/",
		"refused", web.Addr().String()+":22",
		"refused", "127.0.0.1:8099", "refused", "[::1]:8099", "refused", p.addr.String()+":8099",
		"notun", "noroute", "noread", filepath.Join(state, "credentials.json"), "gvisor", "exit", "7")
	t.Logf("agent output:\n%s", stdout)
	require.Equal(t, 7, code, "the agent's exit code; stderr:\n%s", stderr)
	assert.Contains(t, stdout, "fetch "+webURL+": hello from web")
	assert.Contains(t, stdout, "fetch "+vaultURL+": hello from vault")
	assert.Contains(t, stdout, "fetch http://web:8080/: hello from web", "peer names resolve in the container")
	assert.Contains(t, stdout, "fetch http://vault.lattice:8080/: hello from vault")
	assert.Contains(t, stdout, "refused "+web.Addr().String()+":22")
	for _, a := range []string{"127.0.0.1:8099", "[::1]:8099", p.addr.String() + ":8099"} {
		assert.Contains(t, stdout, "refused "+a+" after", "the pod's own service, by the egress defaults")
	}
	assert.Contains(t, stdout, "gvisor: kernel log says gVisor")
	assert.NotContains(t, stdout, "FAIL")
	assert.Regexp(t, `msg=path node=agent peer=web to=direct`, stderr, "web is reached directly")
	assert.NotRegexp(t, `msg=path node=agent peer=vault to=direct`, stderr, "vault only through the relay")
	assert.Greater(t, vault.Node.Status()[0].RxRelay, uint64(0))

	// Nothing left behind.
	out, err := p.inPod("ip", "link", "show", "wg0")
	assert.Error(t, err, "wg0 is gone: %s", out)
	for _, tool := range []string{"iptables", "ip6tables"} {
		out, err = p.inPod(tool, "-S")
		require.NoError(t, err, out)
		assert.NotContains(t, out, "LATTICE", tool)
		assert.NotContains(t, out, "lattice", tool)
	}
	podService.reachable(t, "127.0.0.1:8099", "after the sandbox, the pod's service is open again")
	mgrState := filepath.Join(state, "runsc", "state")
	list, err := exec.Command(mustRunsc(t), "--root", mgrState, "list", "--quiet").Output()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(list)), "no container left")
	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), state, "no mount left in the state dir")
}

// podService is a TCP listener inside a pod's network namespace.
type podService struct{ p *pod }

// podListener listens on every address of the pod on port, and checks the
// pod can reach it before any rule exists.
func podListener(t *testing.T, p *pod, port int) podService {
	t.Helper()
	ln, err := listenInPod(p, fmt.Sprintf("[::]:%d", port))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	s := podService{p}
	s.reachable(t, fmt.Sprintf("127.0.0.1:%d", port), "before the sandbox")
	s.reachable(t, fmt.Sprintf("[::1]:%d", port), "before the sandbox")
	return s
}

func (s podService) reachable(t *testing.T, addr, why string) {
	t.Helper()
	err := netns.Do("/run/netns/"+s.p.ns, func() error {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	require.NoError(t, err, "%s: %s", addr, why)
}

func listenInPod(p *pod, addr string) (net.Listener, error) {
	var ln net.Listener
	err := netns.Do("/run/netns/"+p.ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// TestSandboxGVisorBadInput: what gvisor mode needs and lacks is named,
// and nothing is left behind.
func TestSandboxGVisorBadInput(t *testing.T) {
	p := newPod(t, 2)
	w := meshtest.StartOn(t, p.host)
	state := t.TempDir()
	base := []string{"sandbox", "run", "--mode", "gvisor", "--name", "agent", "--server-url", w.NATSURL, "--token", meshtest.Token,
		"--state-dir", state, "--listen-addr", p.addr.String()}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"agent missing", append(base, "--", "/no/such/agent"), `agent "/no/such/agent"`},
		{"agent not executable", append(base, "--", writeFile(t, "agent", "data", 0o644)), "permission denied"},
		{"runsc missing", append(base, "--runsc", "/no/runsc", "--", "/bin/true"), "runsc: not found: /no/runsc: build it statically with: CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@"},
		{"runsc dynamic", append(base, "--runsc", "/bin/sh", "--", "/bin/true"), "dynamically linked: /bin/sh needs a dynamic loader"},
		{"proxy in gvisor mode", append(base[:1:1], "start", "--mode", "gvisor", "--name", "a", "--server-url", w.NATSURL, "--token", "t", "--socks5", "1080", "--state-dir", state, "--", "/bin/true"), "gvisor mode has no proxies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := p.run(t, tc.args...)
			assert.NotEqual(t, 0, code)
			assert.Contains(t, stderr, tc.want)
			out, err := p.inPod("ip", "link", "show", "wg0")
			assert.Error(t, err, "no wg0 left: %s", out)
			assert.NoFileExists(t, filepath.Join(state, "proxy-credentials"), "a refused command writes no state")
		})
	}
}

func mustRunsc(t *testing.T) string {
	t.Helper()
	p, err := runsc.Find("")
	require.NoError(t, err)
	return p
}

// benchPlatform, if set, is the runsc platform BenchmarkSandboxStart's
// sandboxes use (-sandbox.platform=ptrace), to compare them side by side.
var benchPlatform = flag.String("sandbox.platform", "", "BenchmarkSandboxStart: runsc platform (systrap or ptrace); if empty, the sandbox's default")

// BenchmarkSandboxStart/gvisor: from starting `lattice sandbox run --mode
// gvisor` in a pod to the agent's first request arriving at a peer over
// wg0: registration, wg0, rules, runsc start, the agent's connect.
func BenchmarkSandboxStart(b *testing.B) {
	b.Run("gvisor", func(b *testing.B) {
		p := newPodB(b)
		w := meshtest.StartOn(b, p.host)
		web := w.Peer(b, "web")
		arrived := make(chan time.Time, 1)
		web.ServeHTTP(b, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			select {
			case arrived <- time.Now():
			default:
			}
			fmt.Fprint(w, "ok")
		}))
		agent := buildAgentB(b)
		var total, cpu time.Duration
		for i := range b.N {
			state := b.TempDir()
			args := []string{"sandbox", "run", "--mode", "gvisor"}
			if testing.Verbose() {
				args = append(args, "-v") // the sandbox's phases, with times, in the log below
			}
			if *benchPlatform != "" {
				args = append(args, "--platform", *benchPlatform)
			}
			start := time.Now()
			_, stderr, code := p.runB(b, append(args, "--name", fmt.Sprintf("start-%d", i), "--server-url", w.NATSURL,
				"--token", meshtest.Token, "--state-dir", state, "--listen-addr", p.addr.String(), "--",
				agent, "fetch", fmt.Sprintf("http://%s:8080/", web.Addr()), "exit", "0")...)
			if code != 0 {
				b.Fatalf("exit %d: %s", code, stderr)
			}
			select {
			case at := <-arrived:
				total += at.Sub(start)
				cpu += p.lastCPU
				if testing.Verbose() {
					b.Logf("start %d: started %s, request %s (%v), CPU %v\n%s%s", i, start.Format(time.StampMicro), at.Format(time.StampMicro), at.Sub(start),
						p.lastCPU, stderr, bootTimes(filepath.Join(state, "runsc", "logs")))
				}
			default:
				b.Fatal("the agent's request never arrived")
			}
		}
		b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms")
		b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms")
	})
}

// bootTimes is the milestones of runsc's boot timing table (its sandbox
// log, written at info level) in the runsc log directory dir: when the
// sandbox process started, was ready, got the start signal, had compiled
// its seccomp filter (or, in a runsc with precompiled filters, rendered
// one) and started the agent.
func bootTimes(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.boot.log"))
	var out strings.Builder
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, m := range []string{"╭─ runsc boot", "notifying parent", "start signal received", "seccomp program compiled", "seccomp program rendered", "kernel started"} {
				if strings.Contains(line, m) && strings.HasPrefix(line, "[") {
					fmt.Fprintf(&out, "runsc boot: %s %s\n", line[1:strings.IndexByte(line, ']')], m)
				}
			}
		}
	}
	return out.String()
}

// TestSandboxGVisorBehindLabNAT: the pod is a kernel host of the lab
// fabric, behind an emulated symmetric NAT; control, the relay and STUN
// run on the lab's public server and the peer on a lab host behind a cone
// NAT, all in this process. The agent in runsc reaches the peer through
// the pod's wg0, the TUN into the fabric and both NATs.
func TestSandboxGVisorBehindLabNAT(t *testing.T) {
	needRoot(t, "ip", "nsenter", "iptables")
	if _, err := runsc.Find(""); err != nil {
		t.Skipf("needs runsc (make runsc builds it): %v", err)
	}
	w := labtest.New(t, fabric.Config{})
	server := w.Server
	secret := []byte("lab-relay-secret-0123456789abcdef")
	st, err := stun.NewServer(stun.Config{Network: server, Primary: netip.MustParseAddrPort("203.0.113.100:3478")})
	require.NoError(t, err)
	require.NoError(t, st.Start(t.Context()))
	t.Cleanup(func() { st.Close() })
	rs, err := relay.NewServer(relay.ServerConfig{Network: server, Addr: "203.0.113.100:443", Secret: secret})
	require.NoError(t, err)
	t.Cleanup(func() { rs.Close() })
	store, err := control.OpenFileStore(filepath.Join(t.TempDir(), "registry.json"))
	require.NoError(t, err)
	ctrl, err := control.New(t.Context(), control.Config{
		Network: server, Tokens: []control.JoinToken{{Value: meshtest.Token}}, Store: store,
		EmbeddedNATS: &control.EmbeddedNATSConfig{Network: server, Listen: "203.0.113.101:4222"},
		STUN:         []string{"203.0.113.100:3478"},
		Relays:       []controlapi.Relay{{Addr: "203.0.113.100:443", Fingerprint: rs.Fingerprint()}},
		RelayToken: func(k key.Public, now time.Time) (string, error) {
			return string(relay.IssueToken(secret, k, now.Add(time.Hour))), nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { ctrl.Close() })

	peerSite := w.Site(t, "port-restricted-cone")
	prov := &netstack.SandboxProvisioner{}
	peer, err := node.Start(t.Context(), node.Config{Name: "web", Network: peerSite.Host, Control: "nats://203.0.113.101:4222?insecure=1",
		Token: meshtest.Token, Provisioner: prov})
	require.NoError(t, err)
	t.Cleanup(func() { peer.Close() })
	wp := &meshtest.Peer{Node: peer, Stack: prov.Stack()}
	wp.ServeHTTP(t, 8080, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "hello from the lab") }))

	w.Site(t, "symmetric") // lan1, the pod's LAN, behind a symmetric NAT
	kh, err := w.Fabric.AddKernelHost(fabric.KernelHostConfig{Name: fmt.Sprintf("pod%d", os.Getpid()%10000),
		Interface: fabric.InterfaceConfig{Network: "lan1", Addr: netip.MustParseAddr("192.168.1.3")}, Gateway: labtest.Gateway})
	require.NoError(t, err)
	p := &pod{ns: kh.Netns(), addr: kh.Addr()}
	agent := buildAgent(t)
	url := fmt.Sprintf("http://%s:8080/", peer.Address().Addr())
	stdout, stderr, code := p.run(t, "sandbox", "run", "--mode", "gvisor", "--name", "labagent", "--server-url", "nats://203.0.113.101:4222?insecure=1",
		"--token", meshtest.Token, "--state-dir", t.TempDir(), "--", agent, "fetch", url, "gvisor", "exit", "0")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "fetch "+url+": hello from the lab")
}

// TestSandboxGVisorFailsAfterRegistration: when phase 1 fails after
// control has assigned the identity (here wg0 cannot be made: its name is
// the pod's loopback's, a device that exists and is no TUN; a name the
// kernel refuses outright is now refused before registration), the
// agent's container runsc was already booting is called
// off: no container, process, mount or cgroup of it is left, and the
// agent never ran.
func TestSandboxGVisorFailsAfterRegistration(t *testing.T) {
	p := newPod(t, 4)
	w := meshtest.StartOn(t, p.host)
	agent := buildAgent(t)
	state := t.TempDir()
	stdout, stderr, code := p.run(t, "sandbox", "run", "--mode", "gvisor", "--name", "failmid", "--server-url", w.NATSURL,
		"--token", meshtest.Token, "--state-dir", state, "--listen-addr", p.addr.String(), "--interface", "lo", "--",
		agent, "gvisor", "exit", "0")
	require.NotEqual(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stderr, "msg=registered", "the failure came after registration")
	assert.Contains(t, stderr, "held=true", "the container was being made")
	assert.NotContains(t, stdout, "gvisor:", "the agent never ran")

	list, err := exec.Command(mustRunsc(t), "--root", filepath.Join(state, "runsc", "state"), "list", "--quiet").Output()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(list)), "no container left")
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	require.NoError(t, err)
	for _, pc := range procs {
		if b, err := os.ReadFile(pc); err == nil && bytes.Contains(b, []byte(state)) {
			t.Errorf("a process is left: %s: %q", pc, b)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	assert.NotContains(t, string(mounts), state, "no mount left in the state dir")
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/lattice-failmid-*")
	more, _ := filepath.Glob("/sys/fs/cgroup/lattice-failmid-*")
	assert.Empty(t, append(cgroups, more...), "no cgroup left")
	bundles, _ := filepath.Glob(filepath.Join(state, "runsc", "bundles", "*"))
	assert.Empty(t, bundles, "no bundle left")
}

// TestSandboxGVisorNeedsRoot: without root, gvisor mode says so and what
// to use instead, before touching anything.
func TestSandboxGVisorNeedsRoot(t *testing.T) {
	bin, state, token := unprivilegedSetup(t)
	p := startSandboxProc(t, bin, "sandbox", "run", "--mode", "gvisor", "--name", "agent", "--server-url", "nats://127.0.0.1:1",
		"--token-file", token, "--state-dir", state, "--", "/bin/true")
	err := p.cmd.Wait()
	if os.Geteuid() != 0 {
		t.Log("not root: the test itself is the unprivileged user")
	}
	require.Error(t, err)
	assert.Contains(t, p.out.String(), "gvisor mode needs root in the pod")
	assert.Contains(t, p.out.String(), "--mode pod needs none")
}
