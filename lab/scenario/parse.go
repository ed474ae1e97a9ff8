package scenario

import (
	"path/filepath"
	"reflect"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/topology"
)

// File is a decoded, checked scenario with its resolved topology.
type File struct {
	Scenario
	// Path names the file in errors.
	Path string
	Pos  strictyaml.Positions
}

// Plan is the scenario's resolved topology.
func (f *File) Plan() *topology.Plan { return f.Topology.Plan }

// Options tune Parse.
type Options struct {
	// ReadFile reads the topology file a scenario names, given its path
	// joined to the scenario's directory. If nil, topology.ReadFile.
	ReadFile func(path string) ([]byte, error)
	// Topology, if set, is a topology file to run the scenario on instead
	// of the one it names (read with ReadFile, as given).
	Topology string
}

// Load reads and parses the scenario file at path.
func Load(path string) (*File, error) {
	data, err := topology.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data, Options{})
}

// Parse decodes a scenario, loads or resolves its topology and checks
// every step against it. Every problem, in the scenario and in its
// topology file, is reported at once: the error is a *strictyaml.Errors.
func Parse(name string, data []byte, opt Options) (*File, error) {
	if opt.ReadFile == nil {
		opt.ReadFile = topology.ReadFile
	}
	f := &File{Path: name}
	pos, err := strictyaml.Decode(name, data, &f.Scenario)
	f.Pos = pos
	if err != nil && pos == nil {
		return nil, err
	}
	var c strictyaml.Collector
	c.Merge(name, err)
	if f.Name == "" {
		f.Name = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	}
	ref := &f.Topology
	if opt.Topology != "" {
		ref.Path, ref.Inline = opt.Topology, nil
	}
	switch {
	case ref.Path != "":
		path := ref.Path
		if !filepath.IsAbs(path) && opt.Topology == "" {
			path = filepath.Join(filepath.Dir(name), path)
		}
		tdata, rerr := opt.ReadFile(path)
		if rerr != nil {
			hint := "the path is relative to the scenario file"
			if opt.Topology != "" {
				hint = "" // the path was given instead of the scenario's own
			}
			c.Add(&strictyaml.Error{File: name, Pos: pos["topology"], Path: "topology", Msg: rerr.Error(), Hint: hint})
			break
		}
		tf, plan, terr := topology.Parse(path, tdata)
		c.Merge(path, terr)
		ref.File, ref.Plan = tf, plan
	case ref.Inline != nil:
		src := topology.Source{File: name, Pos: pos, Prefix: "topology"}
		if ref.Inline.Name == "" {
			ref.Inline.Name = f.Name
		}
		ref.Plan = topology.Resolve(ref.Inline, src, &c)
		ref.File = &topology.File{Topology: *ref.Inline, Source: src}
	}
	if ref.Plan != nil {
		check(f, &c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }

func reflectType[T any]() reflect.Type { return reflect.TypeFor[T]() }
