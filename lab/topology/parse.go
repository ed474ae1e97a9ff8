package topology

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"
)

// File is a decoded topology and where its parts are.
type File struct {
	Topology
	Source
}

// Source says where a topology came from, so later checks point into it.
type Source struct {
	// File names the file in errors.
	File string
	// Pos holds the positions of the decoded values.
	Pos strictyaml.Positions
	// Prefix is the topology's path inside the document: "" for a
	// topology file, "topology" for one inline in a scenario.
	Prefix string
	// Dir resolves relative paths (egress policies). If empty, the
	// directory of File.
	Dir string
}

// at returns the position of the value at path (relative to the
// topology), or of its closest enclosing value.
func (s Source) at(path string) strictyaml.Pos {
	full := s.full(path)
	for {
		if p, ok := s.Pos[full]; ok {
			return p
		}
		i := strings.LastIndexAny(full, ".[")
		if i < 0 {
			return s.Pos[""]
		}
		full = full[:i]
	}
}

func (s Source) full(path string) string {
	switch {
	case s.Prefix == "":
		return path
	case path == "":
		return s.Prefix
	}
	return s.Prefix + "." + path
}

func (s Source) dir() string {
	if s.Dir != "" {
		return s.Dir
	}
	return filepath.Dir(s.File)
}

// Load reads the topology file at path and parses it.
func Load(path string) (*File, *Plan, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return Parse(path, data)
}

// errIsDir is why ReadFile refuses a directory: reading one fails with an
// error that repeats the path ("read d: read d: is a directory").
var errIsDir = errors.New("is a directory, not a YAML file")

// ReadFile reads a lab file, refusing more than strictyaml.MaxSize bytes.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.IsDir() {
		return nil, fmt.Errorf("read %s: %w", path, errIsDir)
	}
	data, err := io.ReadAll(io.LimitReader(f, strictyaml.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > strictyaml.MaxSize {
		return nil, fmt.Errorf("%s: %w: larger than %d bytes", path, strictyaml.ErrTooLarge, strictyaml.MaxSize)
	}
	return data, nil
}

// Parse decodes a topology file's contents, checks it and resolves it
// into a Plan. name is used in error positions and to resolve relative
// paths. Every problem is reported at once: the error is a
// *strictyaml.Errors (wrapping strictyaml.ErrInvalid) listing them.
func Parse(name string, data []byte) (*File, *Plan, error) {
	f := &File{Source: Source{File: name}}
	pos, err := strictyaml.Decode(name, data, &f.Topology)
	f.Pos = pos
	if err != nil && pos == nil {
		return nil, nil, err // too large
	}
	var c strictyaml.Collector
	c.Merge(name, err)
	if f.Name == "" {
		f.Name = strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
	}
	plan := resolve(&f.Topology, f.Source, &c)
	if err := c.Err(); err != nil {
		return f, nil, err
	}
	return f, plan, nil
}

// Resolve checks t, decoded from src, and builds its Plan, adding every
// problem to c. It returns nil when a problem makes the plan unbuildable.
func Resolve(t *Topology, src Source, c *strictyaml.Collector) *Plan {
	before := c.Len()
	plan := resolve(t, src, c)
	if c.Len() > before {
		return nil
	}
	return plan
}
