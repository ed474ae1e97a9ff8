package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/internal/edition"
)

// TestUpEgressPolicy: `lattice up --egress-policy` in a namespace, with
// two peers (web and db) in another. With each backend this edition has:
// web is allowed by name, db (an overlay peer the policy does not name)
// and the metadata address (routed into the overlay for the test) are
// not; a SIGHUP after an edit opens db; a bad edit keeps the policy and
// says so; the denials are lines of an audit log that verifies.
func TestUpEgressPolicy(t *testing.T) {
	needRoot(t, "ip", "nsenter", "ping", "iptables", "ip6tables")
	dir, bin, nsA, nsB, ctrlURL := startNetnsPair(t, "le", 216)
	if edition.Pro() {
		// startNetnsPair's binary is the community edition.
		bin = filepath.Join(dir, "lattice-pro")
		sh(t, "go", "build", "-tags", "pro", "-o", bin, ".")
	}
	upRE := regexp.MustCompile(`up: \S+ \(\S+\) at ([0-9.]+)/10`)
	up := func(ns, name string, args ...string) (*proc, string) {
		t.Helper()
		args = append([]string{"up", "--name", name, "--control", ctrlURL, "--token-file", filepath.Join(dir, "token"),
			"--state-dir", filepath.Join(dir, name), "--port", "0"}, args...)
		p := startIn(t, ns, bin, args...)
		require.Eventually(t, func() bool { return upRE.MatchString(p.text()) }, 20*time.Second, 50*time.Millisecond, "%s: %s", name, p.text())
		return p, upRE.FindStringSubmatch(p.text())[1]
	}
	_, web := up(nsB, "web", "--interface", "lweb0")
	// db has a namespace of its own (two nodes in one would answer each
	// other's pings through the wrong tunnel), joined to A's.
	nsC := thirdNetns(t, nsA, "lec", 216)
	_, db := up(nsC, "db", "--interface", "ldb0")
	ping := func(addr string) bool {
		return exec.Command("nsenter", "--net=/run/netns/"+nsA, "ping", "-c", "1", "-W", "2", addr).Run() == nil
	}
	backends := []string{"iptables"}
	if edition.Pro() {
		backends = append(backends, "ebpf")
	}
	for i, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			pol := filepath.Join(t.TempDir(), "policy.yaml")
			writePolicyFile(t, pol, "default: deny\nrules:\n  - allow: peer:web\n    proto: icmp\n")
			auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
			ifname := fmt.Sprintf("lat%d", i)
			metrics := fmt.Sprintf("127.0.0.1:%d", 19090+i) // in nsA, a namespace of the test's own
			node, _ := up(nsA, fmt.Sprintf("edge-%d", i), "--interface", ifname, "--egress-policy", pol, "--egress-backend", backend, "--audit-log", auditLog,
				"--metrics-listen", metrics)
			require.Eventually(t, func() bool { return strings.Contains(node.text(), "enforced on "+ifname+" with "+backend) }, 10*time.Second, 20*time.Millisecond)
			require.Eventually(t, func() bool { return ping(web) }, 20*time.Second, 100*time.Millisecond, "web, allowed by name:\n%s", node.text())
			assert.False(t, ping(db), "db: overlay peer not named")
			sh(t, "ip", "-n", nsA, "route", "add", "169.254.169.254/32", "dev", ifname)
			assert.False(t, ping("169.254.169.254"), "metadata")
			// /metrics counts the kernel filter's decisions as the audit
			// log records them.
			dbDeny := regexp.QuoteMeta(`lattice_egress_decisions_total{decision="deny",rule="overlay peer not named"}`)
			metaDeny := regexp.QuoteMeta(`lattice_egress_decisions_total{decision="deny",rule="metadata"}`)
			var page string
			assert.Eventually(t, func() bool {
				out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, "curl", "-sS", "--max-time", "5", "http://"+metrics+"/metrics").CombinedOutput()
				page = string(out)
				return err == nil && sample(page, dbDeny) >= 1 && sample(page, metaDeny) >= 1
			}, 10*time.Second, 200*time.Millisecond, "db's and the metadata denial on /metrics; last page:\n%s", &page)
			assert.Equal(t, 0.0, sample(page, "lattice_egress_audit_write_errors_total"))

			writePolicyFile(t, pol, "default: deny\nrules:\n  - allow: [peer:web, peer:db]\n    proto: icmp\n")
			require.NoError(t, node.cmd.Process.Signal(syscall.SIGHUP))
			assert.Eventually(t, func() bool { return ping(db) }, 10*time.Second, 100*time.Millisecond, "db after the edit and SIGHUP")

			writePolicyFile(t, pol, "default: deny\nrules:\n  - allow: peer:db\n    proto: icmp\n    ports: [80]\n")
			require.NoError(t, node.cmd.Process.Signal(syscall.SIGHUP))
			assert.Eventually(t, func() bool { return strings.Contains(node.text(), "keeping the policy in force") }, 10*time.Second, 50*time.Millisecond)
			assert.True(t, ping(db), "the bad edit keeps the policy in force")
			assert.True(t, ping(web))

			require.NoError(t, node.cmd.Process.Signal(syscall.SIGTERM))
			node.waitExit(t, 15*time.Second)
			out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, "iptables", "-S").CombinedOutput()
			require.NoError(t, err)
			assert.NotContains(t, string(out), "LATTICE-"+ifname, "a clean stop removes the chains")
			_, err = audit.VerifyFile(auditLog)
			require.NoError(t, err, "the audit log verifies")
			denied := auditDenials(t, auditLog)
			assert.Equal(t, "overlay peer not named", denied[db], "db's denial audited: %v", denied)
			assert.Equal(t, "metadata", denied["169.254.169.254"], "the metadata denial audited: %v", denied)
		})
	}
}

// TestUpEgressFailClosed: with --egress-fail-closed, kill -9 leaves the
// filter in the kernel: the pinned eBPF link (Pro) or the iptables chains
// (community); the next `lattice up` replaces it and a clean stop removes
// it; `lattice egress clear` removes one left behind.
func TestUpEgressFailClosed(t *testing.T) {
	needRoot(t, "ip", "nsenter", "ping", "iptables", "ip6tables")
	dir, bin, nsA, _, ctrlURL := startNetnsPair(t, "lf", 217)
	backend := "iptables"
	if edition.Pro() {
		backend = "ebpf"
		bin = filepath.Join(dir, "lattice-pro")
		sh(t, "go", "build", "-tags", "pro", "-o", bin, ".")
	}
	pin := t.TempDir()
	require.NoError(t, unix.Mount("bpffs", pin, "bpf", 0, "mode=0700"))
	t.Cleanup(func() { _ = unix.Unmount(pin, unix.MNT_DETACH) })
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicyFile(t, pol, "default: deny\n")
	start := func() *proc {
		p := startIn(t, nsA, bin, "up", "--name", "edge", "--control", ctrlURL, "--token-file", filepath.Join(dir, "token"),
			"--state-dir", filepath.Join(dir, "edge"), "--port", "0", "--interface", "lfc0",
			"--egress-policy", pol, "--egress-fail-closed", "--egress-pin-root", pin)
		require.Eventually(t, func() bool { return strings.Contains(p.text(), "enforced on lfc0 with "+backend) }, 20*time.Second, 50*time.Millisecond, p.text())
		return p
	}
	link := filepath.Join(pin, "lfc0", "link")
	left := func() bool {
		if backend == "ebpf" {
			_, err := os.Stat(link)
			return err == nil
		}
		out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, "iptables", "-S").CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.Contains(string(out), "LATTICE-lfc0")
	}
	kill := func(p *proc) {
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.waitExit(t, 5*time.Second)
	}
	p := start()
	require.True(t, left())
	kill(p)
	assert.True(t, left(), "the filter outlives kill -9")

	// The next run replaces it and, stopping cleanly, removes it.
	p = start()
	if backend == "ebpf" {
		assert.Contains(t, p.text(), "replaced the link pinned by an earlier run")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	p.waitExit(t, 15*time.Second)
	assert.False(t, left(), "a clean stop removes it")

	kill(start())
	require.True(t, left())
	out, err := exec.Command("nsenter", "--net=/run/netns/"+nsA, bin, "egress", "clear", "--interface", "lfc0", "--pin-root", pin).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "egress: removed the ")
	assert.False(t, left(), "cleared")
}

// thirdNetns makes a namespace joined to nsA by a veth pair on
// 10.OCTET.1.0/24 (.1 in A), and returns its name. It reaches control on
// A's 10.OCTET.0.1 through A.
func thirdNetns(t *testing.T, nsA, tag string, octet int) string {
	t.Helper()
	suffix := fmt.Sprintf("%d", os.Getpid()%100000)
	ns := tag + "-" + suffix
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	va, vc := tag+"a"+suffix, tag+"c"+suffix
	sh(t, "ip", "link", "add", va, "type", "veth", "peer", "name", vc)
	sh(t, "ip", "link", "set", va, "netns", nsA)
	sh(t, "ip", "link", "set", vc, "netns", ns)
	sh(t, "ip", "-n", nsA, "addr", "add", fmt.Sprintf("10.%d.1.1/24", octet), "dev", va)
	sh(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("10.%d.1.2/24", octet), "dev", vc)
	sh(t, "ip", "-n", nsA, "link", "set", va, "up")
	sh(t, "ip", "-n", ns, "link", "set", vc, "up")
	sh(t, "ip", "-n", ns, "route", "add", fmt.Sprintf("10.%d.0.0/24", octet), "via", fmt.Sprintf("10.%d.1.1", octet))
	return ns
}

func writePolicyFile(t *testing.T, path, src string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path+".tmp", []byte(src), 0o600))
	require.NoError(t, os.Rename(path+".tmp", path))
}

// auditDenials maps each denied destination address in the log to its rule.
func auditDenials(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev audit.Event
		require.NoError(t, json.Unmarshal(sc.Bytes(), &ev))
		if ev.Kind == "egress" && ev.Decision == "deny" {
			out[strings.TrimSuffix(ev.Dst, ":0")] = ev.Rule
		}
	}
	require.NoError(t, sc.Err())
	return out
}
