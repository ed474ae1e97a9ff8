package podinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/internal/pagetrim"
)

func init() {
	if len(os.Args) > 0 && os.Args[0] == Arg0 {
		os.Exit(podInit())
	}
}

// podInit is the init's main. It exits with the agent's exit code (128+N
// for signal N), 125 if it could not start the agent, or 0 if the sandbox
// closed the socket without sending one.
func podInit() int {
	sock := os.NewFile(FD, "sandbox")
	cfg, err := readInitConfig(sock)
	var link agentLink
	if err == nil {
		link, err = setupAgentNamespaces(cfg)
	}
	if err := sendInitReply(sock, link, err); err != nil {
		return 125
	}
	_ = link.file.Close()
	if cfg.Probe {
		return 0
	}
	// From here the init idles: a spare until the sandbox has an agent
	// for it, then the agent's PID 1, reaping. What its start mapped goes
	// back a moment in, off the way of an agent started at once; without
	// a collection, which would cost the collector's own memory, more
	// than the init's small heap gives back, and start the runtime's
	// forced collection every 2 minutes, which maps pages again.
	time.AfterFunc(releaseAfter, func() { _, _ = pagetrim.Unmap() })
	// Confined before the agent comes, off its start: package init runs
	// on the main thread, locked, and the thread stays locked (and the
	// one superviseAgent forks from) from here on.
	runtime.LockOSThread()
	_, lerr := restrictLandlock(append(append([]string(nil), cfg.Hide...), cfg.HideFiles...))
	start, err := readStart(sock)
	if errors.Is(err, io.EOF) {
		return 0 // a spare the sandbox let go
	}
	if err == nil {
		err = lerr
	}
	if err == nil {
		err = takeStart(start)
	}
	if err := sendInitReply(sock, agentLink{}, err); err != nil {
		return 125
	}
	_ = sock.Close()
	code, err := superviseAgent(start.Argv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "lattice sandbox: %v\n", err)
	}
	return code
}

// releaseAfter is how long an init waits before it gives back its
// start-up pages (internal/pagetrim).
const releaseAfter = time.Second

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

// readStart reads the agent's Start and puts the three files that come
// with it on the init's stdin, stdout and stderr, which the agent
// inherits. It returns io.EOF if the sandbox closed the socket.
func readStart(sock *os.File) (Start, error) {
	var st Start
	buf, oob := make([]byte, MaxStart), make([]byte, unix.CmsgSpace(3*4))
	n, oobn, flags, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return st, fmt.Errorf("reading the agent's start: %w", err)
	}
	if n == 0 && oobn == 0 {
		return st, io.EOF
	}
	var fds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return st, fmt.Errorf("reading the agent's start: over %d bytes of command line and environment, or more than 3 files", len(buf))
	}
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		return st, fmt.Errorf("reading the agent's start: %w", err)
	}
	if len(fds) != 3 {
		return st, fmt.Errorf("reading the agent's start: %d files for its stdio, want 3", len(fds))
	}
	for i, fd := range fds {
		if err := unix.Dup3(fd, i, 0); err != nil {
			return st, fmt.Errorf("the agent's stdio: %w", err)
		}
	}
	return st, nil
}

// takeStart makes the agent's environment and working directory the
// init's own, for superviseAgent.
func takeStart(st Start) error {
	if len(st.Argv) == 0 {
		return errors.New("no command")
	}
	os.Clearenv()
	for _, kv := range st.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			if err := os.Setenv(k, v); err != nil {
				return fmt.Errorf("the agent's environment: %w", err)
			}
		}
	}
	if st.Dir != "" {
		if err := os.Chdir(st.Dir); err != nil {
			return fmt.Errorf("the agent's working directory: %w", err)
		}
	}
	return nil
}

// sendInitReply answers the sandbox: the link made (its file passed
// along) or why not. It returns setupErr, or why the answer could not be
// sent.
func sendInitReply(sock *os.File, link agentLink, setupErr error) error {
	rep := Reply{Kind: link.kind, Header: link.header, VnetHdr: link.vnet}
	if link.file != nil {
		rep.Landlock = LandlockABI()
	}
	var oob []byte
	if setupErr != nil {
		rep.Error = setupErr.Error()
	} else if link.file != nil {
		oob = unix.UnixRights(int(link.file.Fd()))
	}
	b, _ := json.Marshal(rep)
	if err := unix.Sendmsg(int(sock.Fd()), b, oob, nil, 0); err != nil {
		return err
	}
	return setupErr
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
// symbolic link there to what it links to). The file bound lives in a tmpfs
// of its own that no directory holds: the mount over /etc/resolv.conf keeps
// it for as long as the namespace lives, and a SIGKILL at any moment leaves
// nothing behind. Where the kernel or a seccomp profile refuses the mount
// API that makes such a tmpfs (fsopen, Linux 5.2), the file is a temporary
// one, unlinked once bound.
func bindResolvConf(content string) error {
	const target = "/etc/resolv.conf"
	if _, err := os.Stat(target); err != nil {
		return fmt.Errorf("resolv.conf: %w (the agent's name server cannot be set)", err)
	}
	err := bindResolvConfDetached(target, content)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		err = bindResolvConfFile(target, content)
	}
	return err
}

// bindResolvConfDetached writes content to a file in a new tmpfs mount
// attached nowhere, and moves a mount of that file over target.
func bindResolvConfDetached(target, content string) error {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("resolv.conf: making a tmpfs for it: %w", err)
	}
	defer unix.Close(fs)
	if err := unix.FsconfigSetString(fs, "size", "16k"); err != nil {
		return fmt.Errorf("resolv.conf: sizing its tmpfs: %w", err)
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return fmt.Errorf("resolv.conf: making a tmpfs for it: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return fmt.Errorf("resolv.conf: mounting its tmpfs: %w", err)
	}
	defer unix.Close(mnt)
	fd, err := unix.Openat(mnt, "resolv.conf", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	f := os.NewFile(uintptr(fd), "resolv.conf")
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	tree, err := unix.OpenTree(mnt, "resolv.conf", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
		return fmt.Errorf("resolv.conf: binding over %s: %w", target, err)
	}
	return nil
}

// bindResolvConfFile binds a temporary file over target and unlinks it.
// A SIGKILL between its creation and its unlinking leaves it behind.
func bindResolvConfFile(target, content string) error {
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
// mount (podInit's restrictLandlock, whose thread must be the caller's).
// Init forwards signals and, as PID 1, reaps every orphan until the agent
// exits.
func superviseAgent(argv []string) (int, error) {
	if len(argv) == 0 {
		return 125, errors.New("no command")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, fmt.Errorf("agent %q: %w", argv[0], err)
	}
	// The agent inherits the Landlock domain of the thread that forks it;
	// this goroutine keeps the thread (and the thread Pdeathsig watches)
	// until init exits.
	runtime.LockOSThread()
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
