package strictyaml

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var (
	_ Scalar  = (*Size)(nil)
	_ Schemer = (*Size)(nil)
	_ Scalar  = (*Fraction)(nil)
	_ Schemer = (*Fraction)(nil)
)

// Size is a number of bytes, written 65536, "64KiB", "64MiB", "1GB".
// Binary units (KiB, MiB, GiB) are powers of 1024, decimal ones (KB, MB,
// GB) powers of 1000.
type Size int64

// Expect implements Scalar.
func (*Size) Expect() string { return "a size such as 65536, 64KiB, 16MiB or 1GB" }

// sizeUnits are tried in order; the first suffix that matches decides.
var sizeUnits = []struct {
	s string
	m float64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1}, {"", 1}}

// UnmarshalText implements Scalar.
func (s *Size) UnmarshalText(b []byte) error {
	text := strings.TrimSpace(string(b))
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(text, u.s)
		if !ok {
			continue
		}
		num = strings.TrimSpace(num)
		if !isDecimal(num) {
			break
		}
		x, err := strconv.ParseFloat(num, 64)
		if err != nil {
			break
		}
		if v := x * u.m; v <= 1<<50 {
			*s = Size(v)
			return nil
		}
		return fmt.Errorf("size %q is larger than 1 PiB", text)
	}
	return fmt.Errorf("want %s, got %q", (*Size)(nil).Expect(), text)
}

// isDecimal reports whether s is digits with at most one decimal point
// between digits.
func isDecimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(t string) bool {
		if t == "" {
			return false
		}
		for i := 0; i < len(t); i++ {
			if t[i] < '0' || t[i] > '9' {
				return false
			}
		}
		return true
	}
	return digits(whole) && (!dot || digits(frac))
}

// String formats s with the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		s string
		m Size
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s >= u.m && s%u.m == 0 {
			return fmt.Sprintf("%d%s", s/u.m, u.s)
		}
	}
	return fmt.Sprintf("%dB", int64(s))
}

// JSONSchema implements Schemer.
func (*Size) JSONSchema(*Generator) map[string]any {
	return map[string]any{
		"type":    []any{"integer", "string"},
		"minimum": 0,
		"pattern": `^[0-9]+(\.[0-9]+)? ?(B|KiB|MiB|GiB|KB|kB|MB|GB)?$`,
	}
}

// Fraction is a probability or share, written as a number from 0 to 1 or
// a percentage: 0.01 and "1%" are the same.
type Fraction float64

// Expect implements Scalar.
func (*Fraction) Expect() string { return "a fraction from 0 to 1 or a percentage such as 1%" }

// UnmarshalText implements Scalar.
func (f *Fraction) UnmarshalText(b []byte) error {
	text := strings.TrimSpace(string(b))
	num, pct := strings.CutSuffix(text, "%")
	x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(x) {
		return fmt.Errorf("want %s, got %q", (*Fraction)(nil).Expect(), text)
	}
	if pct {
		x /= 100
	}
	if x < 0 || x > 1 {
		return fmt.Errorf("want %s, got %q (outside 0-100%%)", (*Fraction)(nil).Expect(), text)
	}
	*f = Fraction(x)
	return nil
}

// String formats f as a percentage.
func (f Fraction) String() string { return strconv.FormatFloat(float64(f)*100, 'g', -1, 64) + "%" }

// JSONSchema implements Schemer.
func (*Fraction) JSONSchema(*Generator) map[string]any {
	return map[string]any{
		"type":    []any{"number", "string"},
		"minimum": 0, "maximum": 1,
		"pattern": `^[0-9]+(\.[0-9]+)? ?%$`,
	}
}
