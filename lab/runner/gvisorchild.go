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

// childFile is the DriverConfig as the child's file carries it: Logger
// and Network stay behind (they are the child's own), and Go values that a
// file cannot carry (node.ICEConfig.Candidates is not encoded) are refused.
type childFile struct{ sandbox.DriverConfig }

func newChildFile(cfg sandbox.DriverConfig) (childFile, error) {
	if cfg.ICE.Candidates != nil || cfg.ProxyCredentials != nil {
		return childFile{}, errors.New("a gvisor child takes no ICE.Candidates or ProxyCredentials (Go values, not data)")
	}
	cfg.Logger, cfg.Network = nil, nil
	return childFile{cfg}, nil
}

func (f childFile) config(log *slog.Logger) sandbox.DriverConfig {
	cfg := f.DriverConfig
	cfg.Logger = log
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
	data, err := os.ReadFile(cfgPath) //nolint:gosec // written by the parent lab, which re-executed this process
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
