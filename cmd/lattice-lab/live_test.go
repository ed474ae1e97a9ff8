package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/lab/runner"
)

// liveTopology: a kernel host behind a NAT, an in-process node behind the
// same NAT (for the built-in commands), and STUN with an alternate address.
const liveTopology = `name: live
networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone}
hosts:
  server: {network: internet, addr: 203.0.113.100, aliases: [203.0.113.101]}
  box: {network: home, kind: netns}
control: {host: server, addr: 203.0.113.101, port: 443}
relays: {relay: {host: server, port: 443}}
stun: {stun: {host: server, alternate: 203.0.113.101}}
nodes:
  alice: {network: home}
`

// liveBinary builds lattice-lab: up starts its background process by
// re-executing the binary, which a test binary cannot stand in for.
func liveBinary(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the live lab has a kernel host (network namespace, TUN device)")
	}
	for _, tool := range []string{"ip", "nsenter", "tshark", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps installs it): %v", tool, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "lattice-lab")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// lab runs the binary with a state dir and returns exit code and output.
type liveLab struct {
	t     *testing.T
	bin   string
	state string
}

func (l liveLab) run(stdin string, args ...string) (int, string, string) {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, l.bin, append(args, "--state", l.state)...)
	if i := indexOf(args, "--"); i >= 0 { // exec: the flag goes before HOST
		cmd = exec.CommandContext(ctx, l.bin, append(append([]string{args[0], "--state", l.state}, args[1:i]...), args[i:]...)...)
	}
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		l.t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func (l liveLab) up() *runner.LiveInfo {
	l.t.Helper()
	file := filepath.Join(l.t.TempDir(), "live.yaml")
	require.NoError(l.t, os.WriteFile(file, []byte(liveTopology), 0o600))
	code, out, stderr := l.run("", "up", file)
	require.Equal(l.t, 0, code, "up: %s\n%s", out, stderr)
	code, js, stderr := l.run("", "inspect", "--json")
	require.Equal(l.t, 0, code, "inspect: %s", stderr)
	var info runner.LiveInfo
	require.NoError(l.t, json.Unmarshal([]byte(js), &info))
	// up printed every host's addresses and how to enter the kernel host.
	box := host(l.t, &info, "box")
	assert.Contains(l.t, out, "box          netns     eth0 192.168.1.2 on home")
	assert.Contains(l.t, out, "server       inprocess eth0 203.0.113.100,203.0.113.101 on internet")
	assert.Contains(l.t, out, fmt.Sprintf("netns %s: nsenter --net=/run/netns/%s -- CMD, or ip netns exec %s CMD", box.Netns, box.Netns, box.Netns))
	return &info
}

func host(t *testing.T, info *runner.LiveInfo, name string) runner.LiveHost {
	t.Helper()
	for _, h := range info.Hosts {
		if h.Name == name {
			return h
		}
	}
	t.Fatalf("no host %s in %+v", name, info.Hosts)
	return runner.LiveHost{}
}

// leftovers lists what a lab with this pid left: namespaces, mounts,
// processes of its session.
func leftovers(t *testing.T, pid int) []string {
	t.Helper()
	var left []string
	entries, _ := os.ReadDir("/run/netns")
	re := regexp.MustCompile(`^lab-.+-` + strconv.Itoa(pid) + `-[0-9]+$`)
	for _, e := range entries {
		if re.MatchString(e.Name()) {
			left = append(left, "namespace "+e.Name())
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && re.MatchString(filepath.Base(f[4])) {
			left = append(left, "mount "+f[4])
		}
	}
	if err := syscall.Kill(pid, 0); err == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z") {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	return left
}

// TestLive: up, inspect, exec (a real program in the kernel host, a
// built-in on the in-process node), do, capture into tshark -i -, and down
// after kill -9 of the lab's process, leaving nothing behind.
func TestLive(t *testing.T) {
	l := liveLab{t: t, bin: liveBinary(t), state: filepath.Join(t.TempDir(), "state")}
	info := l.up()
	box := host(t, info, "box")
	require.NotEmpty(t, box.Netns)
	t.Cleanup(func() {
		if rec, err := runner.ReadLiveRecord(l.state); err == nil {
			_, _ = rec.Clean(l.state)
		}
	})
	fi, err := os.Stat(filepath.Join(l.state, runner.LiveSocketFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the control socket is the owner's")

	t.Run("up twice", func(t *testing.T) {
		code, _, stderr := l.run("", "up", "builtin:quickstart")
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, fmt.Sprintf("a lab (topology live, pid %d) is already up", info.PID))
	})
	t.Run("exec in the kernel host", func(t *testing.T) {
		code, out, _ := l.run("hello\n", "exec", "box", "--", "sh", "-c", "read x; echo got $x; ip -4 -o addr show eth0; exit 7")
		assert.Equal(t, 7, code, "the exit status passes through")
		assert.Contains(t, out, "got hello", "stdin and stdout pass through")
		assert.Contains(t, out, "192.168.1.2/24", "it runs in the host's namespace")
		code, out, stderr := l.run("", "exec", "box", "--", "ping", "-c", "1", "-W", "5", "203.0.113.100")
		require.Equal(t, 0, code, "%s\n%s", out, stderr)
		assert.Contains(t, out, "1 received")
	})
	t.Run("inspect", func(t *testing.T) {
		code, js, _ := l.run("", "inspect", "--json")
		require.Equal(t, 0, code)
		var now runner.LiveInfo
		require.NoError(t, json.Unmarshal([]byte(js), &now))
		var icmp []runner.LiveMapping
		for _, r := range now.Routers {
			for _, m := range r.Mappings {
				if m.Proto == "icmp" && m.Inside.Addr().String() == "192.168.1.2" {
					icmp = append(icmp, m)
				}
			}
		}
		assert.NotEmpty(t, icmp, "the ping's NAT mapping shows: %+v", now.Routers)
		code, text, _ := l.run("", "inspect")
		require.Equal(t, 0, code)
		assert.Regexp(t, `home-nat +port-restricted-cone +lan 192.168.1.1 on home; wan 203.0.113.1 on internet`, text)
		assert.Contains(t, text, "alice        on alice, overlay 100.")
	})
	t.Run("built-in on an in-process node", func(t *testing.T) {
		code, out, stderr := l.run("", "exec", "alice", "--", "discover")
		require.Equal(t, 0, code, "%s\n%s", out, stderr)
		assert.Contains(t, out, "endpoint-independent mapping, address-and-port-dependent filtering (as configured)")
		code, _, stderr = l.run("", "exec", "alice", "--", "ls")
		assert.Equal(t, 2, code)
		assert.Contains(t, stderr, `alice is an in-process host: it runs only ping, fetch, transfer and discover, not "ls"`)
	})
	t.Run("do", func(t *testing.T) {
		code, _, stderr := l.run("", "do", "link_down: {link: hom}")
		assert.Equal(t, 2, code)
		assert.Contains(t, stderr, `do:1:19: link_down.link: no node, host, router or network "hom"`)
		code, out, stderr := l.run("", "do", "exec: {host: box, argv: [ip, -4, addr, show, eth0], stdout_contains: 192.168.1.2/24}")
		require.Equal(t, 0, code, "%s\n%s", out, stderr)
		assert.Contains(t, out, "exec on box: ip -4 addr show eth0")
		code, _, _ = l.run("", "do", "link_down: {link: box}")
		require.Equal(t, 0, code)
		code, _, _ = l.run("", "exec", "box", "--", "ping", "-c", "1", "-W", "1", "203.0.113.100")
		assert.Equal(t, 1, code, "the link is down")
		code, out, _ = l.run("", "do", "exec: {host: box, argv: [ping, -c, '1', -W, '1', 203.0.113.100]}")
		assert.Equal(t, 1, code)
		assert.Contains(t, out, "ping: exit status 1, want 0")
		code, _, _ = l.run("", "do", "link_up: {link: box}")
		require.Equal(t, 0, code)
	})
	t.Run("capture into tshark", func(t *testing.T) { liveCapture(t, l, box.NetnsPath) })

	// kill -9: the lab's process gets no chance to clean up; a program
	// started in its namespace stays behind too, until down.
	sleeper := exec.Command("nsenter", "--net="+box.NetnsPath, "sleep", "300")
	require.NoError(t, sleeper.Start())
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	require.NoError(t, syscall.Kill(info.PID, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", info.PID))
		return err != nil || strings.Contains(string(b), ") Z")
	}, 10*time.Second, 20*time.Millisecond)
	assert.NotEmpty(t, leftovers(t, info.PID), "the killed lab left its namespace")

	code, out, stderr := l.run("", "down")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, fmt.Sprintf("lab live (pid %d) was not running; removed what it left: namespaces %s", info.PID, box.Netns))
	assert.Empty(t, leftovers(t, info.PID), "down leaves nothing behind")
	select {
	case err := <-waited:
		assert.Error(t, err, "the program in the namespace was killed")
	case <-time.After(10 * time.Second):
		t.Fatal("the program in the lab's namespace still runs")
	}
	_, err = os.Stat(filepath.Join(l.state, runner.LiveRecordFile))
	assert.ErrorIs(t, err, os.ErrNotExist)
	code, _, stderr = l.run("", "inspect")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no live lab")

	// And the ordinary way: down asks the lab to close.
	info = l.up()
	code, out, stderr = l.run("", "down")
	require.Equal(t, 0, code, "%s\n%s", out, stderr)
	assert.Equal(t, fmt.Sprintf("lab live (pid %d) is down\n", info.PID), out)
	assert.Empty(t, leftovers(t, info.PID))
}

// liveCapture pipes `capture box -w -` into `tshark -i -` and pings until
// tshark has read four ICMP packets.
func liveCapture(t *testing.T, l liveLab, netns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	capt := exec.CommandContext(ctx, l.bin, "capture", "box", "-w", "-", "--state", l.state)
	var capErr bytes.Buffer
	capt.Stdout, capt.Stderr = pw, &capErr
	home := t.TempDir()
	tshark := exec.CommandContext(ctx, "tshark", "-i", "-", "-c", "4", "-T", "fields", "-e", "ip.src", "-e", "ip.dst", "-e", "icmp.type")
	tshark.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
	var tsOut, tsErr bytes.Buffer
	tshark.Stdin, tshark.Stdout, tshark.Stderr = pr, &tsOut, &tsErr
	require.NoError(t, capt.Start())
	require.NoError(t, tshark.Start())
	pw.Close()
	pr.Close()
	done := make(chan error, 1)
	go func() { done <- tshark.Wait() }()
	var tsErrRun error
loop:
	for {
		select {
		case tsErrRun = <-done:
			break loop
		case <-time.After(300 * time.Millisecond):
			_ = exec.CommandContext(ctx, "nsenter", "--net="+netns,
				"ping", "-c", "1", "-W", "1", "203.0.113.100").Run()
		case <-ctx.Done():
			t.Fatalf("tshark read no 4 packets: %s", tsErr.String())
		}
	}
	require.NoError(t, tsErrRun, "tshark: %s", tsErr.String())
	assert.Contains(t, tsOut.String(), "192.168.1.2\t203.0.113.100\t8", "an echo request, seen on box's link")
	assert.Contains(t, tsOut.String(), "203.0.113.100\t192.168.1.2\t0", "its reply")
	// tshark went away: capture sees the broken pipe and ends cleanly.
	require.NoError(t, capt.Wait(), "capture: %s", capErr.String())
}

// TestExecFlagsAfterHost: exec takes --state after HOST, as the other live
// commands take it after their argument, instead of running "--state" as
// the command in the default lab.
func TestExecFlagsAfterHost(t *testing.T) {
	state := filepath.Join(t.TempDir(), "no-lab")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"state after host", []string{"exec", "box", "--state", state, "--", "true"}, 1, "no live lab: state dir " + state + " does not exist"},
		{"state before host", []string{"exec", "--state", state, "box", "--", "true"}, 1, "no live lab: state dir " + state + " does not exist"},
		{"stray word before --", []string{"exec", "box", "--state", state, "extra", "--", "true"}, 2, `"extra" before --: HOST comes first`},
		{"unknown flag after host", []string{"exec", "box", "--bogus", "--", "true"}, 2, "unknown flag: --bogus"},
		{"help after host", []string{"exec", "box", "--help", "--", "true"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, tc.args...)
			assert.Equal(t, tc.code, code, "%s\n%s", out, stderr)
			assert.Contains(t, stderr, tc.want)
			if tc.code == 0 {
				assert.Contains(t, out, "Usage:\n  lattice-lab exec HOST -- CMD")
			}
		})
	}
}
