package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	corev1 "k8s.io/api/core/v1"

	"github.com/latticelab/lattice/deploy"
)

// controlPlane is deploy/'s control plane running under Docker (see
// deploy_pod_test.go): the NATS servers of the nats StatefulSet, a
// JetStream cluster over TLS routes, and the control replicas on it with
// the registry in its KV bucket and the auth callout.
type controlPlane struct {
	m                 *deploy.Manifests
	env               *podEnv
	nw                *testcontainers.DockerNetwork
	natsW, controlW   deploy.Workload
	servers, controls []*box
	natsFP            string // the servers' certificate, as lattice pins it
	token             string // a join token control accepts
	controlUser       string // control's NATS login
	callout           calloutSecrets
}

// startControlPlane starts the control plane from the manifests and
// waits until every server passes its probes and every control replica
// has opened the registry. The returned context ends after timeout (the
// NATS build has its own bound).
func startControlPlane(ctx context.Context, t *testing.T, img string, timeout time.Duration) (context.Context, *controlPlane) {
	t.Helper()
	m, err := deploy.Load(deploy.Files)
	require.NoError(t, err)
	nats := natsImage(ctx, t)
	natsW, err := m.Workload("nats")
	require.NoError(t, err)
	natsC, err := natsW.Container("nats")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancel)

	ca := newTestCA(t)
	natsCert, natsKey, natsFP := ca.leaf(t, "nats-0.nats-headless", "nats-1.nats-headless", "nats-2.nats-headless", "nats", "nats.lattice.svc")
	controlCert, controlKey, _ := ca.leaf(t, "control")
	_, _, relayFP := ca.leaf(t, "relay.lattice.svc")
	p := &controlPlane{m: m, natsW: natsW, natsFP: natsFP, token: "e2e-join-" + randomHex(16)}
	p.controlW, err = m.Workload("control")
	require.NoError(t, err)
	controlC, err := p.controlW.Container("control")
	require.NoError(t, err)
	p.controlUser = deploy.FlagValue(controlC.Args, "--nats-user")
	p.callout = newCalloutSecrets(t, p.controlUser)
	p.env = &podEnv{
		images: map[string]string{natsC.Image: nats, "lattice:dev": img, "lattice:dev-pro": img},
		configMaps: map[string]map[string]string{
			"nats-config":          m.Find("ConfigMap", "nats-config").Value.(*corev1.ConfigMap).Data,
			"lattice-fingerprints": {"nats": natsFP, "relay": relayFP},
			"nats-callout":         {"issuer": p.callout.issuer},
		},
		secrets: map[string]map[string]string{
			"nats-auth":         {"auth.conf": p.callout.authConf},
			"nats-callout-seed": {"seed": p.callout.seed + "\n"},
			"nats-tls":          {"tls.crt": natsCert, "tls.key": natsKey, "ca.crt": ca.certPEM},
			"control-tokens":    {"tokens": p.token + "\n"},
			"nats-control":      {"password": p.callout.password + "\n"},
			"relay-secret":      {"secret": randomHex(32) + "\n"},
			"control-tls":       {"tls.crt": controlCert, "tls.key": controlKey},
			"agent-token":       {"token": p.token + "\n"},
			"agent-proxy":       {"credentials": "agent:" + randomHex(12) + "\n"},
		},
	}
	p.nw = newNetwork(ctx, t)

	// The servers start together (podManagementPolicy Parallel) and find
	// each other by their headless names; none is healthy before the
	// JetStream cluster has a leader.
	p.servers = make([]*box, natsW.Replicas)
	for i := range p.servers {
		p.servers[i] = p.env.startPod(ctx, t, p.nw, p.natsPod(i))
	}
	for _, s := range p.servers {
		p.env.waitReady(ctx, t, s, natsW, "nats")
	}
	p.controls = make([]*box, p.controlW.Replicas)
	for i := range p.controls {
		c := p.env.runPod(ctx, t, p.nw, p.controlPod(i))
		c.match(ctx, t, `control: registry in `)
		p.controls[i] = c
	}
	return ctx, p
}

// natsPod is the nats StatefulSet's pod i.
func (p *controlPlane) natsPod(i int) podSpec {
	name := fmt.Sprintf("nats-%d", i)
	return podSpec{w: p.natsW, container: "nats", name: name,
		aliases: []string{name + ".nats-headless", "nats", "nats.lattice.svc"}}
}

// controlPod is the control Deployment's pod i.
func (p *controlPlane) controlPod(i int) podSpec {
	return podSpec{w: p.controlW, container: "control", name: fmt.Sprintf("control-%d", i), aliases: []string{"control"}}
}

// clientAddr is the client port of server i, as seen from the test.
func (p *controlPlane) clientAddr(ctx context.Context, t *testing.T, i int) string {
	t.Helper()
	return net.JoinHostPort(p.servers[i].ip(ctx, t, p.nw), "4222")
}

// startPair starts two sandboxes of the pod-mode StatefulSet on the
// control plane, as TestDeployManifests does: agent-1 forwards webPort
// on its overlay address to target, agent-0 serves its SOCKS5 proxy on
// its pod's address (so the test can reach it) besides the manifest's
// settings. It returns them once agent-0 has a direct path to agent-1.
func (p *controlPlane) startPair(ctx context.Context, t *testing.T, target string) (agent, web *sandbox) {
	t.Helper()
	podW, err := p.m.Workload("agent")
	require.NoError(t, err)
	start := func(name string, extra ...string) *sandbox {
		b := p.env.runPod(ctx, t, p.nw, podSpec{w: podW, container: "sandbox", name: name, extraArgs: extra})
		m := b.match(ctx, t, `sandbox: `+name+` \((\S+)\) at ([^/\s]+)`)
		return &sandbox{box: b, nodeID: m[1], addr: m[2]}
	}
	web = start("agent-1", "--forward", fmt.Sprintf("%d=%s", webPort, target))
	agent = start("agent-0", "--socks5", "0.0.0.0:1080")
	agent.user, agent.pass, _ = strings.Cut(strings.TrimSpace(p.env.secrets["agent-proxy"]["credentials"]), ":")
	require.NotEqual(t, agent.addr, web.addr)
	waitPath(ctx, t, agent, web.name, "direct", 60*time.Second)
	return agent, web
}
