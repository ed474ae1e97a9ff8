package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/scenarios"
	"github.com/latticelab/lattice/topologies"
)

// labFile is a topology or scenario file loaded for a command.
type labFile struct {
	path     string
	kind     string // "topology" or "scenario"
	topo     *topology.File
	scenario *scenario.File
	plan     *topology.Plan
}

// name is the topology's or scenario's name.
func (f *labFile) name() string {
	if f.scenario != nil {
		return f.scenario.Name
	}
	return f.topo.Name
}

// scenarioKey matches a top-level key only scenarios have.
var scenarioKey = regexp.MustCompile(`(?m)^(steps|topology)\s*:`)

// kindOf guesses whether data is a scenario or a topology from its
// top-level keys; a file with neither is taken for a topology, whose
// errors then say what is missing.
func kindOf(data []byte) string {
	if scenarioKey.Match(data) {
		return "scenario"
	}
	return "topology"
}

// builtin is how the lattice-lab binary reaches the files it ships:
// "builtin:NAME" is scenarios/NAME.yaml, or topologies/NAME.yaml when no
// scenario has that name.
const builtinPrefix = "builtin:"

// readBuiltin reads a shipped file by the path the repository has it at.
func readBuiltin(p string) ([]byte, error) {
	p = path.Clean(strings.TrimPrefix(p, builtinPrefix))
	switch dir, base := path.Split(p); dir {
	case "topologies/":
		return fs.ReadFile(topologies.FS, base)
	case "scenarios/":
		return fs.ReadFile(scenarios.FS, base)
	}
	return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}

// builtinPath maps builtin:NAME to the repository path of a shipped file.
func builtinPath(name string) (string, error) { return builtinPathOf(name, "") }

// builtinPathOf is builtinPath looking only at kind's files ("" for both).
func builtinPathOf(name, kind string) (string, error) {
	name = strings.TrimPrefix(name, builtinPrefix)
	switch {
	case strings.HasPrefix(name, "scenarios/"):
		name, kind = strings.TrimPrefix(name, "scenarios/"), "scenario"
	case strings.HasPrefix(name, "topologies/"):
		name, kind = strings.TrimPrefix(name, "topologies/"), "topology"
	}
	base := strings.TrimSuffix(name, ".yaml") + ".yaml"
	if _, err := fs.Stat(scenarios.FS, base); err == nil && kind != "topology" {
		return "scenarios/" + base, nil
	}
	if _, err := fs.Stat(topologies.FS, base); err == nil && kind != "scenario" {
		return "topologies/" + base, nil
	}
	return "", fmt.Errorf("no built-in scenario or topology %q (lattice-lab list shows them)", strings.TrimPrefix(name, builtinPrefix))
}

// loadFile reads and parses a topology or scenario; kind forces one
// ("" guesses). Problems come back as a *strictyaml.Errors.
func loadFile(p, kind string) (*labFile, error) {
	display, root := p, ""
	if strings.HasPrefix(p, builtinPrefix) {
		bp, err := builtinPathOf(p, kind)
		if err != nil {
			return nil, err
		}
		if root, err = builtinFiles.root(); err != nil {
			return nil, err
		}
		display, p = bp, filepath.Join(root, filepath.FromSlash(bp))
	}
	f, err := parseFile(p, kind)
	if err != nil {
		return nil, renameErrors(err, root)
	}
	f.path = display
	if f.scenario != nil {
		f.scenario.Path = display
	}
	return f, nil
}

// guessKind is the kind loadFile takes p for: kind if set, else what the
// file's keys say; "" when p cannot be read.
func guessKind(p, kind string) string {
	if kind != "" {
		return kind
	}
	read := topology.ReadFile
	if strings.HasPrefix(p, builtinPrefix) {
		bp, err := builtinPath(p)
		if err != nil {
			return ""
		}
		p, read = bp, readBuiltin
	}
	data, err := read(p)
	if err != nil {
		return ""
	}
	return kindOf(data)
}

func parseFile(p, kind string) (*labFile, error) {
	data, err := topology.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if kind == "" {
		kind = kindOf(data)
	}
	f := &labFile{path: p, kind: kind}
	switch kind {
	case "scenario":
		s, err := scenario.Parse(p, data, scenario.Options{})
		if err != nil {
			return nil, err
		}
		f.scenario, f.plan = s, s.Plan()
	default:
		t, plan, err := topology.Parse(p, data)
		if err != nil {
			return nil, err
		}
		f.topo, f.plan = t, plan
	}
	return f, nil
}

// renameErrors names files under root by their repository paths, as
// builtins are known.
func renameErrors(err error, root string) error {
	var es *strictyaml.Errors
	if root == "" || !errors.As(err, &es) {
		return err
	}
	for _, e := range es.List {
		if rel, rerr := filepath.Rel(root, e.File); rerr == nil && !strings.HasPrefix(rel, "..") {
			e.File = filepath.ToSlash(rel)
		}
		e.Msg = strings.ReplaceAll(e.Msg, root+string(filepath.Separator), "")
	}
	return err
}

// builtinFiles keeps the shipped files on disk while a command runs:
// what a builtin names by a path relative to itself (an egress policy) is
// checked by the topology resolver with os.Stat and read by the sandbox
// long after parsing, so it must be a real file, wherever lattice-lab runs.
var builtinFiles extracted

// extracted is a temporary directory holding scenarios.FS under
// scenarios/ and topologies.FS under topologies/, written on first use and
// removed when the last holder lets go.
type extracted struct {
	mu    sync.Mutex // guards the following fields
	holds int
	dir   string
}

// hold keeps the files until release is called; execute holds them for
// the whole command. release reports a directory it could not remove.
func (e *extracted) hold() (release func() error) {
	e.mu.Lock()
	e.holds++
	e.mu.Unlock()
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.holds--; e.holds == 0 && e.dir != "" {
				if rerr := os.RemoveAll(e.dir); rerr != nil {
					err = fmt.Errorf("remove builtin files: %w", rerr)
				}
				e.dir = ""
			}
		})
		return err
	}
}

// root returns the directory, writing it on first use.
func (e *extracted) root() (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.holds == 0 {
		return "", errors.New("builtin files: not held (use them inside execute)")
	}
	if e.dir != "" {
		return e.dir, nil
	}
	dir, err := os.MkdirTemp("", "lattice-lab-builtin-")
	if err != nil {
		return "", fmt.Errorf("builtin files: %w", err)
	}
	for sub, fsys := range map[string]fs.FS{"scenarios": scenarios.FS, "topologies": topologies.FS} {
		if err := os.CopyFS(filepath.Join(dir, sub), fsys); err != nil {
			return "", errors.Join(fmt.Errorf("builtin files: write %s: %w", sub, err), os.RemoveAll(dir))
		}
	}
	e.dir = dir
	return dir, nil
}

// isNotExist reports a missing file, to be told apart from bad contents.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// summary says what a plan holds, in one line.
func summary(p *topology.Plan) string {
	var parts []string
	count := func(n int, one, many string) {
		if n == 1 {
			parts = append(parts, "1 "+one)
		} else if n > 1 {
			parts = append(parts, fmt.Sprintf("%d %s", n, many))
		}
	}
	count(len(p.Networks), "network", "networks")
	count(len(p.Routers), "router", "routers")
	count(len(p.Hosts), "host", "hosts")
	count(len(p.Nodes), "node", "nodes")
	var svc []string
	if p.Control != nil {
		svc = append(svc, "control")
	}
	if n := len(p.Relays); n > 0 {
		svc = append(svc, plural(n, "relay"))
	}
	if n := len(p.STUN); n > 0 {
		svc = append(svc, plural(n, "STUN server"))
	}
	s := strings.Join(parts, ", ")
	if len(svc) > 0 {
		s += "; " + strings.Join(svc, ", ")
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(prefix + line + "\n")
	}
	return b.String()
}
