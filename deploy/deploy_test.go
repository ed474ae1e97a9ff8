package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestManifests: the tree as shipped decodes strictly and passes every
// check, and holds what docs/OPERATIONS.md describes.
func TestManifests(t *testing.T) {
	m, err := Load(Files)
	require.NoError(t, err)
	require.NoError(t, Check(Files, m))
	count := map[string]int{}
	for _, o := range m.Objects {
		count[o.Kind]++
	}
	assert.Equal(t, map[string]int{"Namespace": 3, "Service": 5, "ConfigMap": 1, "Deployment": 3, "StatefulSet": 3,
		"PodDisruptionBudget": 2, "Kustomization": 4}, count)
	for _, name := range []string{"relay", "stun"} {
		svc := m.Find("Service", name).Value.(*corev1.Service)
		assert.Equal(t, corev1.ServiceTypeLoadBalancer, svc.Spec.Type, name)
	}
	relay := m.Find("Service", "relay").Value.(*corev1.Service)
	var protos []corev1.Protocol
	for _, p := range relay.Spec.Ports {
		protos = append(protos, p.Protocol)
	}
	assert.ElementsMatch(t, []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP}, protos, "relay: QUIC and TLS over TCP")
	stun := m.Find("Service", "stun").Value.(*corev1.Service)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, stun.Spec.ExternalTrafficPolicy, "STUN must see the client's address")
}

// files copies the tree into a MapFS, with replace applied to one file.
func files(t *testing.T, file, old, replacement string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	found := file == ""
	require.NoError(t, fs.WalkDir(Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(Files, p)
		if err != nil {
			return err
		}
		if p == file {
			require.Contains(t, string(b), old, "the mutation's text is in %s", file)
			b = []byte(strings.Replace(string(b), old, replacement, 1))
			found = true
		}
		out[p] = &fstest.MapFile{Data: b, Mode: 0o644}
		return nil
	}))
	require.True(t, found, "file %s", file)
	return out
}

// TestBrokenManifests: each check fails on a manifest broken the way it
// guards against, naming the place.
func TestBrokenManifests(t *testing.T) {
	const pod, gv = "sandbox/pod/sandbox.yaml", "sandbox/gvisor/sandbox.yaml"
	tests := []struct {
		name, file, old, new string
		wantErr              string
	}{
		{"unknown field", "base/control.yaml", "      enableServiceLinks: false", "      enableServiceLink: false",
			`base/control.yaml:49:7: json: unknown field "enableServiceLink"`},
		{"duplicated field", "base/stun.yaml", "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", `base/stun.yaml:`},
		{"wrong type", "base/nats.yaml", "  replicas: 3", "  replicas: three", `base/nats.yaml:45:3: json: cannot unmarshal string`},
		{"bad quantity", "base/control.yaml", `limits: {cpu: "1", memory: 512Mi}`, `limits: {cpu: "1", memory: 512MB}`,
			`base/control.yaml:116:40: memory: "512MB" is not a Kubernetes quantity`},
		{"bad quantity in a block", "base/control.yaml", `            limits: {cpu: "1", memory: 512Mi}`, "            limits:\n              cpu: one\n              memory: 512Mi",
			`base/control.yaml:117:20: cpu: "one" is not a Kubernetes quantity`},
		{"bad YAML", "base/relay.yaml", "  type: LoadBalancer", "  type: [LoadBalancer", `base/relay.yaml:`},
		{"unknown kind", "base/namespace.yaml", "kind: Namespace", "kind: Namespaces", `base/namespace.yaml:1:1: unknown kind "Namespaces"`},
		{"file not listed", "base/kustomization.yaml", "  - stun.yaml\n", "", "base/stun.yaml is not in resources"},
		{"listed file missing", "sandbox/pod/kustomization.yaml", "  - sandbox.yaml", "  - sandboxes.yaml", "resource sandboxes.yaml: open"},
		{"namespace not restricted", "sandbox/pod/namespace.yaml", "enforce: restricted", "enforce: baseline", `enforces PodSecurity "baseline"`},
		{"runs as root", pod, "runAsUser: 65534", "runAsUser: 0", "container sandbox: runAsUser is not a non-zero uid"},
		{"not runAsNonRoot", pod, "runAsNonRoot: true", "runAsNonRoot: false", "runAsNonRoot is not true"},
		{"a capability added", pod, "capabilities: {drop: [ALL]}", "capabilities: {drop: [ALL], add: [NET_RAW]}", "capabilities are not drop [ALL], add none"},
		{"capabilities kept", pod, "capabilities: {drop: [ALL]}", "capabilities: {drop: [NET_RAW]}", "capabilities are not drop [ALL], add none"},
		{"writable root", pod, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem is not true"},
		{"privilege escalation", pod, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true", "allowPrivilegeEscalation is not false"},
		{"no seccomp", pod, "seccompProfile: {type: RuntimeDefault}", "seccompProfile: {type: Unconfined}", "seccompProfile is not RuntimeDefault"},
		{"a device", pod, `limits: {cpu: "1", memory: 256Mi}`, `limits: {cpu: "1", memory: 256Mi, squat.ai/tun: "1"}`, "asks for device squat.ai/tun"},
		{"hostPath", "base/control.yaml", "emptyDir: {sizeLimit: 64Mi}", "hostPath: {path: /var/lib/lattice}", "volume state is a hostPath"},
		{"unmasked proc", pod, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: false\n            procMount: Unmasked", "procMount Unmasked"},
		{"gvisor: one capability more", gv, "add: [NET_ADMIN, SYS_ADMIN, SYS_CHROOT]", "add: [DAC_OVERRIDE, NET_ADMIN, SYS_ADMIN, SYS_CHROOT]", "want drop [ALL] add [NET_ADMIN SYS_ADMIN SYS_CHROOT]"},
		{"gvisor: one capability less", gv, "add: [NET_ADMIN, SYS_ADMIN, SYS_CHROOT]", "add: [NET_ADMIN, SYS_ADMIN]", "add [NET_ADMIN SYS_ADMIN], want"},
		{"gvisor: privileged", gv, "privileged: false", "privileged: true", "container sandbox is privileged"},
		{"gvisor: no tun", gv, `, squat.ai/tun: "1"}`, "}", "no squat.ai/tun limit of 1"},
		{"no probe", "base/relay.yaml", "          livenessProbe:\n            tcpSocket: {port: relay-tcp}\n            periodSeconds: 20\n", "", "container relay lacks a liveness or readiness probe"},
		{"probes excused on TCP", "base/stun.yaml", "protocol: UDP}\n          resources", "protocol: TCP}\n          resources", "excuses probes but port 3478 is TCP"},
		{"no limits", "base/control.yaml", `limits: {cpu: "1", memory: 512Mi}`, `limits: {cpu: "1"}`, "container control: no memory limit"},
		{"no requests", "base/nats.yaml", "requests: {cpu: 250m, memory: 256Mi}", "requests: {memory: 256Mi}", "container nats: no cpu request"},
		{"two NATS servers", "base/nats.yaml", "  replicas: 3", "  replicas: 2", "StatefulSet nats: 2 replicas, want 3"},
		{"one control replica", "base/control.yaml", "  replicas: 2", "  replicas: 1", "Deployment control: 1 replicas, want 2"},
		{"a route missing", "base/nats-config.yaml", "        nats://nats-2.nats-headless:6222\n", "", "nats.conf has no route nats://nats-2.nats-headless:6222"},
		{"registry on one server", "base/control.yaml", "- --kv-replicas\n            - \"3\"", "- --kv-replicas\n            - \"1\"", `--kv-replicas "1", want 3`},
		{"control sees one server", "base/control.yaml", "- tls://nats:4222?", "- tls://nats-0.nats-headless:4222?", "want the nats Service (tls://nats:4222) or all 3 servers"},
		{"listens on a pod IP", "base/relay.yaml", "- 0.0.0.0:4443", "- 10.0.0.1:4443", "--listen 10.0.0.1:4443: serve on 0.0.0.0"},
		{"listens off its ports", "base/stun.yaml", "0.0.0.0:3478", "0.0.0.0:3479", "--listen 0.0.0.0:3479 is not a declared port"},
		{"a port nobody serves", "base/control.yaml", "- {name: https, containerPort: 8443, protocol: TCP}", "- {name: https, containerPort: 8443, protocol: TCP}\n            - {name: extra, containerPort: 9999, protocol: TCP}", "port 9999/TCP is declared but nothing listens there"},
		{"service protocol", "base/relay.yaml", "targetPort: relay-udp, protocol: UDP", "targetPort: relay-udp, protocol: SCTP", "port quic: relay has no SCTP port relay-udp"},
		{"service selects nothing", "base/nats.yaml", "  name: nats\n  labels: {app.kubernetes.io/name: nats}\nspec:\n  selector: {app.kubernetes.io/name: nats}", "  name: nats\n  labels: {app.kubernetes.io/name: nats}\nspec:\n  selector: {app.kubernetes.io/name: natz}", "Service nats: selects no workload"},
		{"secret readable by group", "base/control.yaml", "secretName: control-tokens, defaultMode: 0400", "secretName: control-tokens, defaultMode: 0440", "secret volume tokens: defaultMode is not 0400"},
		{"no authorization", "base/nats-config.yaml", "    authorization {", "    authorisation {", "nats.conf has no authorization block"},
		{"no auth callout", "base/nats-config.yaml", "      auth_callout {", "      callout {", "authorization has no auth_callout"},
		{"issuer in the tree", "base/nats-config.yaml", "issuer: $AUTH_CALLOUT_ISSUER", "issuer: ABCDEFGH", "auth_callout issuer ABCDEFGH: want $VAR"},
		{"issuer not in the environment", "base/nats.yaml", "- name: AUTH_CALLOUT_ISSUER", "- name: CALLOUT_ISSUER", "AUTH_CALLOUT_ISSUER is not in the nats container's environment"},
		{"issuer not from a ConfigMap", "base/nats.yaml", "configMapKeyRef: {name: nats-callout, key: issuer}", "fieldRef: {fieldPath: metadata.name}", "AUTH_CALLOUT_ISSUER does not come from a ConfigMap key"},
		{"control not in auth_users", "base/nats-config.yaml", "auth_users: [ control ]", "auth_users: [ admin ]", "auth_users [admin] lack control's NATS user control"},
		{"control serves no callout", "base/control.yaml", "            - --auth-callout-seed-file\n            - /etc/lattice/callout/seed\n", "", "control has no --auth-callout-seed-file"},
		{"callout seed not a Secret", "base/control.yaml", "- /etc/lattice/callout/seed", "- /var/lib/lattice/control/seed", "--auth-callout-seed-file /var/lib/lattice/control/seed is not in a Secret volume"},
		{"callout seed readable by group", "base/control.yaml", "secretName: nats-callout-seed, defaultMode: 0400", "secretName: nats-callout-seed, defaultMode: 0440", "secret volume callout: defaultMode is not 0400"},
		{"callout seed on the NATS servers", "base/nats.yaml", "secretName: nats-auth,", "secretName: nats-callout-seed,", "volume auth is Secret nats-callout-seed, control's auth callout seed: only control may hold it"},
		{"secret owned by root", "base/relay.yaml", "secretName: relay-tls, defaultMode: 0400, defaultUser: 65534", "secretName: relay-tls, defaultMode: 0400", "secret volume tls: defaultUser 0, want the pod's user 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := files(t, tt.file, tt.old, tt.new)
			m, err := Load(fsys)
			if err == nil {
				err = Check(fsys, m)
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// lattice is the binary built from cmd/lattice, once for the package.
var lattice struct {
	once sync.Once
	path string
	err  error
}

// latticeBin builds cmd/lattice (community edition: the flags are the
// same in both) into a directory removed when the package's tests end.
func latticeBin(t *testing.T) string {
	t.Helper()
	lattice.once.Do(func() {
		dir, err := os.MkdirTemp("", "lattice-deploy-")
		if err != nil {
			lattice.err = err
			return
		}
		lattice.path = filepath.Join(dir, "lattice")
		cmd := exec.Command("go", "build", "-o", lattice.path, "../cmd/lattice")
		if out, err := cmd.CombinedOutput(); err != nil {
			lattice.err = fmt.Errorf("go build ../cmd/lattice: %w\n%s", err, out)
		}
	})
	require.NoError(t, lattice.err)
	return lattice.path
}

var (
	flagRe     = regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z0-9-]+)`)
	unknownCmd = regexp.MustCompile(`(?m)^Usage:\n\s+lattice (.*) \[flags\]`)
)

// helpFlags runs `lattice PATH... --help` and reads the flags it lists
// (its own and the inherited ones). cobra falls back to the parent for an
// unknown subcommand, so the usage line must name the whole path.
func helpFlags(bin string) KnownFlags {
	return func(path []string) (map[string]bool, error) {
		out, err := exec.Command(bin, slices.Concat(path, []string{"--help"})...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("--help: %w\n%s", err, out)
		}
		if m := unknownCmd.FindSubmatch(out); m == nil || string(m[1]) != strings.Join(path, " ") {
			return nil, errors.New("no such command")
		}
		_, after, _ := bytes.Cut(out, []byte("\nFlags:\n"))
		flags := map[string]bool{}
		for _, m := range flagRe.FindAllSubmatch(after, -1) {
			flags[string(m[1])] = true
		}
		return flags, nil
	}
}

// TestFlagsExist: every lattice command line in the manifests uses a
// real command and real flags of the binary built from this tree.
func TestFlagsExist(t *testing.T) {
	known := helpFlags(latticeBin(t))
	m, err := Load(Files)
	require.NoError(t, err)
	require.NoError(t, CheckFlags(m, known))

	flags, err := known([]string{"control"})
	require.NoError(t, err)
	assert.True(t, flags["--nats-url"] && flags["--store"], "the help parser reads control's flags: %v", flags)

	for _, tt := range []struct{ name, file, old, new, wantErr string }{
		{"no such flag", "base/control.yaml", "- --store\n", "- --stor\n", "lattice control has no flag --stor"},
		{"no such command", "base/stun.yaml", "args: [stun,", "args: [stunn,", "lattice stunn: no such command"},
		{"no such probe flag", "sandbox/pod/sandbox.yaml", "[/lattice, sandbox, agent, status, --state-dir", "[/lattice, sandbox, agent, status, --state", "lattice sandbox agent status has no flag --state"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Load(files(t, tt.file, tt.old, tt.new))
			require.NoError(t, err)
			err = CheckFlags(m, known)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// TestNATSVersion: the NATS servers run the nats-server release go.mod
// pins for the embedded server, which control and nodes are tested with.
func TestNATSVersion(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	v := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(mod)
	require.NotNil(t, v, "go.mod pins nats-server")
	m, err := Load(Files)
	require.NoError(t, err)
	w, err := m.Workload("nats")
	require.NoError(t, err)
	c, err := w.Container("nats")
	require.NoError(t, err)
	assert.Equal(t, "nats:"+string(v[1]), c.Image)
}

// TestKustomizeBuild: kubectl renders the example overlay, and what it
// renders decodes strictly: the whole deployment and nothing else.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skipf("kubectl renders the kustomizations: %v", err)
	}
	out, err := exec.Command(kubectl, "kustomize", "overlays/example").CombinedOutput()
	require.NoError(t, err, "%s", out)
	objs, err := Decode("kubectl-kustomize", out)
	require.NoError(t, err)
	ns := map[string]string{}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			ns[o.Name] = v.Namespace
		case *appsv1.StatefulSet:
			ns[o.Name] = v.Namespace
		}
	}
	assert.Equal(t, map[string]string{"nats": "lattice", "control": "lattice", "relay": "lattice", "stun": "lattice",
		"agent": "lattice-agents", "agent-gvisor": "lattice-gvisor"}, ns)
}

// FuzzDecode: no input makes Decode panic, and an error always names
// the file with a line.
func FuzzDecode(f *testing.F) {
	_ = fs.WalkDir(Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(Files, p)
			f.Add(b)
		}
		return nil
	})
	f.Add([]byte("---\n---\nkind: [\n"))
	f.Add([]byte("apiVersion: v1\nkind: Service\nspec:\n  limits: {cpu: x}\n---\napiVersion: apps/v1\nkind: Deployment\nspec: {template: {spec: {containers: [{name: c, resources: {limits: {memory: 1..2}}}]}}}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := Decode("f.yaml", b)
		if err != nil && !regexp.MustCompile(`^f\.yaml:\d+:\d+: `).MatchString(err.Error()) {
			t.Fatalf("error without a place: %v", err)
		}
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	if lattice.path != "" {
		os.RemoveAll(filepath.Dir(lattice.path))
	}
	os.Exit(code)
}
