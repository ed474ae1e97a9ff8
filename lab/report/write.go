package report

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/latticelab/lattice/internal/owner"
)

// WriteJSON writes the results as one indented JSON array.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(results)
}

// JUnit XML, as Jenkins, GitLab and GitHub test reporters read it: one
// testsuite per scenario, one testcase per step, and a testcase for the
// scenario as a whole (so a bring-up failure shows up too). Times are on
// the scenario's clock. The scenario's clock, network and wall seconds and
// x_realtime are properties of its testsuite (where the Ant JUnit schema
// has them) and of its whole-scenario testcase (where Jenkins' and Azure's
// reporters show them).
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     float64      `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string           `xml:"name,attr"`
	Tests     int              `xml:"tests,attr"`
	Failures  int              `xml:"failures,attr"`
	Skipped   int              `xml:"skipped,attr"`
	Time      float64          `xml:"time,attr"`
	Timestamp string           `xml:"timestamp,attr"`
	Props     *junitProperties `xml:"properties,omitempty"`
	Cases     []junitCase      `xml:"testcase"`
}

type junitProperties struct {
	List []junitProperty `xml:"property"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string           `xml:"name,attr"`
	ClassName string           `xml:"classname,attr"`
	Time      float64          `xml:"time,attr"`
	Props     *junitProperties `xml:"properties,omitempty"`
	Failure   *junitMessage    `xml:"failure,omitempty"`
	Skipped   *junitMessage    `xml:"skipped,omitempty"`
	SystemOut string           `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the results as JUnit XML.
func WriteJUnit(w io.Writer, results []*Result) error {
	all := junitSuites{Name: "lattice-lab"}
	for _, r := range results {
		s := junitSuite{Name: r.Scenario, Time: r.Duration.Seconds(), Timestamp: r.Started.UTC().Format("2006-01-02T15:04:05")}
		s.Props = timingProperties(r)
		whole := junitCase{Name: "scenario " + r.Scenario, ClassName: "lattice-lab." + r.Scenario, Time: r.Duration.Seconds(), Props: s.Props}
		switch r.Status {
		case Failed:
			whole.Failure = &junitMessage{Message: r.Error, Text: r.Error}
		case Skipped:
			whole.Skipped = &junitMessage{Message: r.SkipReason}
		}
		s.Cases = append(s.Cases, whole)
		for _, st := range r.Steps {
			c := junitCase{Name: fmt.Sprintf("%02d %s", st.Index, st.Label), ClassName: "lattice-lab." + r.Scenario, Time: st.Duration.Seconds(), SystemOut: st.Detail}
			if st.Status == Failed {
				c.Failure = &junitMessage{Message: st.Error, Text: st.Error}
			}
			s.Cases = append(s.Cases, c)
		}
		for _, c := range s.Cases {
			s.Tests++
			if c.Failure != nil {
				s.Failures++
			}
			if c.Skipped != nil {
				s.Skipped++
			}
		}
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Skipped += s.Skipped
		all.Time += s.Time
		all.Suites = append(all.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(all); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// timingProperties are r's clock, network and wall seconds and x_realtime
// as JUnit properties, valued as in JSON.
func timingProperties(r *Result) *junitProperties {
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return &junitProperties{List: []junitProperty{
		{"clock", string(r.Clock)},
		{"network_seconds", num(r.Duration.Seconds())},
		{"wall_seconds", num(r.Wall.Seconds())},
		{"x_realtime", num(r.XRealtime())},
	}}
}

// WriteDir writes result.json, junit.xml and report.html into dir and
// returns their paths. Captures outside dir are copied to
// dir/captures/SCENARIO/, so report.html links only to files in dir (with
// relative links) and keeps working when dir is moved; result.json keeps
// the captures' original paths. A capture that cannot be copied is linked
// where it is and named in the error, after every file is written.
func WriteDir(dir string, results []*Result) ([]string, error) {
	return WriteDirWith(dir, results, DirOptions{})
}

// DirOptions tune WriteDirWith.
type DirOptions struct {
	// Owner is given the files and directories WriteDirWith creates
	// (under sudo, the user who ran it). If zero, they stay the
	// process's.
	Owner owner.Owner
}

// WriteDirWith is WriteDir with options.
func WriteDirWith(dir string, results []*Result, opts DirOptions) ([]string, error) {
	if err := opts.Owner.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	shown, copyErr := collectCaptures(dir, results, opts.Owner)
	var paths []string
	for _, f := range []struct {
		name  string
		write func(io.Writer, []*Result) error
	}{{"result.json", WriteJSON}, {"junit.xml", WriteJUnit}, {"report.html", func(w io.Writer, _ []*Result) error {
		return WriteHTML(w, shown, HTMLOptions{CaptureBase: dir})
	}}} {
		p := filepath.Join(dir, f.name)
		file, err := opts.Owner.Create(p)
		if err != nil {
			return paths, err
		}
		err = f.write(file, results)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("%s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, copyErr
}
