package policy

import (
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/latticelab/lattice/internal/strictyaml"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
)

// MaxSize bounds a policy file. A policy is a short list of rules; a larger
// file is a mistake (or an attack on the parser), not a policy.
const MaxSize = 1 << 20

// maxErrors bounds how many problems one error reports, so a wrong file
// passed by mistake does not flood the log.
const maxErrors = 50

// Load reads and parses the policy file at path. Errors name the file by
// path, rule labels in decisions by its base name.
func Load(path string) (*Policy, error) {
	data, _, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readFile reads path, refusing more than MaxSize bytes, and stats what it
// read.
func readFile(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("policy: %w", err)
	}
	if info.IsDir() {
		// Reading it would fail with "read D: read D: is a directory".
		return nil, nil, fmt.Errorf("policy: read %s: %w", path, errIsDir)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	if len(data) > MaxSize {
		return nil, nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrTooLarge, path, MaxSize)
	}
	return data, info, nil
}

// Parse parses a policy file's contents; name is used in error positions
// (name:line:col) and, by its base name, in rule labels. Every problem in
// the file is reported at once: the error wraps ErrInvalid and a *PosError
// per problem (the first 50), one per line of its message.
func Parse(name string, data []byte) (*Policy, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrTooLarge, name, MaxSize)
	}
	ps := &parseState{file: name, label: filepath.Base(name)}
	if name == "" {
		ps.label = "policy"
	}
	p := &Policy{
		source:  name,
		digest:  hexDigest(sha256.Sum256(data)),
		overlay: DefaultOverlay,
	}
	f, err := parseYAML(data)
	if err != nil {
		ps.syntaxError(err)
	} else {
		ps.document(f, p)
	}
	if len(ps.errs) > 0 {
		n := len(ps.errs) + ps.dropped
		slices.SortStableFunc(ps.errs, func(a, b *PosError) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
		})
		errs := make([]error, 0, len(ps.errs)+1)
		for _, e := range ps.errs {
			errs = append(errs, e)
		}
		if ps.dropped > 0 {
			errs = append(errs, fmt.Errorf("%s: %d more problems not shown", name, ps.dropped))
		}
		summary := "1 problem"
		if n > 1 {
			summary = fmt.Sprintf("%d problems", n)
		}
		return nil, fmt.Errorf("%w: %s in %s:\n%w", ErrInvalid, summary, name, errors.Join(errs...))
	}
	p.classify()
	return p, nil
}

// parseYAML runs the YAML parser, turning a panic in it into an error: the
// Watcher parses whatever lands in the file and must outlive a bad one.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("yaml parser failed: %v", r)
		}
	}()
	tks := lexer.Tokenize(string(data))
	if tk, msg := strictyaml.CheckShape(tks, policyShape); tk != nil {
		return nil, &yaml.SyntaxError{Message: msg, Token: tk}
	}
	return parser.Parse(tks, 0)
}

type parseState struct {
	file    string // for positions
	label   string // for rule labels
	errs    []*PosError
	dropped int
}

func (ps *parseState) errorAt(line, col int, format string, args ...any) {
	if len(ps.errs) >= maxErrors {
		ps.dropped++
		return
	}
	ps.errs = append(ps.errs, &PosError{File: ps.file, Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

func (ps *parseState) errorf(n ast.Node, format string, args ...any) {
	line, col := position(n)
	ps.errorAt(line, col, format, args...)
}

func (ps *parseState) syntaxError(err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		line, col := 0, 0
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			line, col = tk.Position.Line, tk.Position.Column
		}
		msg := ye.GetMessage()
		if strings.Contains(msg, "alias") {
			// The likeliest cause in a policy is allow: * unquoted.
			msg += ` (a bare * starts a YAML alias; write any or "*")`
		} else if m, hint := strictyaml.ExplainSyntax(msg); hint != "" {
			msg = m + "; " + hint
		}
		ps.errorAt(line, col, "yaml: %s", msg)
		return
	}
	ps.errorAt(0, 0, "yaml: %v", err)
}

// position returns where n starts in the file, 1-based, or 0, 0.
func position(n ast.Node) (line, col int) {
	switch v := n.(type) {
	case nil:
		return 0, 0
	case *ast.DocumentNode: // GetToken dereferences a nil Start.
		if v.Body != nil {
			return position(v.Body)
		}
		if v.Start != nil && v.Start.Position != nil {
			return v.Start.Position.Line, v.Start.Position.Column
		}
		return 0, 0
	case *ast.MappingNode: // Its token is the first ':', not the first key.
		if len(v.Values) > 0 {
			return position(v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return position(v.Key)
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line, tk.Position.Column
	}
	return 0, 0
}

// policyShape bounds a policy's shape far beyond any real one (a policy
// nests 4 levels, has at most 4 keys per mapping and is one document), so a
// Watcher never hangs the YAML parser on a bad file.
var policyShape = strictyaml.Shape{FlowDepth: 16, LineDashes: 4, MapKeys: 64, DocMarkers: 8, What: "a policy"}

// describe names what n is, for "want X, got Y" messages, saying which
// YAML features a policy does not take.
func describe(n ast.Node) string {
	switch n.(type) {
	case *ast.AnchorNode, *ast.AliasNode:
		return "an anchor or alias (not supported)"
	case *ast.TagNode:
		return "a tagged value (tags are not supported)"
	}
	return strictyaml.Describe(n)
}

// didYouMean is "did you mean "KEY"? " naming the key closest to key, or
// "" when none is close.
func didYouMean(key string, keys ...string) string {
	if s := strictyaml.Suggest(key, keys); s != "" {
		return fmt.Sprintf("did you mean %q? ", s)
	}
	return ""
}

// str returns n's value if n is a plain string.
func str(n ast.Node) (string, bool) {
	s, ok := n.(*ast.StringNode)
	if !ok {
		return "", false
	}
	return s.Value, true
}

// mapping returns n's key/value pairs, reporting keys that are not plain
// strings. what names n in messages.
func (ps *parseState) mapping(n ast.Node, what string) ([]*ast.MappingValueNode, bool) {
	var kvs []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		kvs = m.Values
	case *ast.MappingValueNode: // how the parser may hand over a one-key mapping
		kvs = []*ast.MappingValueNode{m}
	default:
		ps.errorf(n, "%s: want a mapping, got %s", what, describe(n))
		return nil, false
	}
	for _, kv := range kvs {
		if _, ok := str(kv.Key); !ok {
			ps.errorf(kv.Key, "%s: keys must be plain strings, got %s", what, describe(kv.Key))
			return nil, false
		}
	}
	return kvs, true
}

// document checks the file's one document and fills p from it.
func (ps *parseState) document(f *ast.File, p *Policy) {
	var body ast.Node
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			ps.errorf(doc, "a policy is one YAML document; remove the second")
			return
		}
		body = doc.Body
	}
	if body == nil {
		return // empty file: no rules, default deny
	}
	kvs, ok := ps.mapping(body, "policy")
	if !ok {
		return
	}
	for _, kv := range kvs {
		key, _ := str(kv.Key)
		switch key {
		case "version":
			if v, ok := kv.Value.(*ast.IntegerNode); !ok || v.GetToken().Value != "1" {
				ps.errorf(kv.Value, "version: want 1, got %s", describe(kv.Value))
			}
		case "default":
			switch s, _ := str(kv.Value); s {
			case "allow":
				p.defaultAllow = true
			case "deny":
				p.defaultAllow = false
			default:
				ps.errorf(kv.Value, "default: want allow or deny, got %s", describe(kv.Value))
			}
		case "allow_metadata":
			if b, ok := kv.Value.(*ast.BoolNode); ok {
				p.allowMetadata = b.Value
			} else {
				ps.errorf(kv.Value, "allow_metadata: want true or false, got %s", describe(kv.Value))
			}
		case "rules":
			ps.rules(kv.Value, p)
		default:
			ps.errorf(kv.Key, "unknown key %q; %swant version, default, allow_metadata or rules", key,
				didYouMean(key, "version", "default", "allow_metadata", "rules"))
		}
	}
}

func (ps *parseState) rules(n ast.Node, p *Policy) {
	if _, ok := n.(*ast.NullNode); ok {
		return // "rules:" with every rule commented out
	}
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		ps.errorf(n, "rules: want a list of rules, got %s", describe(n))
		return
	}
	for i, item := range seq.Values {
		p.rules = append(p.rules, ps.rule(item, i+1)...)
	}
}

// rule parses the rules list's idx'th (1-based) entry into one rule per
// target.
func (ps *parseState) rule(n ast.Node, idx int) []rule {
	what := fmt.Sprintf("rule %d", idx)
	kvs, ok := ps.mapping(n, what)
	if !ok {
		return nil
	}
	var (
		r          rule
		targets    ast.Node
		actionKey  ast.Node
		portsNode  ast.Node
		nerrBefore = len(ps.errs) + ps.dropped
	)
	for _, kv := range kvs {
		key, _ := str(kv.Key)
		switch key {
		case "allow", "deny":
			if actionKey != nil {
				ps.errorf(kv.Key, "%s: has both allow and deny; a rule does one", what)
				continue
			}
			actionKey, targets, r.allow = kv.Key, kv.Value, key == "allow"
		case "ports":
			portsNode = kv.Value
			r.ports = ps.ports(kv.Value, what)
		case "proto":
			switch s, _ := str(kv.Value); s {
			case "any":
				r.proto = ProtoAny
			case "tcp":
				r.proto = TCP
			case "udp":
				r.proto = UDP
			case "icmp":
				r.proto = ICMP
			default:
				ps.errorf(kv.Value, "%s: proto: want tcp, udp, icmp or any, got %s", what, describe(kv.Value))
			}
		default:
			ps.errorf(kv.Key, "%s: unknown key %q; %swant allow or deny, and optionally ports and proto", what, key,
				didYouMean(key, "allow", "deny", "ports", "proto"))
		}
	}
	if actionKey == nil {
		ps.errorf(n, "%s: want allow: or deny: naming a destination", what)
	}
	if portsNode != nil && r.proto == ICMP {
		ps.errorf(portsNode, "%s: ports need proto tcp, udp or any; icmp has no ports", what)
	}
	var out []rule
	if actionKey != nil {
		out = ps.targets(targets, what, r)
	}
	if len(ps.errs)+ps.dropped != nerrBefore {
		return nil
	}
	line, _ := position(actionKey)
	for i := range out {
		out[i].decision = Decision{Allow: out[i].allow, Rule: out[i].label(ps.label, line)}
	}
	return out
}

// targets parses an allow/deny value, one target or a list of them, into
// copies of r.
func (ps *parseState) targets(n ast.Node, what string, r rule) []rule {
	var items []ast.Node
	switch v := n.(type) {
	case *ast.SequenceNode:
		if len(v.Values) == 0 {
			ps.errorf(n, "%s: empty destination list", what)
		}
		items = v.Values
	default:
		items = []ast.Node{n}
	}
	var out []rule
	for _, item := range items {
		s, ok := str(item)
		if !ok {
			ps.errorf(item, "%s: want an IP address, CIDR, peer:NAME or any, got %s", what, describe(item))
			continue
		}
		t := r
		if msg := parseTarget(s, &t); msg != "" {
			ps.errorf(item, "%s: %s", what, msg)
			continue
		}
		out = append(out, t)
	}
	return out
}

// parseTarget fills r's target from s, or returns what is wrong with s.
func parseTarget(s string, r *rule) string {
	switch {
	case s == "any" || s == "*":
		r.kind = targetAny
		return ""
	case s == "peer:*":
		r.kind = targetAllPeers
		return ""
	case strings.HasPrefix(s, "peer:"):
		name := s[len("peer:"):]
		if !validPeerName(name) {
			return fmt.Sprintf("%q: a peer name is 1-253 letters, digits, '.', '-' or '_'", s)
		}
		r.kind, r.peer = targetPeer, name
		return ""
	case strings.Contains(s, "/"):
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Sprintf("%q is not a CIDR prefix", s)
		}
		if pfx.Addr().Is4In6() {
			return fmt.Sprintf("%q: write IPv4 prefixes in IPv4 form", s)
		}
		if m := pfx.Masked(); m != pfx {
			return fmt.Sprintf("%q has bits set past the prefix length; did you mean %s?", s, m)
		}
		r.kind, r.prefix = targetPrefix, pfx
		return ""
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return fmt.Sprintf("want an IP address, CIDR, peer:NAME or any, got %q (host names are not supported)", s)
	}
	if addr.Zone() != "" {
		return fmt.Sprintf("%q: zones are not supported", s)
	}
	if addr.Is4In6() {
		return fmt.Sprintf("%q: write IPv4 addresses in IPv4 form", s)
	}
	r.kind, r.prefix = targetPrefix, netip.PrefixFrom(addr, addr.BitLen())
	return ""
}

func validPeerName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// ports parses a ports value: a port, a "LO-HI" range, or a list of them.
func (ps *parseState) ports(n ast.Node, what string) []portRange {
	var items []ast.Node
	switch v := n.(type) {
	case *ast.SequenceNode:
		if len(v.Values) == 0 {
			ps.errorf(n, "%s: ports: empty list; omit ports to match every port", what)
			return nil
		}
		items = v.Values
	default:
		items = []ast.Node{n}
	}
	var out []portRange
	for _, item := range items {
		var text string
		switch v := item.(type) {
		case *ast.IntegerNode:
			text = v.GetToken().Value
		case *ast.StringNode:
			text = v.Value
		default:
			ps.errorf(item, "%s: ports: want a port (1-65535) or a range \"LO-HI\", got %s", what, describe(item))
			continue
		}
		pr, msg := parsePortRange(text)
		if msg != "" {
			ps.errorf(item, "%s: ports: %s", what, msg)
			continue
		}
		out = append(out, pr)
	}
	return out
}

func parsePortRange(s string) (portRange, string) {
	a, b, ok := strictyaml.ParsePortRange(s)
	switch {
	case !ok:
		return portRange{}, fmt.Sprintf("want a port (1-65535) or a range \"LO-HI\", got %q", s)
	case a > b:
		return portRange{}, fmt.Sprintf("range %q is reversed; write %d-%d", s, b, a)
	}
	return portRange{lo: a, hi: b}, ""
}
