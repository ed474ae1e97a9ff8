package runsc

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// Spec is what runs in a container.
type Spec struct {
	// ID names the container (letters, digits, '.', '_', '-').
	ID string
	// Args is the agent's command line. Args[0] is an absolute path on
	// the host; it is mounted read-only (at AgentDir/NAME unless it is in
	// one of the host's system directories, which are mounted anyway).
	Args []string
	// Env is the agent's environment. PATH is set if absent.
	Env []string
	// Cwd is the agent's working directory. If empty, "/".
	Cwd string
	// UID and GID the agent runs as. If zero, 65534 (nobody): an agent
	// never runs as root.
	UID, GID uint32
	// ReadOnly are more host paths mounted read-only at the same path
	// (not under /tmp, /proc, /dev or /sys, which the container has its own of).
	ReadOnly []string
	// NoFile bounds open files. If zero, 4096.
	NoFile uint64
	// NetNS, if set, is the path of the network namespace the agent
	// uses (e.g. /run/netns/pod). If empty, the namespace runsc runs in.
	NetNS string
	// Hosts, if not empty, is the container's /etc/hosts: localhost and
	// these entries, in order, and nothing of the host's /etc/hosts. The
	// file is written into the bundle when the container starts and
	// mounted read-only over the host's, so it is a snapshot: entries
	// that change while the agent runs are not seen. If empty, the agent
	// sees the host's /etc/hosts.
	Hosts []HostEntry

	// hostsMount mounts the hosts file even with no Hosts (a prepared
	// container's, which Start fills).
	hostsMount bool
}

// HostEntry is one line of the container's /etc/hosts: Names resolve to
// Addr. Addr must be valid and have no zone; each name is a hostname
// (letters, digits and '-' in dot-separated labels of up to 63
// characters).
type HostEntry struct {
	Addr  netip.Addr
	Names []string
}

// hostsFile is where the file for Spec.Hosts is written, in the bundle
// directory (beside rootfs, not in it: rootfs stays an empty skeleton).
const hostsFile = "hosts"

// localHosts starts every hosts file Spec.Hosts makes.
const localHosts = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

// hostnameRE is compiled at first use: its {0,61} repetitions make a
// large program (1 ms and 150 KB of heap at every start of every binary
// that links runsc, pod sandboxes and their inits included).
var hostnameRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)
})

// hostsContent renders Spec.Hosts as a hosts file, refusing an entry that
// would not parse as one line of it (a name with a space or '#' would
// split or end the line).
func hostsContent(entries []HostEntry) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(localHosts)
	for i, e := range entries {
		switch {
		case !e.Addr.IsValid():
			return nil, fmt.Errorf("runsc: hosts entry %d %q: invalid address", i, e.Names)
		case e.Addr.Zone() != "":
			return nil, fmt.Errorf("runsc: hosts entry %d (%v): address has a zone, which a hosts file cannot hold", i, e.Addr)
		case len(e.Names) == 0:
			return nil, fmt.Errorf("runsc: hosts entry %d (%v): no names", i, e.Addr)
		}
		for _, n := range e.Names {
			if len(n) > 253 || !hostnameRE().MatchString(n) {
				return nil, fmt.Errorf("runsc: hosts entry %d (%v): name %q: want a hostname (letters, digits and '-' in dot-separated labels; no spaces or '#')", i, e.Addr, n)
			}
		}
		fmt.Fprintf(&b, "%s\t%s\n", e.Addr, strings.Join(e.Names, " "))
	}
	return b.Bytes(), nil
}

// AgentDir is where an agent binary from outside the host's system
// directories appears in the container.
const AgentDir = "/lattice/agent"

// hostDirs are mounted read-only so that dynamically linked agents and
// their tools run; everything else of the host stays invisible.
var hostDirs = []string{"/bin", "/sbin", "/usr", "/lib", "/lib64", "/etc"}

type ociSpec struct {
	Version  string     `json:"ociVersion"`
	Process  ociProcess `json:"process"`
	Root     ociRoot    `json:"root"`
	Hostname string     `json:"hostname"`
	Mounts   []ociMount `json:"mounts"`
	Linux    ociLinux   `json:"linux"`
	Hooks    *ociHooks  `json:"hooks,omitempty"`
}

// ociHooks are the runtime's hooks; runsc runs createRuntime's after it
// has booted the sandbox and before the agent starts, and destroys the
// container if one fails.
type ociHooks struct {
	CreateRuntime []ociHook `json:"createRuntime,omitempty"`
}

type ociHook struct {
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
}

type ociProcess struct {
	User            ociUser         `json:"user"`
	Args            []string        `json:"args"`
	Env             []string        `json:"env"`
	Cwd             string          `json:"cwd"`
	Capabilities    ociCapabilities `json:"capabilities"`
	Rlimits         []ociRlimit     `json:"rlimits"`
	NoNewPrivileges bool            `json:"noNewPrivileges"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// ociCapabilities are all empty: the agent has no capability at all.
type ociCapabilities struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

type ociLinux struct {
	// Namespaces has no "network" entry unless Spec.NetNS names one: with
	// runsc --network=host the agent uses the namespace runsc was started
	// in, the pod's. (`runsc spec` adds an empty one, and the agent then
	// sees only lo.)
	Namespaces []ociNamespace `json:"namespaces"`
}

// oci builds the OCI config for the bundle directory bundle: it prepares
// bundle/rootfs (an empty directory) with the mount points and symlinks
// the mounts need, and writes bundle/hosts when s.Hosts asks for one.
func (s Spec) oci(bundle string) (*ociSpec, error) {
	if len(s.Args) == 0 || !filepath.IsAbs(s.Args[0]) {
		return nil, fmt.Errorf("runsc: agent %q: want an absolute path", firstOr(s.Args))
	}
	var hosts []byte
	if len(s.Hosts) > 0 || s.hostsMount {
		var err error
		if hosts, err = hostsContent(s.Hosts); err != nil {
			return nil, err
		}
	}
	rootfs := filepath.Join(bundle, "rootfs")
	fi, err := os.Stat(s.Args[0])
	switch {
	case err != nil:
		return nil, fmt.Errorf("runsc: agent binary: %w", err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return nil, fmt.Errorf("runsc: agent %s is not an executable file (mode %v)", s.Args[0], fi.Mode())
	}
	uid, gid := s.UID, s.GID
	if uid == 0 {
		uid = 65534
	}
	if gid == 0 {
		gid = 65534
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = "/"
	}
	nofile := s.NoFile
	if nofile == 0 {
		nofile = 4096
	}
	env := append([]string(nil), s.Env...)
	if !hasEnv(env, "PATH") {
		env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
	}
	none := []string{}
	spec := &ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			User: ociUser{UID: uid, GID: gid}, Args: s.Args, Env: env, Cwd: cwd,
			Capabilities:    ociCapabilities{Bounding: none, Effective: none, Inheritable: none, Permitted: none, Ambient: none},
			Rlimits:         []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
			NoNewPrivileges: true,
		},
		Root:     ociRoot{Path: rootfs, Readonly: true},
		Hostname: "lattice-agent",
		Mounts: []ociMount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		},
		Linux: ociLinux{Namespaces: []ociNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}}},
	}
	if s.NetNS != "" {
		spec.Linux.Namespaces = append(spec.Linux.Namespaces, ociNamespace{Type: "network", Path: s.NetNS})
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil { //nolint:gosec // mount points in the agent's root
			return nil, fmt.Errorf("runsc: rootfs: %w", err)
		}
	}
	binds := append(append([]string(nil), hostDirs...), s.ReadOnly...)
	if !underAny(s.Args[0], hostDirs, "") {
		// The agent is mounted at AgentDir/NAME, wherever it is on the host
		// (a /tmp path would be hidden by the container's own /tmp).
		dst := filepath.Join(AgentDir, filepath.Base(s.Args[0]))
		if err := mountPoint(filepath.Join(rootfs, dst), false); err != nil {
			return nil, err
		}
		spec.Mounts = append(spec.Mounts, ociMount{Destination: dst, Type: "bind", Source: s.Args[0], Options: []string{"bind", "ro", "nosuid", "nodev"}})
		spec.Process.Args = append([]string{dst}, s.Args[1:]...)
	}
	seen := map[string]bool{}
	for _, p := range binds {
		if seen[p] || underAny(p, hostDirs, p) {
			continue
		}
		seen[p] = true
		fi, err := os.Lstat(p)
		if err != nil {
			if os.IsNotExist(err) && contains(hostDirs, p) {
				continue // e.g. no /lib64 on this host
			}
			return nil, fmt.Errorf("runsc: read-only mount %s: %w", p, err)
		}
		dst := filepath.Join(rootfs, p)
		if fi.Mode()&os.ModeSymlink != 0 {
			// Mirror the host's merged-/usr symlinks (/bin -> usr/bin).
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("runsc: rootfs: %w", err)
			}
			if err := os.Symlink(target, dst); err != nil {
				return nil, fmt.Errorf("runsc: rootfs: %w", err)
			}
			continue
		}
		if err := mountPoint(dst, fi.IsDir()); err != nil {
			return nil, err
		}
		spec.Mounts = append(spec.Mounts, ociMount{Destination: p, Type: "bind", Source: p, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	if hosts != nil {
		// After the /etc bind: OCI mounts in order, so this one lies on top
		// of the host's /etc/hosts (whose file is the mount point).
		src := filepath.Join(bundle, hostsFile)
		if err := os.WriteFile(src, hosts, 0o644); err != nil { //nolint:gosec // the agent's /etc/hosts, read by its unprivileged user
			return nil, fmt.Errorf("runsc: hosts file: %w", err)
		}
		spec.Mounts = append(spec.Mounts, ociMount{Destination: "/etc/hosts", Type: "bind", Source: src, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	return spec, nil
}

// underAny reports whether p lies inside one of dirs (other than itself),
// so that mounting dirs already shows it.
func underAny(p string, dirs []string, self string) bool {
	for _, d := range dirs {
		if d != self && strings.HasPrefix(p, d+"/") {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				return true
			}
		}
	}
	return false
}

func mountPoint(dst string, dir bool) error {
	if dir {
		if err := os.MkdirAll(dst, 0o755); err != nil { //nolint:gosec // mount points in the agent's root
			return fmt.Errorf("runsc: rootfs: %w", err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { //nolint:gosec // mount points in the agent's root
		return fmt.Errorf("runsc: rootfs: %w", err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755) //nolint:gosec // a mount point for an executable
	if err != nil {
		return fmt.Errorf("runsc: rootfs: %w", err)
	}
	return f.Close()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasEnv(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

func firstOr(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}
