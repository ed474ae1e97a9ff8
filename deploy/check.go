package deploy

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// GVisorCapabilities are the only capabilities a gvisor-mode sandbox
// keeps, as test/e2e/gvisor_test.go runs it: NET_ADMIN for phase 1 (wg0,
// routes, iptables), SYS_ADMIN and SYS_CHROOT for runsc's sandbox and its
// gofer's chroot. runsc runs with --ignore-cgroups, so it needs neither
// the node's cgroup tree nor DAC_OVERRIDE to write there.
var GVisorCapabilities = []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "SYS_CHROOT"}

// TunResource is the device plugin resource that gives a pod /dev/net/tun.
const TunResource corev1.ResourceName = "squat.ai/tun"

// NoProbes is the pod annotation that excuses a UDP-only workload from
// probes (the kubelet has no UDP probe); its value says why.
const NoProbes = "lattice.dev/no-probes"

// LatticeImage tells whether a container runs the lattice binary.
func LatticeImage(c *corev1.Container) bool {
	name, _, _ := strings.Cut(c.Image, ":")
	return name == "lattice"
}

// Check verifies the manifests' claims; fsys is the tree they came from
// (for the kustomizations). It returns every violation, each naming its
// object.
func Check(fsys fs.FS, m *Manifests) error {
	errs := []error{checkKustomizations(fsys, m), checkReplicas(m), checkCallout(m)}
	for _, w := range m.Workloads() {
		level, err := m.podSecurity(w)
		errs = append(errs, err)
		switch level {
		case "restricted":
			errs = append(errs, checkRestricted(w))
		case "privileged":
			errs = append(errs, checkGVisor(w))
		}
		errs = append(errs, checkProbes(w), checkResources(w), checkListen(w), checkSecrets(w))
	}
	errs = append(errs, checkServices(m))
	return errors.Join(errs...)
}

// kustomization returns the Kustomization in dir, or nil.
func (m *Manifests) kustomization(dir string) *Kustomization {
	if o := m.Find("Kustomization", dir); o != nil {
		return o.Value.(*Kustomization)
	}
	return nil
}

// checkKustomizations: each kustomization lists every .yaml beside it,
// and everything it lists exists (a file, or a directory with its own
// kustomization.yaml).
func checkKustomizations(fsys fs.FS, m *Manifests) error {
	var errs []error
	for _, o := range m.Objects {
		k, ok := o.Value.(*Kustomization)
		if !ok {
			continue
		}
		dir := path.Dir(o.File)
		listed := map[string]bool{}
		for _, r := range k.Resources {
			p := path.Clean(path.Join(dir, r))
			listed[p] = true
			fi, err := fs.Stat(fsys, p)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: resource %s: %w", o.Where(), r, err))
			case fi.IsDir():
				if _, err := fs.Stat(fsys, path.Join(p, "kustomization.yaml")); err != nil {
					errs = append(errs, fmt.Errorf("%s: resource %s is a directory without kustomization.yaml", o.Where(), r))
				}
			}
		}
		files, err := fs.Glob(fsys, path.Join(dir, "*.yaml"))
		if err != nil {
			return err
		}
		for _, f := range files {
			if path.Base(f) != "kustomization.yaml" && !listed[f] {
				errs = append(errs, fmt.Errorf("%s: %s is not in resources", o.Where(), f))
			}
		}
	}
	return errors.Join(errs...)
}

// podSecurity returns the PodSecurity level enforced on the workload's
// namespace: the namespace its kustomization sets, defined beside it.
func (m *Manifests) podSecurity(w Workload) (string, error) {
	dir := path.Dir(w.File)
	k := m.kustomization(dir)
	if k == nil || k.Namespace == "" {
		return "", fmt.Errorf("%s: no kustomization in %s setting its namespace", w.Where(), dir)
	}
	o := m.Find("Namespace", k.Namespace)
	if o == nil || path.Dir(o.File) != dir {
		return "", fmt.Errorf("%s: namespace %s is not defined in %s", w.Where(), k.Namespace, dir)
	}
	ns := o.Value.(*corev1.Namespace)
	level := ns.Labels["pod-security.kubernetes.io/enforce"]
	if level != "restricted" && level != "privileged" {
		return level, fmt.Errorf("%s: namespace %s enforces PodSecurity %q; want restricted (or privileged for gvisor mode)", w.Where(), ns.Name, level)
	}
	return level, nil
}

// checkReplicas: three NATS servers, each named in every server's routes;
// two control replicas, which reach the cluster through its Service or
// name every server.
func checkReplicas(m *Manifests) error {
	var errs []error
	nats, err := m.Workload("nats")
	if err != nil {
		return err
	}
	if nats.Replicas != 3 {
		errs = append(errs, fmt.Errorf("%s: %d replicas, want 3", nats.Where(), nats.Replicas))
	}
	if cm := m.Find("ConfigMap", "nats-config"); cm == nil {
		errs = append(errs, errors.New("deploy: no ConfigMap nats-config"))
	} else {
		conf := cm.Value.(*corev1.ConfigMap).Data["nats.conf"]
		for i := range nats.Replicas {
			if route := fmt.Sprintf("nats://nats-%d.nats-headless:6222", i); !strings.Contains(conf, route) {
				errs = append(errs, fmt.Errorf("%s: nats.conf has no route %s", cm.Where(), route))
			}
		}
	}
	control, err := m.Workload("control")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if control.Replicas != 2 {
		errs = append(errs, fmt.Errorf("%s: %d replicas, want 2", control.Where(), control.Replicas))
	}
	c, err := control.Container("control")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if got := FlagValue(c.Args, "--kv-replicas"); got != strconv.Itoa(int(nats.Replicas)) {
		errs = append(errs, fmt.Errorf("%s: --kv-replicas %q, want %d: the registry on every NATS server", control.Where(), got, nats.Replicas))
	}
	// Through the client Service, or naming every server.
	urls := strings.Split(FlagValue(c.Args, "--nats-url"), ",")
	if len(urls) != int(nats.Replicas) && (len(urls) != 1 || !strings.HasPrefix(urls[0], "tls://nats:4222")) {
		errs = append(errs, fmt.Errorf("%s: --nats-url %s: want the nats Service (tls://nats:4222) or all %d servers", control.Where(), strings.Join(urls, ","), nats.Replicas))
	}
	return errors.Join(errs...)
}

// checkRestricted is PodSecurity "restricted" and what we add to it: a
// read-only root, no device, no host namespace or path.
func checkRestricted(w Workload) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(w.Where()+": "+format, a...)) }
	ps := w.Pod.Spec
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		bad("shares a host namespace")
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			bad("volume %s is a hostPath", v.Name)
		}
	}
	for _, c := range slices.Concat(ps.InitContainers, ps.Containers) {
		sc := c.SecurityContext
		if sc == nil {
			bad("container %s has no securityContext", c.Name)
			continue
		}
		if !isTrue(sc.RunAsNonRoot, psc.RunAsNonRoot) {
			bad("container %s: runAsNonRoot is not true", c.Name)
		}
		if u := firstInt(sc.RunAsUser, psc.RunAsUser); u == nil || *u == 0 {
			bad("container %s: runAsUser is not a non-zero uid", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			bad("container %s is privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("container %s: allowPrivilegeEscalation is not false", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			bad("container %s: readOnlyRootFilesystem is not true", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			bad("container %s: capabilities are not drop [ALL], add none", c.Name)
		}
		sp := sc.SeccompProfile
		if sp == nil {
			sp = psc.SeccompProfile
		}
		if sp == nil || (sp.Type != corev1.SeccompProfileTypeRuntimeDefault && sp.Type != corev1.SeccompProfileTypeLocalhost) {
			bad("container %s: seccompProfile is not RuntimeDefault or Localhost", c.Name)
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			bad("container %s: procMount %s", c.Name, *sc.ProcMount)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				bad("container %s: hostPort %d", c.Name, p.HostPort)
			}
		}
		for r := range maps.Keys(c.Resources.Limits) {
			if r != corev1.ResourceCPU && r != corev1.ResourceMemory && r != corev1.ResourceEphemeralStorage {
				bad("container %s: asks for device %s", c.Name, r)
			}
		}
	}
	return errors.Join(errs...)
}

// checkGVisor: root with exactly GVisorCapabilities, not privileged, the
// TUN device from its plugin.
func checkGVisor(w Workload) error {
	var errs []error
	for _, c := range w.Pod.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil || sc.Capabilities == nil {
			errs = append(errs, fmt.Errorf("%s: container %s has no capabilities", w.Where(), c.Name))
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			errs = append(errs, fmt.Errorf("%s: container %s is privileged", w.Where(), c.Name))
		}
		add := slices.Sorted(slices.Values(sc.Capabilities.Add))
		if !slices.Equal(add, GVisorCapabilities) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			errs = append(errs, fmt.Errorf("%s: container %s: capabilities drop %v add %v, want drop [ALL] add %v",
				w.Where(), c.Name, sc.Capabilities.Drop, add, GVisorCapabilities))
		}
		if q, ok := c.Resources.Limits[TunResource]; !ok || q.Value() != 1 {
			errs = append(errs, fmt.Errorf("%s: container %s: no %s limit of 1 (/dev/net/tun)", w.Where(), c.Name, TunResource))
		}
	}
	return errors.Join(errs...)
}

// checkProbes: liveness and readiness everywhere, except in a pod the
// NoProbes annotation excuses, which then may serve nothing but UDP.
func checkProbes(w Workload) error {
	var errs []error
	_, excused := w.Pod.Annotations[NoProbes]
	for _, c := range w.Pod.Spec.Containers {
		if excused {
			for _, p := range c.Ports {
				if p.Protocol != corev1.ProtocolUDP {
					errs = append(errs, fmt.Errorf("%s: container %s: %s excuses probes but port %d is %s", w.Where(), c.Name, NoProbes, p.ContainerPort, p.Protocol))
				}
			}
			continue
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			errs = append(errs, fmt.Errorf("%s: container %s lacks a liveness or readiness probe", w.Where(), c.Name))
		}
	}
	return errors.Join(errs...)
}

// checkResources: requests and limits of CPU and memory everywhere.
func checkResources(w Workload) error {
	var errs []error
	for _, c := range w.Pod.Spec.Containers {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				errs = append(errs, fmt.Errorf("%s: container %s: no %s request", w.Where(), c.Name, r))
			}
			if _, ok := c.Resources.Limits[r]; !ok {
				errs = append(errs, fmt.Errorf("%s: container %s: no %s limit", w.Where(), c.Name, r))
			}
		}
	}
	return errors.Join(errs...)
}

// ListenFlags are lattice's flags that take an address to serve on.
var ListenFlags = []string{"--listen", "--listen-http", "--metrics-listen", "--nats-listen", "--socks5", "--http-proxy"}

// checkListen: a lattice container serves either on loopback (for the
// agent in its pod) or on 0.0.0.0 at a declared container port, and
// every declared port is one it serves.
func checkListen(w Workload) error {
	var errs []error
	for _, c := range w.Pod.Spec.Containers {
		if !LatticeImage(&c) {
			continue
		}
		served := map[int32]bool{}
		if p := FlagValue(c.Args, "--port"); p != "" {
			n, _ := strconv.ParseInt(p, 10, 32)
			served[int32(n)] = true
		}
		for _, f := range ListenFlags {
			v := FlagValue(c.Args, f)
			if v == "" {
				continue
			}
			ap, err := netip.ParseAddrPort(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: container %s: %s %q: %w", w.Where(), c.Name, f, v, err))
				continue
			}
			switch {
			case ap.Addr().IsLoopback():
			case ap.Addr() == netip.IPv4Unspecified():
				served[int32(ap.Port())] = true
				if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == int32(ap.Port()) }) {
					errs = append(errs, fmt.Errorf("%s: container %s: %s %s is not a declared port", w.Where(), c.Name, f, v))
				}
			default:
				errs = append(errs, fmt.Errorf("%s: container %s: %s %s: serve on 0.0.0.0 (the pod's addresses) or loopback", w.Where(), c.Name, f, v))
			}
		}
		for _, p := range c.Ports {
			if !served[p.ContainerPort] {
				errs = append(errs, fmt.Errorf("%s: container %s: port %d/%s is declared but nothing listens there", w.Where(), c.Name, p.ContainerPort, p.Protocol))
			}
		}
	}
	return errors.Join(errs...)
}

// checkSecrets: secret files are 0400, owned by the pod's user, which
// lattice requires of a secret (no group or other bits).
func checkSecrets(w Workload) error {
	var errs []error
	psc := w.Pod.Spec.SecurityContext
	for _, v := range w.Pod.Spec.Volumes {
		s := v.Secret
		if s == nil {
			continue
		}
		if s.DefaultMode == nil || *s.DefaultMode != 0o400 {
			errs = append(errs, fmt.Errorf("%s: secret volume %s: defaultMode is not 0400", w.Where(), v.Name))
		}
		var uid int64
		if psc != nil && psc.RunAsUser != nil {
			uid = *psc.RunAsUser
		}
		if got := ptrOr(s.DefaultUser, 0); got != uid {
			errs = append(errs, fmt.Errorf("%s: secret volume %s: defaultUser %d, want the pod's user %d", w.Where(), v.Name, got, uid))
		}
	}
	return errors.Join(errs...)
}

// checkServices: every Service selects a workload and each target port
// is a port of it with the same protocol.
func checkServices(m *Manifests) error {
	var errs []error
	for _, o := range m.Objects {
		svc, ok := o.Value.(*corev1.Service)
		if !ok {
			continue
		}
		var w *Workload
		for _, cand := range m.Workloads() {
			if path.Dir(cand.File) == path.Dir(o.File) && matches(svc.Spec.Selector, cand.Pod.Labels) {
				w = &cand
				break
			}
		}
		if w == nil {
			errs = append(errs, fmt.Errorf("%s: selects no workload", o.Where()))
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if !hasPort(w.Pod.Spec.Containers, sp) {
				errs = append(errs, fmt.Errorf("%s: port %s: %s has no %s port %s", o.Where(), sp.Name, w.Name, sp.Protocol, sp.TargetPort.String()))
			}
		}
	}
	return errors.Join(errs...)
}

func hasPort(cs []corev1.Container, sp corev1.ServicePort) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			proto := sp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if p.Protocol == proto && (p.Name == sp.TargetPort.StrVal || p.ContainerPort == sp.TargetPort.IntVal) {
				return true
			}
		}
	}
	return false
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// FlagValue returns the value of --name in args ("--name v" or
// "--name=v"), or "".
func FlagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func isTrue(ps ...*bool) bool {
	for _, p := range ps {
		if p != nil {
			return *p
		}
	}
	return false
}

func firstInt(ps ...*int64) *int64 {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
