package report

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/latticelab/lattice/internal/owner"
)

// capturesDir is where WriteDir puts the captures it copies, under the
// report's directory.
const capturesDir = "captures"

// collectCaptures copies every capture outside dir to
// dir/captures/SCENARIO/NAME, so the report directory holds everything its
// page links to and can be moved, archived or served as it is. It returns the
// results as the page shows them: the same, with the copies' paths. A capture
// that cannot be copied keeps its original path and is reported in the error.
// The copies and the directories made for them are given to own.
func collectCaptures(dir string, results []*Result, own owner.Owner) ([]*Result, error) {
	var errs []error
	used := map[string]string{} // destination → source, to keep names apart
	out := make([]*Result, len(results))
	for i, r := range results {
		out[i] = r
		if len(r.Captures) == 0 {
			continue
		}
		shown := make([]string, len(r.Captures))
		for j, src := range r.Captures {
			shown[j] = src
			if _, ok := inside(dir, src); ok {
				continue
			}
			dst := filepath.Join(dir, capturesDir, safeName(r.Scenario), filepath.Base(src))
			for n := 2; used[dst] != "" && used[dst] != src; n++ {
				ext := filepath.Ext(src)
				dst = filepath.Join(dir, capturesDir, safeName(r.Scenario), fmt.Sprintf("%s-%d%s", strings.TrimSuffix(filepath.Base(src), ext), n, ext))
			}
			used[dst] = src
			if err := copyFile(src, dst, own); err != nil {
				errs = append(errs, fmt.Errorf("copy capture %s into the report: %w", src, err))
				continue
			}
			shown[j] = dst
		}
		c := *r
		c.Captures = shown
		out[i] = &c
	}
	return out, errors.Join(errs...)
}

// safeName makes a scenario name usable as one path element.
func safeName(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 {
			return '_'
		}
		return r
	}, s)
	if s == "" || s == "." || s == ".." {
		return "scenario"
	}
	return s
}

func copyFile(src, dst string, own owner.Owner) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := own.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := own.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644) // shared, as pcapng.Create makes captures
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

// inside returns p relative to base when p is base or below it.
func inside(base, p string) (string, bool) {
	if base == "" {
		return "", false
	}
	ab, err1 := filepath.Abs(base)
	ap, err2 := filepath.Abs(p)
	if err1 != nil || err2 != nil {
		return "", false
	}
	r, err := filepath.Rel(ab, ap)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", false
	}
	return r, true
}

// captureLink is a capture's href on a page in directory base: a relative
// URL when the capture is inside base (the page and its captures move
// together), else an absolute file: URL. Both are built by net/url, which
// escapes the path, so they are safe as template.URL; html/template would
// replace a file: URL given as a string with #ZgotmplZ.
func captureLink(base, p string) template.URL {
	if r, ok := inside(base, p); ok {
		return template.URL((&url.URL{Path: filepath.ToSlash(r)}).String()) //nolint:gosec // built by net/url from a path
	}
	if base == "" && !filepath.IsAbs(p) {
		return template.URL((&url.URL{Path: filepath.ToSlash(p)}).String()) //nolint:gosec // built by net/url from a path
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		abs = p
	}
	return template.URL((&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()) //nolint:gosec // built by net/url from a path
}

// captureText is how the page names a capture: relative to the report's
// directory when inside it, else as given.
func captureText(base, p string) string {
	if r, ok := inside(base, p); ok {
		return filepath.ToSlash(r)
	}
	return p
}
