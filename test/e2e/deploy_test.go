package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/latticelab/lattice/deploy"
	"github.com/latticelab/lattice/relay"
)

// TestDeployManifests runs deploy/'s control plane and a pod-mode sandbox
// under Docker, each container configured from its manifest (see
// deploy_pod_test.go): three NATS servers forming a JetStream cluster
// over TLS routes, the control replicas on it with the registry in a KV
// bucket, and two sandboxes of the pod-mode StatefulSet with every
// capability dropped, a read-only root, user nobody and no device. Each
// passes its manifest's probes; one sandbox reaches the other over the
// overlay on a direct path.
//
// The servers know one user, control; every other login goes to their
// auth callout, which control serves with an account nkey made here
// (deploy_callout_test.go): the sandboxes register and work through it,
// and a node logging in with its own credentials is refused every
// subscription and publication on a sandbox's subjects, and a login as
// that sandbox, which control logs.
//
// Not run: the relay and STUN (their Services map port 443 and 3478 to
// the pods, which Docker networks do not do; the sandboxes meet directly
// on one network).
func TestDeployManifests(t *testing.T) {
	ctx, img := setup(t)
	if host, err := publishedHost(t); err != nil || host != "127.0.0.1" {
		t.Skipf("probes dial the containers' addresses, which a remote engine (%s, %v) does not route here", host, err)
	}
	ctx, p := startControlPlane(ctx, t, img, testTimeout)
	m, nw, env, natsW, servers, controls, natsFP, token := p.m, p.nw, p.env, p.natsW, p.servers, p.controls, p.natsFP, p.token
	for _, c := range controls {
		assertManifestSettings(ctx, t, c, p.controlW, "control")
	}

	assertRegistryReplicas(ctx, t, servers[0], nw, int(natsW.Replicas))

	podW, err := m.Workload("agent")
	require.NoError(t, err)
	target := net.JoinHostPort(servers[0].ip(ctx, t, nw), "8222") // NATS' monitoring page: an HTTP server at hand
	web := env.runPod(ctx, t, nw, podSpec{w: podW, container: "sandbox", name: "agent-1",
		extraArgs: []string{"--forward", fmt.Sprintf("%d=%s", webPort, target)}})
	agent := env.runPod(ctx, t, nw, podSpec{w: podW, container: "sandbox", name: "agent-0"})
	for _, b := range []*box{agent, web} {
		assertUnprivileged(ctx, t, b)
		assertManifestSettings(ctx, t, b, podW, "sandbox")
	}
	addr := func(b *box) string {
		m := b.match(ctx, t, `sandbox: `+b.name+` \(\S+\) at ([^/\s]+)`)
		return m[1]
	}
	agentSB := &sandbox{box: agent, addr: addr(agent)}
	webSB := &sandbox{box: web, addr: addr(web)}
	assert.NotEqual(t, agentSB.addr, webSB.addr)

	dst := net.JoinHostPort(webSB.addr, fmt.Sprint(webPort))
	poll(ctx, t, "agent-0 dials agent-1's forward over the overlay", 60*time.Second, func(ctx context.Context) error {
		code, out, err := agent.exec(ctx, "sandbox", "agent", "dial", "--state-dir", stateDir, dst)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit code %d: %s", code, out)
		}
		return err
	})
	st := waitPath(ctx, t, agentSB, "agent-1", "direct", 30*time.Second)
	t.Logf("agent-0's view:\n%s", st)
	// The forward is audited (the log is on the pod's tmpfs, which docker
	// cp cannot read, so the check is lattice's own).
	code, out, err := web.exec(ctx, "sandbox", "audit", "verify", stateDir+"/audit.jsonl")
	require.NoError(t, err)
	assert.Equal(t, 0, code, "audit verify in agent-1:\n%s", out)
	assert.Contains(t, out, ": ok, ")

	// Confinement: a node registered through the last server (each server
	// asks the callout, whichever replica's connection it reaches) tries
	// agent-1's subjects.
	webID := web.match(ctx, t, `sandbox: agent-1 \((\S+)\) at `)[1]
	assertConfined(ctx, t, net.JoinHostPort(servers[len(servers)-1].ip(ctx, t, nw), "4222"), natsFP, token, webID, controls)

	// The restricted pod cannot isolate its agent in namespaces of its own
	// (RuntimeDefault refuses unshare(CLONE_NEWUSER)): without the
	// manifest's --isolation proxy the sandbox refuses to start, saying so.
	ns := env.startPod(ctx, t, nw, podSpec{w: podW, container: "sandbox", name: "agent-2",
		extraArgs: []string{"--isolation", "namespace"}})
	poll(ctx, t, "agent-2 with --isolation namespace exits", startTimeout, func(ctx context.Context) error {
		st, err := ns.State(ctx)
		if err != nil {
			return err
		}
		if st.Running {
			return fmt.Errorf("still running: %s", ns.output())
		}
		assert.NotEqual(t, 0, st.ExitCode, "agent-2's exit code")
		return nil
	})
	assert.Contains(t, ns.output(), "CLONE_NEWUSER", "the refusal names the cause")
	assert.Contains(t, ns.output(), "--isolation proxy", "and the way out")
	t.Logf("agent-2 with --isolation namespace under the restricted settings:\n%s", ns.output())

	// Every probe of every pod passes now, liveness included.
	for _, p := range []struct {
		b   *box
		w   deploy.Workload
		ctr string
	}{{servers[0], natsW, "nats"}, {agent, podW, "sandbox"}} {
		c, err := p.w.Container(p.ctr)
		require.NoError(t, err)
		for _, pr := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if pr != nil {
				assert.NoError(t, p.b.probe(ctx, t, c, pr), "%s: %s probe", p.b.name, probeKind(pr))
			}
		}
	}
}

// assertRegistryReplicas checks, on a NATS server's monitoring page, that
// the registry's stream (the KV bucket "lattice") has one replica on every
// server, so it survives losing one.
func assertRegistryReplicas(ctx context.Context, t *testing.T, nats *box, nw *testcontainers.DockerNetwork, want int) {
	t.Helper()
	url := "http://" + net.JoinHostPort(nats.ip(ctx, t, nw), "8222") + "/jsz?streams=true&config=true"
	var jsz struct {
		AccountDetails []struct {
			StreamDetail []struct {
				Name   string `json:"name"`
				Config struct {
					Replicas int `json:"num_replicas"`
				} `json:"config"`
				Cluster struct {
					Replicas []struct{ Name string } `json:"replicas"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&jsz))
	for _, a := range jsz.AccountDetails {
		for _, st := range a.StreamDetail {
			if st.Name == "KV_lattice" {
				assert.Equal(t, want, st.Config.Replicas, "the registry's replicas")
				assert.Len(t, st.Cluster.Replicas, want-1, "followers besides the leader")
				return
			}
		}
	}
	assert.Fail(t, "no stream KV_lattice on "+nats.name, "%+v", jsz)
}

// assertManifestSettings checks the engine's view of a container against
// its manifest: user, capabilities, read-only root, no_new_privs, limits.
func assertManifestSettings(ctx context.Context, t *testing.T, b *box, w deploy.Workload, ctr string) {
	t.Helper()
	c, err := w.Container(ctr)
	require.NoError(t, err)
	in, err := b.Inspect(ctx)
	require.NoError(t, err)
	want := &container.HostConfig{}
	podHostConfig(w, c, want)
	uid, gid, _ := podUser(w, c)
	hc := in.HostConfig
	assert.Equal(t, fmt.Sprintf("%d:%d", uid, gid), in.Config.User, "%s: user", b.name)
	assert.ElementsMatch(t, want.CapDrop, hc.CapDrop, "%s: dropped", b.name)
	assert.ElementsMatch(t, want.CapAdd, hc.CapAdd, "%s: added", b.name)
	assert.Equal(t, want.ReadonlyRootfs, hc.ReadonlyRootfs, "%s: read-only root", b.name)
	assert.Equal(t, slices.Contains(want.SecurityOpt, "no-new-privileges"), slices.Contains(hc.SecurityOpt, "no-new-privileges"), "%s", b.name)
	assert.Equal(t, want.Memory, hc.Memory, "%s: memory limit", b.name)
	assert.Equal(t, want.NanoCPUs, hc.NanoCPUs, "%s: CPU limit", b.name)
	assert.NotZero(t, hc.Memory, "%s: a memory limit", b.name)
}

// TestDeployGVisorMatchesE2E: the gvisor-mode manifest grants exactly
// what TestSandboxGVisorContainer runs gvisor mode with: the same
// capabilities, no seccomp filter, not privileged, root.
func TestDeployGVisorMatchesE2E(t *testing.T) {
	m, err := deploy.Load(deploy.Files)
	require.NoError(t, err)
	w, err := m.Workload("agent-gvisor")
	require.NoError(t, err)
	c, err := w.Container("sandbox")
	require.NoError(t, err)
	hc := &container.HostConfig{}
	podHostConfig(w, c, hc)
	assert.ElementsMatch(t, gvisorCapNames(), hc.CapAdd)
	assert.Equal(t, []string{"ALL"}, hc.CapDrop)
	assert.Contains(t, hc.SecurityOpt, "seccomp=unconfined")
	assert.False(t, hc.Privileged)
	uid, gid, _ := podUser(w, c)
	assert.Equal(t, [2]int64{0, 0}, [2]int64{uid, gid}, "root in the pod")
	var mounts []string
	for _, vm := range c.VolumeMounts {
		mounts = append(mounts, vm.MountPath)
	}
	assert.Subset(t, mounts, []string{"/tmp", "/run"}, "runsc's tmpfs directories")
	assert.NotContains(t, mounts, hostCgroups, "the node's cgroup tree: runsc runs with --ignore-cgroups and needs none")
}

// testCA issues the certificates a cluster's operator would (cert-manager
// or by hand): one CA, leaves for servers and clients.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lattice e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// leaf returns a certificate for names (server and client use, as NATS
// routes need both), its key, and its fingerprint as lattice pins it.
func (ca *testCA) leaf(t *testing.T, names ...string) (certPEM, keyPEM, fingerprint string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})), relay.CertFingerprint(der)
}
