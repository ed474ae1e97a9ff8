package labfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/topology"
	"github.com/latticelab/lattice/scenarios"
	"github.com/latticelab/lattice/topologies"
)

// Prefix starts a reference to a shipped file: builtin:NAME.
const Prefix = "builtin:"

// ErrNoBuiltin is returned for a builtin: name no shipped file has.
var ErrNoBuiltin = errors.New("no built-in scenario or topology")

// IsBuiltin reports whether ref names a shipped file.
func IsBuiltin(ref string) bool { return strings.HasPrefix(ref, Prefix) }

// Loader loads lab files and keeps the copy of the builtins they are
// loaded from. Its zero value loads the files lattice-lab ships.
type Loader struct {
	// Scenarios holds the builtin scenarios by base name, and the files
	// they name relative to themselves. If nil, scenarios.FS.
	Scenarios fs.FS
	// Topologies holds the builtin topologies by base name. If nil,
	// topologies.FS.
	Topologies fs.FS

	mu    sync.Mutex // guards the following fields
	holds int
	dir   string // the copy on disk; "" until a builtin is loaded
}

// Builtin is one shipped file.
type Builtin struct {
	// Name is the file's base name without .yaml.
	Name string
	Kind Kind
	// Ref is what to pass to Load (with Options.Kind set to Kind when
	// Builtins was asked for one kind).
	Ref string
	// Path is the file's repository path: scenarios/NAME.yaml or
	// topologies/NAME.yaml.
	Path string
}

// groups lists the builtin directories in the order Builtins lists them.
func (l *Loader) groups() []struct {
	kind Kind
	dir  string
	fsys fs.FS
} {
	sc, tp := l.Scenarios, l.Topologies
	if sc == nil {
		sc = scenarios.FS
	}
	if tp == nil {
		tp = topologies.FS
	}
	return []struct {
		kind Kind
		dir  string
		fsys fs.FS
	}{{Scenario, "scenarios", sc}, {Topology, "topologies", tp}}
}

// Resolve maps builtin:NAME to the repository path of a shipped file of
// kind ("" for either): scenarios/NAME.yaml, or topologies/NAME.yaml when
// no scenario has the name (or kind is Topology).
// builtin:scenarios/NAME and builtin:topologies/NAME say which outright.
func (l *Loader) Resolve(ref string, kind Kind) (string, error) {
	name := strings.TrimPrefix(ref, Prefix)
	for _, g := range l.groups() {
		if rest, ok := strings.CutPrefix(name, g.dir+"/"); ok {
			name, kind = rest, g.kind
		}
	}
	base := strings.TrimSuffix(name, ".yaml") + ".yaml"
	var names []string
	for _, g := range l.groups() {
		if kind != "" && kind != g.kind {
			continue
		}
		if _, err := fs.Stat(g.fsys, base); err == nil {
			return g.dir + "/" + base, nil
		}
		files, _ := fs.Glob(g.fsys, "*.yaml") // only for a suggestion
		for _, f := range files {
			names = append(names, strings.TrimSuffix(f, ".yaml"))
		}
	}
	if s := strictyaml.Suggest(strings.TrimSuffix(name, ".yaml"), names); s != "" {
		return "", fmt.Errorf("%w %q; did you mean %q? (lattice-lab list shows them)", ErrNoBuiltin, name, s)
	}
	return "", fmt.Errorf("%w %q (lattice-lab list shows them)", ErrNoBuiltin, name)
}

// Read returns the contents of the file ref names: a builtin of kind (""
// for either) from the shipped files, anything else from disk. It needs
// no hold.
func (l *Loader) Read(ref string, kind Kind) ([]byte, error) {
	if !IsBuiltin(ref) {
		return topology.ReadFile(ref)
	}
	p, err := l.Resolve(ref, kind)
	if err != nil {
		return nil, err
	}
	dir, base := path.Split(p)
	for _, g := range l.groups() {
		if dir == g.dir+"/" {
			return fs.ReadFile(g.fsys, base)
		}
	}
	return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
}

// Builtins lists the shipped files of kind ("" for both), scenarios
// first, each by name. Ref is builtin:NAME, or builtin:topologies/NAME
// for a topology when listing both and a scenario has its name.
func (l *Loader) Builtins(kind Kind) ([]Builtin, error) {
	var list []Builtin
	for _, g := range l.groups() {
		if kind != "" && kind != g.kind {
			continue
		}
		names, err := fs.Glob(g.fsys, "*.yaml")
		if err != nil {
			return nil, fmt.Errorf("labfile: list %s: %w", g.dir, err)
		}
		for _, n := range names {
			b := Builtin{Name: strings.TrimSuffix(n, ".yaml"), Kind: g.kind, Path: g.dir + "/" + n}
			b.Ref = Prefix + b.Name
			if p, err := l.Resolve(b.Ref, kind); err != nil || p != b.Path {
				b.Ref = Prefix + g.dir + "/" + b.Name
			}
			list = append(list, b)
		}
	}
	return list, nil
}

// Hold keeps the copy of the builtins on disk until release is called;
// the last release removes it. Load needs a hold to load a builtin, and
// what it returns may name files in the copy (a sandbox's egress policy),
// so hold for as long as the result is used. release reports a copy it
// could not remove.
func (l *Loader) Hold() (release func() error) {
	l.mu.Lock()
	l.holds++
	l.mu.Unlock()
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.holds--; l.holds == 0 && l.dir != "" {
				if rerr := os.RemoveAll(l.dir); rerr != nil {
					err = fmt.Errorf("labfile: remove builtin files: %w", rerr)
				}
				l.dir = ""
			}
		})
		return err
	}
}

// root returns the copy's directory, writing it on first use: the
// scenarios under scenarios/, the topologies under topologies/, so a
// scenario's ../topologies/NAME.yaml finds its topology.
func (l *Loader) root() (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holds == 0 {
		return "", errors.New("labfile: builtin files: not held (call Loader.Hold first)")
	}
	if l.dir != "" {
		return l.dir, nil
	}
	dir, err := os.MkdirTemp("", "lattice-lab-builtin-")
	if err != nil {
		return "", fmt.Errorf("builtin files: %w", err)
	}
	for _, g := range l.groups() {
		if err := os.CopyFS(filepath.Join(dir, g.dir), g.fsys); err != nil {
			return "", errors.Join(fmt.Errorf("builtin files: write %s: %w", g.dir, err), os.RemoveAll(dir))
		}
	}
	l.dir = dir
	return dir, nil
}

// copied is the copy's directory, "" if there is none.
func (l *Loader) copied() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dir
}
