package strictyaml

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrInvalid is wrapped by every error that reports problems in a file.
var ErrInvalid = errors.New("invalid file")

// ErrTooLarge reports a file larger than MaxSize.
var ErrTooLarge = errors.New("file too large")

// MaxErrors bounds how many problems one Errors reports, so a wrong file
// passed by mistake does not flood the terminal.
const MaxErrors = 50

// Pos is a position in a file: 1-based line and column, zero when unknown.
type Pos struct {
	Line int `json:"line"`
	Col  int `json:"col"`
}

// IsZero reports whether the position is unknown.
func (p Pos) IsZero() bool { return p.Line == 0 }

func (p Pos) compare(q Pos) int {
	return cmp.Or(cmp.Compare(p.Line, q.Line), cmp.Compare(p.Col, q.Col))
}

// Error is one problem in a file.
type Error struct {
	File string `json:"file"`
	Pos  Pos    `json:"pos"`
	// Path is where in the document the problem is, e.g.
	// "nodes.alice.network" or "steps[3].ping.to" (list items count from 1).
	Path string `json:"path,omitempty"`
	Msg  string `json:"message"`
	// Hint says how to fix it, when there is something useful to say.
	Hint string `json:"hint,omitempty"`
}

// Error formats e as "file:line:col: path: message; hint".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if !e.Pos.IsZero() {
		fmt.Fprintf(&b, ":%d:%d", e.Pos.Line, e.Pos.Col)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Errors is every problem found in one or more files, sorted by file order
// of first appearance and position.
type Errors struct {
	List []*Error
	// Dropped counts problems beyond MaxErrors that List leaves out.
	Dropped int
}

// Error lists the problems, one per line, after a summary line.
func (es *Errors) Error() string {
	var b strings.Builder
	n := len(es.List) + es.Dropped
	if n == 1 {
		b.WriteString("1 problem:")
	} else {
		fmt.Fprintf(&b, "%d problems:", n)
	}
	for _, e := range es.List {
		b.WriteString("\n")
		b.WriteString(e.Error())
	}
	if es.Dropped > 0 {
		fmt.Fprintf(&b, "\n(%d more not shown)", es.Dropped)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) hold and lets errors.As find each
// *Error.
func (es *Errors) Unwrap() []error {
	out := make([]error, 0, len(es.List)+1)
	out = append(out, ErrInvalid)
	for _, e := range es.List {
		out = append(out, e)
	}
	return out
}

// Collector gathers problems for one or more files. Its zero value is ready.
type Collector struct {
	list    []*Error
	dropped int
	files   []string // order of first appearance, for sorting
}

// Add records a problem.
func (c *Collector) Add(e *Error) {
	if !slices.Contains(c.files, e.File) {
		c.files = append(c.files, e.File)
	}
	// Keep more than are shown, so the ones shown are the first in the
	// file, not the first found.
	if len(c.list) >= 20*MaxErrors {
		c.dropped++
		return
	}
	c.list = append(c.list, e)
}

// Addf records a problem at pos with no hint.
func (c *Collector) Addf(file string, pos Pos, path, format string, args ...any) {
	c.Add(&Error{File: file, Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Merge adds every problem err reports: an *Errors' list, an *Error, or
// any other error as a position-less problem in file.
func (c *Collector) Merge(file string, err error) {
	var es *Errors
	var e *Error
	switch {
	case err == nil:
	case errors.As(err, &es):
		for _, e := range es.List {
			c.Add(e)
		}
		c.dropped += es.Dropped
	case errors.As(err, &e):
		c.Add(e)
	default:
		c.Add(&Error{File: file, Msg: err.Error()})
	}
}

// Len is how many problems were recorded.
func (c *Collector) Len() int { return len(c.list) + c.dropped }

// Err returns nil without problems, or an *Errors listing them sorted by
// file and position.
func (c *Collector) Err() error {
	if c.Len() == 0 {
		return nil
	}
	list := slices.Clone(c.list)
	slices.SortStableFunc(list, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(slices.Index(c.files, a.File), slices.Index(c.files, b.File)),
			a.Pos.compare(b.Pos))
	})
	dropped := c.dropped
	if len(list) > MaxErrors {
		dropped += len(list) - MaxErrors
		list = list[:MaxErrors]
	}
	return &Errors{List: list, Dropped: dropped}
}
