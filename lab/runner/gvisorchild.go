package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/latticelab/lattice/node"
	"github.com/latticelab/lattice/sandbox"
)

// A gvisor sandbox runs as it would in a pod: in a process of its own
// inside its network namespace, which is a kernel host of the fabric.
// The lab re-executes its own binary there (nsenter --net=NAMESPACE, with
// childEnv naming a 0600 file of the sandbox's DriverConfig); that child
// is the product's sandbox daemon (sandbox.StartDaemon: phase 1, then the
// control socket in the state directory), and the lab asks it for status
// and runs agents in runsc (POST /run) with sandbox.Client. The child
// stops when its stdin closes, so it never outlives the lab.
//
// The child is whatever program runs the lab: its main (or TestMain)
// calls MaybeRunChild first. The child is started with childFlag, which a
// program that does not is bound to refuse as an unknown flag, rather than
// running as itself in the namespace.
const (
	childEnv  = "LATTICE_LAB_GVISOR_CHILD"
	childFlag = "-lattice-lab-gvisor-child"
)

// MaybeRunChild makes this process a gvisor sandbox's child, and exits
// when the child is done, if the lab started it as one; otherwise it
// returns at once. The lab runs a gvisor sandbox by re-executing its own
// binary, so every program that runs scenarios with gvisor sandboxes
// (lattice-lab, test binaries) calls it first in main or TestMain.
func MaybeRunChild() {
	path := os.Getenv(childEnv)
	if path == "" || len(os.Args) < 2 || os.Args[1] != childFlag {
		return
	}
	os.Exit(childMain(path, len(os.Args) > 2 && os.Args[2] == "debug"))
}

// childFile is the DriverConfig as the child's file carries it. The
// fields that are Go values stay behind: Logger and Network are the
// child's own, and ICE, whose Candidates is a func, travels as its data.
type childFile struct {
	sandbox.DriverConfig
	ICE struct {
		STUN                                          []string
		DeadAfter, RetryMin, RetryMax, AttemptTimeout time.Duration
		RelayOnly                                     bool
	}
}

func newChildFile(cfg sandbox.DriverConfig) (childFile, error) {
	if cfg.ICE.Candidates != nil || cfg.ProxyCredentials != nil {
		return childFile{}, errors.New("a gvisor child takes no ICE.Candidates or ProxyCredentials (Go values, not data)")
	}
	f := childFile{DriverConfig: cfg}
	f.Logger, f.Network = nil, nil
	i := cfg.ICE
	f.ICE.STUN, f.ICE.DeadAfter, f.ICE.RetryMin, f.ICE.RetryMax = i.STUN, i.DeadAfter, i.RetryMin, i.RetryMax
	f.ICE.AttemptTimeout, f.ICE.RelayOnly = i.AttemptTimeout, i.RelayOnly
	return f, nil
}

func (f childFile) config(log *slog.Logger) sandbox.DriverConfig {
	cfg := f.DriverConfig
	cfg.Logger = log
	cfg.ICE = node.ICEConfig{STUN: f.ICE.STUN, DeadAfter: f.ICE.DeadAfter, RetryMin: f.ICE.RetryMin,
		RetryMax: f.ICE.RetryMax, AttemptTimeout: f.ICE.AttemptTimeout, RelayOnly: f.ICE.RelayOnly}
	return cfg
}

// childMain is the child: the sandbox daemon in this process's namespace
// until its stdin closes. It returns the exit code.
func childMain(cfgPath string, debug bool) int {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		log.Error("gvisor sandbox: read its config", "err", err)
		return 2
	}
	var f childFile
	if err := json.Unmarshal(data, &f); err != nil {
		log.Error("gvisor sandbox: config", "file", cfgPath, "err", err)
		return 2
	}
	if err := runChild(f.config(log)); err != nil {
		log.Error("gvisor sandbox failed", "err", err)
		return 1
	}
	return 0
}

func runChild(cfg sandbox.DriverConfig) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The lab closing our stdin (or dying) is the signal to stop; so are
	// SIGINT and SIGTERM.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dm, err := sandbox.StartDaemon(ctx, sandbox.ModeGVisor, cfg)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	return dm.Close()
}
