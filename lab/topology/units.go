package topology

import (
	"fmt"

	"github.com/latticelab/lattice/internal/strictyaml"
	"github.com/latticelab/lattice/lab/link"
	"github.com/latticelab/lattice/lab/nat"
)

var (
	_ strictyaml.Scalar  = (*Rate)(nil)
	_ strictyaml.Schemer = (*Rate)(nil)
	_ strictyaml.Scalar  = (*PortRange)(nil)
	_ strictyaml.Schemer = (*PortRange)(nil)
)

// Rate is a bandwidth: "100Mbit", "1.5Gbit", "500kbit", or bits per second.
type Rate link.Rate

// Expect implements strictyaml.Scalar.
func (*Rate) Expect() string { return "a bandwidth such as 100Mbit, 1.5Gbit or 500kbit" }

// UnmarshalText implements strictyaml.Scalar.
func (r *Rate) UnmarshalText(b []byte) error {
	v, err := link.ParseRate(string(b))
	if err != nil || v <= 0 {
		return fmt.Errorf("want %s, got %q", r.Expect(), b)
	}
	*r = Rate(v)
	return nil
}

// String formats r in the largest unit that keeps it whole.
func (r Rate) String() string {
	for _, u := range []struct {
		s string
		m link.Rate
	}{{"Gbit", link.Gbit}, {"Mbit", link.Mbit}, {"kbit", link.Kbit}} {
		if link.Rate(r) >= u.m && link.Rate(r)%u.m == 0 {
			return fmt.Sprintf("%d%s", link.Rate(r)/u.m, u.s)
		}
	}
	return fmt.Sprintf("%dbit", r)
}

// JSONSchema implements strictyaml.Schemer.
func (*Rate) JSONSchema(*strictyaml.Generator) map[string]any {
	return map[string]any{
		"type":    []any{"integer", "string"},
		"minimum": 1,
		"pattern": `^[0-9]+(\.[0-9]+)? ?([kKmMgGtT])?(bit|bps)?$`,
	}
}

// PortRange is a port or an inclusive LO-HI range.
type PortRange nat.PortRange

// Expect implements strictyaml.Scalar.
func (*PortRange) Expect() string { return "a port (1-65535) or a range LO-HI such as 8000-8999" }

// UnmarshalText implements strictyaml.Scalar.
func (p *PortRange) UnmarshalText(b []byte) error {
	s := string(b)
	a, c, ok := strictyaml.ParsePortRange(s)
	switch {
	case !ok:
		return fmt.Errorf("want %s, got %q", p.Expect(), s)
	case a > c:
		return fmt.Errorf("port range %q is reversed; write %d-%d", s, c, a)
	}
	*p = PortRange{First: a, Last: c}
	return nil
}

// JSONSchema implements strictyaml.Schemer.
func (*PortRange) JSONSchema(*strictyaml.Generator) map[string]any {
	return map[string]any{
		"type":    []any{"integer", "string"},
		"minimum": 1, "maximum": 65535,
		"pattern": `^[0-9]{1,5}(-[0-9]{1,5})?$`,
	}
}
