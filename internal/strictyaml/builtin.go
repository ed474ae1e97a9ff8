package strictyaml

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// builtin decodes the standard library types lab files use.
func (d *Decoder) builtin(n Node, v reflect.Value, path string, f *field) {
	switch v.Type() {
	case durationType:
		dur, ok := d.duration(n, path)
		if !ok {
			return
		}
		if f != nil && ((f.min != nil && float64(dur) < *f.min) || (f.max != nil && float64(dur) > *f.max)) {
			d.Errorf(n, path, "want a duration from %s to %s, got %s", fmtDurBound(f.min, "0s"), fmtDurBound(f.max, "any"), dur)
			return
		}
		v.SetInt(int64(dur))
	case addrType:
		s, ok := n.(*ast.StringNode)
		if !ok {
			d.Errorf(n, path, "want an IPv4 address such as 192.168.1.10, got %s", describe(n))
			return
		}
		a, msg := ParseAddr(s.Value)
		if msg != "" {
			d.Errorf(n, path, "%s", msg)
			return
		}
		v.Set(reflect.ValueOf(a))
	case prefixType:
		s, ok := n.(*ast.StringNode)
		if !ok {
			d.Errorf(n, path, "want a CIDR prefix such as 192.168.1.0/24, got %s", describe(n))
			return
		}
		p, msg := ParsePrefix(s.Value)
		if f != nil && f.ipv6 && p.Addr().Is6() && !p.Addr().Is4In6() {
			msg = ""
			if p.Masked() != p {
				msg = fmt.Sprintf("%q has host bits set; did you mean %s?", s.Value, p.Masked())
			}
		}
		if msg != "" {
			d.Errorf(n, path, "%s", msg)
			return
		}
		v.Set(reflect.ValueOf(p))
	case addrPortType:
		s, ok := n.(*ast.StringNode)
		if !ok {
			d.Errorf(n, path, "want ADDRESS:PORT such as 203.0.113.100:3478, got %s", describe(n))
			return
		}
		ap, err := netip.ParseAddrPort(s.Value)
		if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
			d.Errorf(n, path, "want an IPv4 ADDRESS:PORT such as 203.0.113.100:3478 (port 1-65535), got %q", s.Value)
			return
		}
		v.Set(reflect.ValueOf(ap))
	}
}

func fmtDurBound(b *float64, none string) string {
	if b == nil {
		return none
	}
	return time.Duration(*b).String()
}

// duration parses a Go duration string; a bare 0 is allowed, other bare
// numbers are refused because their unit would be a guess.
func (d *Decoder) duration(n Node, path string) (time.Duration, bool) {
	const want = "a duration such as 500ms, 3s or 1m30s"
	switch v := n.(type) {
	case *ast.IntegerNode:
		if text := v.GetToken().Value; text == "0" {
			return 0, true
		} else {
			d.HintErrorf(n, path, fmt.Sprintf("add a unit: %ss or %sms", text, text), "want %s, got number %s", want, text)
		}
		return 0, false
	case *ast.StringNode:
		dur, err := time.ParseDuration(strings.TrimSpace(v.Value))
		if err != nil {
			d.HintErrorf(n, path, "units: ns, us, ms, s, m, h", "want %s, got %q", want, v.Value)
			return 0, false
		}
		if dur < 0 {
			d.Errorf(n, path, "want %s, got the negative %s", want, v.Value)
			return 0, false
		}
		return dur, true
	}
	d.Errorf(n, path, "want %s, got %s", want, describe(n))
	return 0, false
}

// ParseAddr parses an IPv4 address, or returns what is wrong with s.
func ParseAddr(s string) (netip.Addr, string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return a, fmt.Sprintf("want an IPv4 address such as 192.168.1.10, got %q", s)
	case a.Is4In6():
		return a, fmt.Sprintf("%q: write IPv4 addresses in IPv4 form (%s)", s, a.Unmap())
	case !a.Is4():
		return a, fmt.Sprintf("%q is IPv6: this field takes IPv4 only", s)
	}
	return a, ""
}

// ParsePrefix parses an IPv4 CIDR prefix with no host bits set, or returns
// what is wrong with s.
func ParsePrefix(s string) (netip.Prefix, string) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		if _, aerr := netip.ParseAddr(s); aerr == nil {
			return p, fmt.Sprintf("%q has no prefix length; write e.g. %s/24", s, s)
		}
		return p, fmt.Sprintf("want a CIDR prefix such as 192.168.1.0/24, got %q", s)
	case !p.Addr().Is4():
		return p, fmt.Sprintf("%q is IPv6: this field takes IPv4 only (IPv6 prefixes go in cidr6)", s)
	case p.Masked() != p:
		return p, fmt.Sprintf("%q has host bits set; did you mean %s?", s, p.Masked())
	}
	return p, ""
}

// position returns where n starts in the file, or zero.
func position(n Node) Pos {
	switch v := n.(type) {
	case nil:
		return Pos{}
	case *ast.DocumentNode:
		if v.Body != nil {
			return position(v.Body)
		}
		return Pos{}
	case *ast.MappingNode: // its token is the first ':', not the first key
		if len(v.Values) > 0 {
			return position(v.Values[0].Key)
		}
		if v.Start != nil && v.Start.Position != nil {
			return Pos{v.Start.Position.Line, v.Start.Position.Column}
		}
		return Pos{}
	case *ast.MappingValueNode:
		return position(v.Key)
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return Pos{tk.Position.Line, tk.Position.Column}
	}
	return Pos{}
}

// PositionOf returns where n starts.
func PositionOf(n Node) Pos { return position(n) }

// describe names what n is, for "want X, got Y" messages.
func describe(n Node) string {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return "nothing"
	case *ast.StringNode:
		return strconv.Quote(v.Value)
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "number " + v.GetToken().Value
	case *ast.BoolNode:
		return "boolean " + v.GetToken().Value
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.AnchorNode, *ast.AliasNode:
		return "an anchor or alias"
	case *ast.TagNode:
		return "a tagged value"
	case *ast.LiteralNode:
		return "a block scalar"
	}
	return strings.ToLower(strings.TrimSuffix(n.Type().String(), "Type"))
}

// Suggest returns the candidate closest to s when it is close enough to be
// a likely typo (at most a third of its letters differ), or "".
func Suggest(s string, candidates []string) string {
	best, bestDist := "", len(s)/3+1
	if bestDist > 3 {
		bestDist = 3
	}
	for _, c := range candidates {
		if dist := levenshtein(strings.ToLower(s), strings.ToLower(c)); dist <= bestDist && s != c {
			if dist < bestDist || best == "" {
				best, bestDist = c, dist
			}
		}
	}
	return best
}

func levenshtein(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30 // not a typo of a key
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ParsePort parses a port number from 1 to 65535 (spaces around it
// allowed, no sign).
func ParsePort(s string) (uint16, bool) {
	s = strings.TrimSpace(s)
	if s == "" || s[0] == '+' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

// ParsePortRange parses a port or an inclusive LO-HI range. ok is false
// when either end is no port; a reversed range parses with lo > hi, for
// the caller to report.
func ParsePortRange(s string) (lo, hi uint16, ok bool) {
	a, b, isRange := strings.Cut(s, "-")
	lo, ok = ParsePort(a)
	hi = lo
	if ok && isRange {
		hi, ok = ParsePort(b)
	}
	return lo, hi, ok
}
