package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/latticelab/lattice/netstack"
	"github.com/latticelab/lattice/sandbox/podinit"
)

// errInitGone is an init that exited (or was killed) before it took its
// agent.
var errInitGone = errors.New("the init exited before it took the agent")

// agentInit is one agent's init: PID 1 of namespaces of its own. A
// goroutine of its own starts it and waits for it, locked to its OS
// thread all along, since Pdeathsig kills the init when the thread that
// forked it exits, not the process.
type agentInit struct {
	cmd  *exec.Cmd
	conn *net.UnixConn // the sandbox's end of the init's podinit.FD

	// Set by prepare.
	cfg  podinit.Config // what its namespaces were made for
	link podinit.Reply
	gw   *netstack.Gateway

	done chan struct{} // closed when the init has exited and been reaped
	err  error         // cmd.Wait's, once done is closed
}

// spawnInit starts the sandbox's binary as an agent's init. Nothing of
// the agent goes with it: the init waits on its socket for a Config, then
// for a Start.
func (d *PodDriver) spawnInit() (*agentInit, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("sandbox: finding the lattice binary for the agent's init: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "init"), os.NewFile(uintptr(fds[1]), "init")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{podinit.Arg0}
	cmd.ExtraFiles = []*os.File{theirs} // podinit.FD
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  agentNamespaces,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	p := &agentInit{cmd: cmd, conn: conn.(*net.UnixConn), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(p.done)
		runtime.LockOSThread()
		// Unlocked only once the init is reaped: the thread may then
		// serve other goroutines (or exit) without killing it.
		defer runtime.UnlockOSThread()
		// The maps are written through /proc/CHILD, which belongs to
		// root while the child (a copy of this process) is not dumpable.
		d.spawnMu.Lock()
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
		err := cmd.Start()
		herr := hideFromAgent()
		d.spawnMu.Unlock()
		if err != nil {
			p.err = err
			started <- namespacesUnavailable(err, readSysctl)
			return
		}
		if herr != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			p.err = herr
			started <- herr
			return
		}
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		conn.Close()
		return nil, err
	}
	return p, nil
}

// prepare has the init make its namespaces and link for cfg, and brings
// the agent's gateway up on the link. On error the init is stopped.
func (p *agentInit) prepare(ctx context.Context, cfg podinit.Config, gcfg netstack.GatewayConfig) error {
	tun, link, err := p.handshake(ctx, cfg)
	if err != nil {
		p.close()
		return err
	}
	gcfg.Device, gcfg.LinkHeader, gcfg.VnetHdr = tun, link.Header, link.VnetHdr
	gw, err := netstack.NewGateway(gcfg)
	if err != nil {
		tun.Close()
		p.close()
		return err
	}
	p.cfg, p.link, p.gw = cfg, link, gw
	return nil
}

// handshake sends the init its config and returns the agent's link it
// made: the file and the header of its packets.
func (p *agentInit) handshake(ctx context.Context, cfg podinit.Config) (*os.File, podinit.Reply, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, podinit.Reply{}, err
	}
	_ = p.conn.SetDeadline(time.Now().Add(initTimeout))
	defer func() { _ = p.conn.SetDeadline(time.Time{}) }()
	stop := context.AfterFunc(ctx, func() { _ = p.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := p.conn.Write(b); err != nil {
		return nil, podinit.Reply{}, fmt.Errorf("sandbox: agent init: %w", err)
	}
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := p.conn.ReadMsgUnix(buf, oob)
	if err != nil || n == 0 {
		return nil, podinit.Reply{}, fmt.Errorf("sandbox: agent init exited before it answered (%w)", err)
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

// start hands the init its agent: the command line, environment and
// working directory, and the agent's stdio. It returns errInitGone
// (wrapped) if the init had exited before it took them, so that the
// agent never ran and can be given to another init.
func (p *agentInit) start(st podinit.Start, stdio [3]*os.File) error {
	select {
	case <-p.done:
		return fmt.Errorf("%w (%w)", errInitGone, p.err)
	default:
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("sandbox: agent start: %w", err)
	}
	fds := make([]int, len(stdio))
	for i, f := range stdio {
		fds[i] = int(f.Fd()) // Fd leaves the file blocking, as the agent expects
	}
	_ = p.conn.SetDeadline(time.Now().Add(initTimeout))
	defer func() { _ = p.conn.SetDeadline(time.Time{}) }()
	tooBig := func(err error) error {
		return fmt.Errorf("sandbox: agent start: %d bytes of command line and environment is more than a message to the init can hold (%d): %w", len(b), podinit.MaxStart, err)
	}
	if len(b) > podinit.MaxStart {
		return tooBig(unix.EMSGSIZE)
	}
	_, _, err = p.conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	if errors.Is(err, unix.EMSGSIZE) {
		return tooBig(err)
	}
	if err != nil {
		return fmt.Errorf("%w (sending it: %w)", errInitGone, err)
	}
	buf := make([]byte, 4096)
	n, err := p.conn.Read(buf)
	if err != nil || n == 0 {
		return fmt.Errorf("%w (%w)", errInitGone, err)
	}
	var rep podinit.Reply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		return fmt.Errorf("sandbox: agent start: %w", err)
	}
	if rep.Error != "" {
		return fmt.Errorf("sandbox: agent start: %s", rep.Error)
	}
	return nil
}

// wait waits for the init to exit; when ctx ends first the init (and
// through it the agent) gets SIGTERM, then SIGKILL after termGrace.
func (p *agentInit) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(termGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.err
}

// close stops the init (its PID namespace, with whatever ran in it, goes
// with it), closes its gateway and waits until it is reaped.
func (p *agentInit) close() {
	_ = p.cmd.Process.Kill()
	<-p.done
	p.conn.Close()
	if p.gw != nil {
		p.gw.Close()
	}
}
