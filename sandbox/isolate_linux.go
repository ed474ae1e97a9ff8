package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/runsc"
	"github.com/latticelab/lattice/sandbox/podinit"
)

// initTimeout bounds how long the agent's init may take to set its
// namespaces up.
const initTimeout = 10 * time.Second

// agentNamespaces are the namespaces the agent's init is cloned into. The
// user namespace comes first in the kernel's order, so the others are
// owned by it and need no privilege outside.
const agentNamespaces = unix.CLONE_NEWUSER | unix.CLONE_NEWNET | unix.CLONE_NEWNS | unix.CLONE_NEWPID

// hideFromAgent makes the sandbox process itself untouchable from the
// agent even through paths that skip the mount namespace (/proc/PID/root,
// /proc/PID/fd): a process that is not dumpable can be ptraced or
// inspected only with CAP_SYS_PTRACE in its own user namespace, which the
// agent never has.
func hideFromAgent() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: PR_SET_DUMPABLE: %w", err)
	}
	return nil
}

// startInit starts the sandbox's binary as the agent's init with argv as
// the agent, and returns the command and the sandbox's end of the
// socketpair. The calling goroutine's thread must stay locked until Wait:
// Pdeathsig is tied to the thread that started the child.
func (d *PodDriver) startInit(ctx context.Context, argv, env []string, stdio Stdio) (*exec.Cmd, *net.UnixConn, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: finding the lattice binary for the agent's init: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "init"), os.NewFile(uintptr(fds[1]), "init")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Args = append([]string{podinit.Arg0}, argv...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdio.Stdin, stdio.Stdout, stdio.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // podinit.FD
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  agentNamespaces,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = termGrace
	// The maps are written through /proc/CHILD, which belongs to root
	// while the child (a copy of this process) is not dumpable.
	d.spawnMu.Lock()
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	err = cmd.Start()
	herr := hideFromAgent()
	d.spawnMu.Unlock()
	if err != nil {
		conn.Close()
		return nil, nil, namespacesUnavailable(err, readSysctl)
	}
	if herr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		conn.Close()
		return nil, nil, herr
	}
	return cmd, conn.(*net.UnixConn), nil
}

// handshake sends the init its config and returns the agent's link it
// made: the file and the header of its packets.
func handshake(conn *net.UnixConn, cfg podinit.Config) (*os.File, podinit.Reply, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, podinit.Reply{}, err
	}
	_ = conn.SetDeadline(time.Now().Add(initTimeout))
	if _, err := conn.Write(b); err != nil {
		return nil, podinit.Reply{}, fmt.Errorf("sandbox: agent init: %w", err)
	}
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return nil, podinit.Reply{}, fmt.Errorf("sandbox: agent init exited before it answered (%v)", err)
	}
	var rep podinit.Reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		return nil, podinit.Reply{}, fmt.Errorf("sandbox: agent init: %w", err)
	}
	var tun *os.File
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if fds, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			_ = unix.SetNonblock(fds[0], true)
			tun = os.NewFile(uintptr(fds[0]), "/dev/net/tun")
		}
	}
	if rep.Error != "" {
		if tun != nil {
			tun.Close()
		}
		return nil, rep, fmt.Errorf("sandbox: agent namespaces: %s", rep.Error)
	}
	if tun == nil {
		return nil, rep, errors.New("sandbox: agent init sent no link to the agent")
	}
	return tun, rep, nil
}

// probeIsolation starts an init that only makes its namespaces and TUN
// device, so that Start refuses where the agent could not be isolated.
func (d *PodDriver) probeIsolation(ctx context.Context) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd, conn, err := d.startInit(ctx, nil, []string{}, Stdio{})
	if err != nil {
		return err
	}
	defer conn.Close()
	tun, rep, herr := handshake(conn, podinit.Config{Probe: true, Addr: [4]byte{100, 64, 0, 1}, Bits: 10, MTU: netstack.GatewayMTU})
	if tun != nil {
		tun.Close()
	}
	if err := cmd.Wait(); herr == nil && err != nil {
		herr = fmt.Errorf("sandbox: agent init probe: %w", err)
	}
	if herr != nil {
		return fmt.Errorf("%w (or pass --isolation proxy)", herr)
	}
	// Landlock 0: the agents will be kept from the state dir by the
	// mounts alone.
	d.log.Info("namespace isolation available", "link", rep.Kind, "landlock", rep.Landlock)
	return nil
}

// runIsolated is Run in namespace isolation.
func (d *PodDriver) runIsolated(ctx context.Context, argv []string, stdio Stdio) (int, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return -1, fmt.Errorf("sandbox: run: %w", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	addr := d.Node().Address()
	if !addr.Addr().Is4() {
		return -1, fmt.Errorf("sandbox: run: agent address %v: the agent's link is IPv4 only", addr)
	}
	env := append(os.Environ(), d.identityEnv()...)
	cmd, conn, err := d.startInit(ctx, argv, env, stdio)
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	icfg := d.initConfig(addr)
	tun, link, err := handshake(conn, icfg)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return -1, err
	}
	gw, err := netstack.NewGateway(netstack.GatewayConfig{
		Device: tun, LinkHeader: link.Header, Agent: addr.Addr(), Dial: d.agentDial, Ping: d.agentPing, Logger: d.cfg.Logger,
	})
	if err != nil {
		tun.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return -1, err
	}
	defer gw.Close()
	if err := d.record(audit.Event{Kind: "agent", Detail: fmt.Sprintf("run %v in namespaces (pid %d)", argv, cmd.Process.Pid)}); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return -1, err
	}
	if len(icfg.Hide)+len(icfg.HideFiles) == 0 {
		link.Landlock = 0 // nothing to deny
	}
	d.log.Info("running agent", "argv", argv, "isolation", IsolationNamespace, "link", link.Kind, "landlock", link.Landlock, "pid", cmd.Process.Pid)
	err = cmd.Wait()
	code, ok := runsc.ExitStatus(err)
	if !ok {
		return -1, fmt.Errorf("sandbox: run %s: %w", argv[0], err)
	}
	st := gw.Stats()
	d.log.Info("agent exited", "code", code, "tcp", st.TCP, "udp", st.UDP, "refused", st.Refused, "pings", st.Pings, "dropped", st.Dropped)
	_ = d.record(audit.Event{Kind: "agent", Detail: fmt.Sprintf("exited with %d", code)})
	return code, nil
}

// initConfig is what the agent's init is told: the address, and what to
// hide.
func (d *PodDriver) initConfig(addr netip.Prefix) podinit.Config {
	cfg := podinit.Config{
		Addr: addr.Addr().As4(), Bits: addr.Bits(), MTU: netstack.GatewayMTU,
		ResolvConf: fmt.Sprintf("# lattice sandbox %s: peers by name\nnameserver %s\noptions ndots:0 attempts:2 timeout:2\n", d.cfg.Name, AgentDNS),
	}
	if d.cfg.StateDir != "mem:" {
		if dir, err := filepath.Abs(d.cfg.StateDir); err == nil {
			if real, err := filepath.EvalSymlinks(dir); err == nil {
				dir = real
			}
			cfg.Hide = append(cfg.Hide, dir)
		}
	}
	if a := d.cfg.AuditLog; a != "" {
		if abs, err := filepath.Abs(a); err == nil && !under(abs, cfg.Hide) {
			cfg.HideFiles = append(cfg.HideFiles, abs, audit.CheckpointPath(abs))
		}
	}
	return cfg
}

func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
