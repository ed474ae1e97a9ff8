package podinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0 {
		os.Exit(podInit(os.Args[1:]))
	}
}

// podInit is the init's main; argv is the agent's command line. It exits
// with the agent's exit code (128+N for signal N), or 125 if it could not
// start the agent.
func podInit(argv []string) int {
	sock := os.NewFile(FD, "sandbox")
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

func readInitConfig(sock *os.File) (Config, error) {
	var cfg Config
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
	rep := Reply{Kind: link.kind, Header: link.header, Landlock: LandlockABI()}
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
func setupAgentNamespaces(cfg Config) (agentLink, error) {
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

func setupAgentMounts(cfg Config) error {
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

// bindResolvConf puts content over /etc/resolv.conf (mount(2) follows a
// symbolic link there to what it links to). The file bound is unlinked at
// once; the mount keeps it alive for as long as the namespace lives, and
// nothing is left behind.
func bindResolvConf(content string) error {
	const target = "/etc/resolv.conf"
	if _, err := os.Stat(target); err != nil {
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
