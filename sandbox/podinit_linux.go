package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// podInitArg0 is argv[0] of the sandbox's binary re-executed as the
// agent's init: PID 1 of the agent's PID namespace, root of its user
// namespace, which sets the namespaces up, passes the TUN device back and
// runs the agent. Any binary that links this package can serve as init,
// the lattice command and tests alike, so the check is in init().
const podInitArg0 = "lattice-pod-init"

// initFD is the init's end of the socketpair to the sandbox.
const initFD = 3

// initConfig is what the sandbox tells its init.
type initConfig struct {
	// Probe: make the link and the mounts, answer and exit, to show
	// that namespace isolation works here (a masked /proc, as container
	// runtimes leave it, refuses the PID namespace's /proc).
	Probe bool `json:"probe,omitempty"`
	// Address is the agent's (the node's) overlay address and prefix.
	Address string `json:"address"`
	MTU     int    `json:"mtu"`
	// Hide are directories covered with an empty read-only tmpfs (the
	// state dir); HideFiles files covered with /dev/null (an audit log
	// kept elsewhere).
	Hide      []string `json:"hide,omitempty"`
	HideFiles []string `json:"hide_files,omitempty"`
	// ResolvConf is bound over /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf"`
}

// initReply is the init's answer; the TUN device travels with it.
type initReply struct {
	Error string `json:"error,omitempty"`
	// Kind is the agent's interface, "tun" or "veth"; Header the link
	// header of its packets as the sandbox reads and writes them.
	Kind   string `json:"kind,omitempty"`
	Header []byte `json:"header,omitempty"`
	// Landlock is the kernel's Landlock ABI the agent will be confined
	// with (landlock_linux.go), 0 for none.
	Landlock int `json:"landlock,omitempty"`
}

func init() {
	if len(os.Args) > 0 && os.Args[0] == podInitArg0 {
		os.Exit(podInit(os.Args[1:]))
	}
}

// podInit is the init's main; argv is the agent's command line. It exits
// with the agent's exit code (128+N for signal N), or 125 if it could not
// start the agent.
func podInit(argv []string) int {
	sock := os.NewFile(initFD, "sandbox")
	cfg, err := readInitConfig(sock)
	var link agentLink
	if err == nil {
		link, err = setupAgentNamespaces(cfg)
	}
	if err := sendInitReply(sock, link, err); err != nil {
		return 125
	}
	if cfg.Probe {
		return 0
	}
	_ = link.file.Close()
	_ = sock.Close()
	code, err := superviseAgent(argv, append(append([]string(nil), cfg.Hide...), cfg.HideFiles...))
	if err != nil {
		fmt.Fprintf(os.Stderr, "lattice sandbox: %v\n", err)
	}
	return code
}

func readInitConfig(sock *os.File) (initConfig, error) {
	var cfg initConfig
	buf := make([]byte, 64<<10)
	n, err := sock.Read(buf)
	if err != nil {
		return cfg, fmt.Errorf("reading the config: %w", err)
	}
	if err := json.Unmarshal(buf[:n], &cfg); err != nil {
		return cfg, fmt.Errorf("reading the config: %w", err)
	}
	return cfg, nil
}

func sendInitReply(sock *os.File, link agentLink, setupErr error) error {
	rep := initReply{Kind: link.kind, Header: link.header, Landlock: landlockABI()}
	var oob []byte
	if setupErr != nil {
		rep.Error = setupErr.Error()
	} else {
		oob = unix.UnixRights(int(link.file.Fd()))
	}
	b, _ := json.Marshal(rep)
	if err := unix.Sendmsg(int(sock.Fd()), b, oob, nil, 0); err != nil {
		return err
	}
	if setupErr != nil {
		return setupErr
	}
	return nil
}

// setupAgentNamespaces configures the namespaces init was born in: the TUN
// device and its routes, the mounts that hide the sandbox, a /proc for the
// PID namespace.
func setupAgentNamespaces(cfg initConfig) (agentLink, error) {
	link, err := setupAgentNetwork(cfg)
	if err != nil {
		return link, err
	}
	if err := setupAgentMounts(cfg); err != nil {
		_ = link.file.Close()
		return agentLink{}, err
	}
	return link, nil
}

func setupAgentMounts(cfg initConfig) error {
	// Nothing mounted here propagates back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := bindResolvConf(cfg.ResolvConf); err != nil {
		return err
	}
	for _, f := range cfg.HideFiles {
		if _, err := os.Lstat(f); err != nil {
			continue
		}
		if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("hiding %s: %w", f, err)
		}
	}
	for _, d := range cfg.Hide {
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555"); err != nil {
			return fmt.Errorf("hiding %s: %w", d, err)
		}
	}
	// A /proc of the agent's PID namespace: the sandbox's processes are
	// not in it. The agent's nested user namespace needs it too (its
	// uid_map is written through /proc).
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc for the agent's PID namespace: %w (a container runtime that masks parts of /proc refuses it: Docker's --security-opt systempaths=unconfined, Kubernetes' procMount: Unmasked)", err)
	}
	return nil
}

// bindResolvConf puts content over /etc/resolv.conf (or what it links
// to). The file bound is unlinked at once; the mount keeps it alive for as
// long as the namespace lives, and nothing is left behind.
func bindResolvConf(content string) error {
	target, err := filepath.EvalSymlinks("/etc/resolv.conf")
	if err != nil {
		return fmt.Errorf("resolv.conf: %w (the agent's name server cannot be set)", err)
	}
	f, err := os.CreateTemp("", "lattice-resolv-*.conf")
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.WriteString(content); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := unix.Mount(f.Name(), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("resolv.conf: binding over %s: %w", target, err)
	}
	return nil
}

// superviseAgent runs argv in a user and mount namespace nested in init's:
// root there, it has no capability over the network namespace (it cannot
// reconfigure the device or open raw sockets), and the mounts init made
// are locked, so it cannot unmount what hides the sandbox; and where the
// kernel has Landlock, it is denied the hidden paths themselves and every
// mount (restrictLandlock). Init forwards signals and, as PID 1, reaps
// every orphan until the agent exits.
func superviseAgent(argv, deny []string) (int, error) {
	if len(argv) == 0 {
		return 125, errors.New("no command")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, fmt.Errorf("agent %q: %w", argv[0], err)
	}
	// The agent inherits the domain of the thread that forks it; this
	// goroutine keeps the thread (and the thread Pdeathsig watches) until
	// init exits.
	runtime.LockOSThread()
	if _, err := restrictLandlock(deny); err != nil {
		return 125, err
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			Pdeathsig:   unix.SIGKILL,
		},
	})
	if err != nil {
		return 126, fmt.Errorf("agent %q: %w", argv[0], err)
	}
	go func() {
		for s := range sigs {
			_ = p.Signal(s)
		}
	}()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 125, fmt.Errorf("waiting for the agent: %w", err)
		}
		if pid != p.Pid {
			continue // an orphan, reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	}
}
