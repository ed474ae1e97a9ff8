package sandbox

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/latticelab/lattice/audit"
	"github.com/latticelab/lattice/node"
)

// base is what every driver has: its config, the state directory with the
// identity and the audit log, and the node once phase 1 is up.
type base struct {
	cfg     DriverConfig
	log     *slog.Logger
	audit   audit.Sink
	auditF  *audit.FileWriter // the file behind audit, nil without one
	started time.Time

	auditFailures atomic.Uint64
	egressN       audit.Decisions // metrics.go

	nodeMu sync.Mutex // guards node
	node   *node.Node
}

func newBase(cfg DriverConfig, mode Mode) base {
	return base{cfg: cfg, log: cfg.Logger.With("component", "sandbox", "mode", string(mode)), audit: audit.Discard}
}

// openState makes the state directory, refuses a stored identity that
// cannot be used (before anything else is touched) and opens the audit
// log. It returns the identity's store.
func (b *base) openState() (node.CredentialStore, error) {
	b.started = time.Now()
	creds := node.OpenCredentials("mem:")
	auditPath := b.cfg.AuditLog
	if b.cfg.StateDir != "mem:" {
		if err := os.MkdirAll(b.cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("sandbox: state dir: %w", err)
		}
		creds = node.OpenCredentials(filepath.Join(b.cfg.StateDir, "credentials.json"))
		if auditPath == "" {
			auditPath = filepath.Join(b.cfg.StateDir, "audit.jsonl")
		}
	}
	if _, err := creds.Load(); err != nil && !errors.Is(err, node.ErrNoCredentials) {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if auditPath != "" {
		w, err := audit.Open(auditPath)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		b.audit, b.auditF = w, w
		b.cfg.AuditLog = auditPath
	}
	return creds, nil
}

// record writes ev to the audit log. A failed write is logged (the first
// one as an error, later ones counted); it returns an error wrapping
// ErrAuditFailed unless the sandbox runs with AuditFailOpen, and callers
// about to open a flow refuse it then. A FileWriter that failed once
// fails every later write, so the sandbox stays closed until a restart.
func (b *base) record(ev audit.Event) error {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	b.egressN.Observe(ev)
	err := b.audit.Write(ev)
	if err == nil {
		return nil
	}
	if n := b.auditFailures.Add(1); n == 1 {
		if b.cfg.AuditFailOpen {
			b.log.Error("audit log write failed; carrying on unaudited (--audit-fail-open)", "file", b.cfg.AuditLog, "err", err)
		} else {
			b.log.Error("audit log write failed; denying every new flow until a restart with a working log (--audit-fail-open carries on unaudited)",
				"file", b.cfg.AuditLog, "err", err)
		}
	}
	if b.cfg.AuditFailOpen {
		return nil
	}
	return fmt.Errorf("%w: %s event: %w", ErrAuditFailed, ev.Kind, err)
}

// AuditFailures counts the events the audit log failed to record.
func (b *base) AuditFailures() uint64 { return b.auditFailures.Load() }

// Node returns the running node (nil before Start).
func (b *base) Node() *node.Node {
	b.nodeMu.Lock()
	defer b.nodeMu.Unlock()
	return b.node
}

func (b *base) setNode(n *node.Node) {
	b.nodeMu.Lock()
	b.node = n
	b.nodeMu.Unlock()
}

// peers lists the node's peers for name lookups (nil before Start).
func (b *base) peers() []nodePeer {
	n := b.Node()
	if n == nil {
		return nil
	}
	ps := n.Peers()
	out := make([]nodePeer, len(ps))
	for i, p := range ps {
		out[i] = nodePeer{name: p.Name, addr: p.Address.Addr()}
	}
	return out
}

// status fills what every driver reports.
func (b *base) status(mode Mode) Status {
	st := Status{Name: b.cfg.Name, Mode: mode, AuditLog: b.cfg.AuditLog, Started: b.started}
	if n := b.Node(); n != nil {
		id := n.Identity()
		st.NodeID, st.Address, st.Peers = id.NodeID, id.Address, n.Status()
	}
	return st
}

// closeNode closes the node, which removes its interface, and records it.
func (b *base) closeNode() error {
	n := b.Node()
	if n == nil {
		return nil
	}
	id := n.Identity()
	err := n.Close()
	_ = b.record(audit.Event{Kind: "stop", Detail: fmt.Sprintf("sandbox %s (%s)", id.Name, id.NodeID)})
	return err
}

// closeAudit logs the chain's head, so truncation can be detected, and
// closes the log.
func (b *base) closeAudit() error {
	if b.auditF == nil {
		return nil
	}
	err := b.auditF.Close()
	seq, hash := b.auditF.Head()
	b.log.Info("audit log closed", "file", b.cfg.AuditLog, "lines", seq, "last_hash", hash, "checkpoint", audit.CheckpointPath(b.cfg.AuditLog))
	return err
}
