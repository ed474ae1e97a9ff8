package fabric_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/lab/fabric"
	"github.com/latticelab/lattice/lab/labtest"
	"github.com/latticelab/lattice/lab/link"
)

// TestKernelHost: a network namespace joined to the fabric behind an
// emulated NAT reaches a lab host on the internet with the kernel's own
// ping and curl, and the server sees the NAT's public address.
func TestKernelHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, TUN devices)")
	}
	for _, tool := range []string{"ip", "nsenter", "ping", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps installs it)", tool)
		}
	}
	// Registered first, so it runs after every other cleanup: nothing the
	// test started (the HTTP client's connections included) outlives it.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	w := labtest.New(t, fabric.Config{})
	site := w.Site(t, "port-restricted-cone")
	k, err := w.Fabric.AddKernelHost(fabric.KernelHostConfig{Name: fmt.Sprintf("kh%d", os.Getpid()%10000),
		Interface: fabric.InterfaceConfig{Network: "lan0", Addr: netip.MustParseAddr("192.168.1.3")}, Gateway: labtest.Gateway})
	require.NoError(t, err)

	ln, err := w.Server.Listen(t.Context(), "tcp", "203.0.113.100:80")
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "you are %s", r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	in := func(name string, args ...string) (string, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + k.NetnsPath(), name}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := in("ping", "-c", "2", "-W", "2", "203.0.113.100")
	require.NoError(t, err, out)
	assert.Contains(t, out, "2 received")
	out, err = in("curl", "-sS", "--max-time", "10", "http://203.0.113.100/")
	require.NoError(t, err, out)
	assert.True(t, strings.HasPrefix(out, "you are "+site.Public.String()+":"), "the server sees the NAT's address: %s", out)

	// The fabric's impairments apply to it like to any host.
	require.NoError(t, k.Interface().SetImpairments(fabric.Egress, link.Impairments{Latency: 30 * time.Millisecond}))
	out, err = in("ping", "-c", "3", "-W", "2", "203.0.113.100")
	require.NoError(t, err, out)
	assert.Regexp(t, `rtt min/avg/max/mdev = (2[89]|3[0-9])\.`, out, "30 ms added")

	// In-process code uses it as a netx.Network: its sockets are the
	// namespace's, behind the NAT.
	require.Same(t, k, w.Fabric.KernelHost(k.Name()))
	ifs, err := k.Interfaces()
	require.NoError(t, err)
	var names []string
	for _, ifc := range ifs {
		names = append(names, ifc.Name)
		if ifc.Name == "eth0" {
			assert.Contains(t, ifc.Addrs, netip.MustParsePrefix("192.168.1.3/24"))
		}
	}
	assert.ElementsMatch(t, []string{"lo", "eth0"}, names, "only the namespace's interfaces")
	// One request, no keep-alive: an idle connection's readLoop would
	// outlive the test and trip goleak at exit whenever the fabric's
	// teardown did not reach the kernel socket in time.
	noHTTP := goleak.IgnoreCurrent()
	tr := &http.Transport{DialContext: k.Dial, DisableKeepAlives: true}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get("http://203.0.113.100/")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	goleak.VerifyNone(t, noHTTP)
	assert.True(t, strings.HasPrefix(string(body), "you are "+site.Public.String()+":"), "a Dial from the namespace goes through the NAT: %s", body)
	kln, err := k.Listen(t.Context(), "tcp", "192.168.1.3:0")
	require.NoError(t, err)
	t.Cleanup(func() { kln.Close() })
	out, err = in("ss", "-Htln")
	require.NoError(t, err, out)
	assert.Contains(t, out, kln.Addr().String(), "the listener is in the namespace")

	require.NoError(t, w.Fabric.Close())
	_, err = os.Stat(k.NetnsPath())
	assert.True(t, errors.Is(err, os.ErrNotExist), "the namespace is removed with the fabric")
}

// TestReapNamespaces: a namespace left by a lab that was killed (its PID
// is gone) is removed; one whose lab still runs is not.
func TestReapNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (make deps installs it)")
	}
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	dead := fmt.Sprintf("lab-reaptest-%d-1", gone.Process.Pid)
	live := fmt.Sprintf("lab-reaptest-%d-1", os.Getppid())
	for _, ns := range []string{dead, live} {
		out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
		require.NoError(t, err, string(out))
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	reaped, err := fabric.ReapNamespaces()
	require.NoError(t, err)
	assert.Contains(t, reaped, dead)
	assert.NotContains(t, reaped, live, "its process still runs")
	_, err = os.Stat("/run/netns/" + dead)
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat("/run/netns/" + live)
	assert.NoError(t, err)
}
