// Package labfile loads the files lattice-lab takes: a topology or a
// scenario, named by a path or by builtin:NAME for one shipped inside the
// binary (packages scenarios and topologies). Load tells a file's kind from
// its top-level keys, resolves builtin: names, pairs a scenario with its
// topology (or with another one, to run it there) and reports every problem
// with file:line:col, builtins named by their repository paths.
//
// A topology names some files by a path relative to itself (an egress
// policy), which its checks stat and a sandbox reads long after parsing; so
// builtins are loaded from a copy on disk that a Loader keeps while held.
package labfile

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/scenario"
	"github.com/latticelab/lattice/lab/topology"
)

// Kind is what a lab file describes.
type Kind string

// The kinds of lab file.
const (
	Topology Kind = "topology"
	Scenario Kind = "scenario"
)

// File is a loaded topology or scenario.
type File struct {
	// Path names the file in output and errors: as given, or for a
	// builtin its repository path (scenarios/NAME.yaml).
	Path string
	Kind Kind
	// Topology is set for a topology file, Scenario for a scenario.
	Topology *topology.File
	Scenario *scenario.File
	// Plan is the topology's resolution (a scenario's: of its topology).
	Plan *topology.Plan
}

// Name is the topology's or scenario's name.
func (f *File) Name() string {
	if f.Scenario != nil {
		return f.Scenario.Name
	}
	return f.Topology.Name
}

// Options tune Load.
type Options struct {
	// Kind says what the file is. If empty, KindOf guesses from its keys.
	Kind Kind
	// On, if set, is a topology (a path, or builtin:NAME naming a shipped
	// topology) to load the file on, as a scenario, instead of the
	// topology the scenario names.
	On string
}

// scenarioKey matches a top-level key only scenarios have.
var scenarioKey = regexp.MustCompile(`(?m)^(steps|topology)\s*:`)

// topKey matches a top-level key.
var topKey = regexp.MustCompile(`(?m)^([A-Za-z_][A-Za-z0-9_-]*)\s*:`)

// KindOf guesses whether data is a scenario or a topology from its
// top-level keys; a file with neither is taken for a topology, whose
// errors then say what is missing. A misspelt steps: or topology: still
// makes a scenario, so its errors suggest the key meant rather than list
// a topology's keys.
func KindOf(data []byte) Kind {
	if scenarioKey.Match(data) {
		return Scenario
	}
	for _, m := range topKey.FindAllSubmatch(data, -1) {
		if strictyaml.Suggest(string(m[1]), []string{"steps", "topology"}) != "" {
			return Scenario
		}
	}
	return Topology
}

// Load reads and parses the topology or scenario ref names: a path, or
// builtin:NAME (see Resolve), which needs the Loader held. Problems in the
// file come back as a *strictyaml.Errors.
func (l *Loader) Load(ref string, opt Options) (*File, error) {
	kind := opt.Kind
	if opt.On != "" {
		if kind == Topology {
			return nil, fmt.Errorf("labfile: load %s on topology %s: only a scenario runs on a topology", ref, opt.On)
		}
		kind = Scenario
	}
	p, display, err := l.onDisk(ref, kind)
	if err != nil {
		return nil, err
	}
	on := opt.On
	if on != "" {
		if on, _, err = l.onDisk(on, Topology); err != nil {
			return nil, err
		}
	}
	f, err := parse(p, kind, on)
	if err != nil {
		return nil, l.renameErrors(err)
	}
	f.Path = display
	if f.Scenario != nil {
		f.Scenario.Path = display
	}
	return f, nil
}

// onDisk returns where ref is on disk and how errors name it: a path as
// given, a builtin in the loader's copy by its repository path.
func (l *Loader) onDisk(ref string, kind Kind) (p, display string, err error) {
	if !IsBuiltin(ref) {
		return ref, ref, nil
	}
	rel, err := l.Resolve(ref, kind)
	if err != nil {
		return "", "", err
	}
	root, err := l.root()
	if err != nil {
		return "", "", err
	}
	return filepath.Join(root, filepath.FromSlash(rel)), rel, nil
}

// GuessKind is the kind Load takes ref for: kind if set, else what the
// file's keys say; "" when ref cannot be read.
func (l *Loader) GuessKind(ref string, kind Kind) Kind {
	if kind != "" {
		return kind
	}
	data, err := l.Read(ref, "")
	if err != nil {
		return ""
	}
	return KindOf(data)
}

// parse reads the file at p and parses it as kind ("" guesses), on the
// topology file on if set.
func parse(p string, kind Kind, on string) (*File, error) {
	data, err := topology.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if kind == "" {
		kind = KindOf(data)
	}
	f := &File{Path: p, Kind: kind}
	switch kind {
	case Scenario:
		s, err := scenario.Parse(p, data, scenario.Options{Topology: on})
		if err != nil {
			return nil, err
		}
		f.Scenario, f.Plan = s, s.Plan()
	case Topology:
		t, plan, err := topology.Parse(p, data)
		if err != nil {
			return nil, err
		}
		f.Topology, f.Plan = t, plan
	default:
		return nil, fmt.Errorf("labfile: %s: kind %q: want topology or scenario", p, kind)
	}
	return f, nil
}

// renameErrors names files in the loader's copy of the builtins by their
// repository paths, as builtins are known.
func (l *Loader) renameErrors(err error) error {
	var es *strictyaml.Errors
	root := l.copied()
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
