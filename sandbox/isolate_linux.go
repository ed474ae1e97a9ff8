package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// probeIsolation starts an init that only makes its namespaces and TUN
// device, so that Start refuses where the agent could not be isolated.
func (d *PodDriver) probeIsolation(ctx context.Context) error {
	p, err := d.spawnInit()
	if err != nil {
		return err
	}
	tun, rep, herr := p.handshake(ctx, podinit.Config{Probe: true, Addr: [4]byte{100, 64, 0, 1}, Bits: 10, MTU: netstack.GatewayMTU})
	if tun != nil {
		tun.Close()
	}
	if herr != nil {
		p.close()
	} else if err := p.wait(ctx); err != nil {
		herr = fmt.Errorf("sandbox: agent init probe: %w", err)
	}
	p.conn.Close()
	if herr != nil {
		return fmt.Errorf("%w (or pass --isolation proxy)", herr)
	}
	// Landlock 0: the agents will be kept from the state dir by the
	// mounts alone.
	d.log.Info("namespace isolation available", "link", rep.Kind, "landlock", rep.Landlock)
	return nil
}

// runIsolated is Run in namespace isolation: the agent goes to the spare
// init if there is one (see spare_linux.go), else to one started now.
func (d *PodDriver) runIsolated(ctx context.Context, argv []string, stdio Stdio) (int, error) {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return -1, fmt.Errorf("sandbox: run: %w", err)
	}
	addr := d.Node().Address()
	if !addr.Addr().Is4() {
		return -1, fmt.Errorf("sandbox: run: agent address %v: the agent's link is IPv4 only", addr)
	}
	dir, err := os.Getwd()
	if err != nil {
		return -1, fmt.Errorf("sandbox: run: the agent's working directory: %w", err)
	}
	st := podinit.Start{Argv: argv, Env: append(os.Environ(), d.identityEnv()...), Dir: dir}
	sio, err := openAgentStdio(stdio)
	if err != nil {
		return -1, fmt.Errorf("sandbox: run: the agent's stdio: %w", err)
	}
	defer sio.close()
	p, err := d.takeInit(ctx, addr)
	if err != nil {
		return -1, err
	}
	start := func(p *agentInit) error {
		if err := d.record(audit.Event{Kind: "agent", Detail: fmt.Sprintf("run %v in namespaces (pid %d)", argv, p.cmd.Process.Pid)}); err != nil {
			return err
		}
		return p.start(st, sio.files)
	}
	err = start(p)
	if errors.Is(err, errInitGone) {
		// The agent never ran: give it to an init started now.
		d.log.Warn("agent init: gone before it took the agent; starting another", "reason", err)
		p.close()
		if p, err = d.coldInit(ctx, addr); err == nil {
			err = start(p)
		}
	}
	if err != nil {
		if p != nil {
			p.close()
		}
		return -1, err
	}
	defer p.close()
	sio.sent()
	link := p.link
	if len(p.cfg.Hide)+len(p.cfg.HideFiles) == 0 {
		link.Landlock = 0 // nothing to deny
	}
	d.log.Info("running agent", "argv", argv, "isolation", IsolationNamespace, "link", link.Kind, "landlock", link.Landlock, "pid", p.cmd.Process.Pid)
	err = p.wait(ctx)
	sio.finish(termGrace)
	code, ok := runsc.ExitStatus(err)
	if !ok {
		return -1, fmt.Errorf("sandbox: run %s: %w", argv[0], err)
	}
	gs := p.gw.Stats()
	d.log.Info("agent exited", "code", code, "tcp", gs.TCP, "udp", gs.UDP, "refused", gs.Refused, "direct", gs.Direct, "pings", gs.Pings, "dropped", gs.Dropped)
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
