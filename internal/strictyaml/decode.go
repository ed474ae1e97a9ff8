package strictyaml

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
)

// Node is a YAML syntax tree node, as an Unmarshaler receives it.
type Node = ast.Node

// Positions maps each decoded value's path ("nodes.alice.network",
// "steps[3]", "" for the document) to where it starts in the file, so
// checks made after decoding can point at the value they refuse.
type Positions map[string]Pos

// Unmarshaler is implemented by types that decode themselves from a node.
type Unmarshaler interface {
	// UnmarshalStrictYAML decodes n, found at path, into the receiver,
	// reporting problems with d.Errorf and decoding parts with d.Decode.
	UnmarshalStrictYAML(d *Decoder, n Node, path string)
}

// Scalar is implemented by scalar types other than the built-in ones.
// UnmarshalText receives the scalar's text (a bare number's digits too)
// and its error is reported as it is, so it should say what was expected.
type Scalar interface {
	encoding.TextUnmarshaler
	// Expect describes valid values, e.g. "a size such as 64MiB".
	Expect() string
}

// Decoder decodes one file. It is handed to Unmarshalers.
type Decoder struct {
	file string
	pos  Positions
	c    *Collector
}

// File is the name of the file being decoded.
func (d *Decoder) File() string { return d.file }

// Decode parses data, the contents of file, into v, a pointer to a struct.
// It returns the position of every decoded value and, if anything is
// wrong, an *Errors listing every problem (it wraps ErrInvalid), or an
// error wrapping ErrTooLarge. v may be partly filled even then.
func Decode(file string, data []byte, v any) (Positions, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d", file, ErrTooLarge, len(data), MaxSize)
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("strictyaml: Decode needs a non-nil pointer")
	}
	d := &Decoder{file: file, pos: Positions{}, c: &Collector{}}
	body, err := parseDocument(data)
	if err != nil {
		d.syntaxError(err)
		return d.pos, d.c.Err()
	}
	d.Decode(body, rv.Elem(), "")
	return d.pos, d.c.Err()
}

// parseDocument parses data's single document and returns its body (nil
// for an empty file), turning a parser panic into an error.
func parseDocument(data []byte) (body ast.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			body, err = nil, fmt.Errorf("yaml parser failed: %v", r)
		}
	}()
	tks := lexer.Tokenize(string(data))
	if tk, msg := CheckShape(tks, LabShape); tk != nil {
		return nil, &yaml.SyntaxError{Message: msg, Token: tk}
	}
	// Duplicate keys are found while decoding, which knows the key's path
	// and goes on to report the file's other problems.
	f, err := parser.Parse(tks, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		return nil, err
	}
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			return nil, &yaml.SyntaxError{Message: "a lab file is one YAML document; remove the second", Token: doc.Body.GetToken()}
		}
		body = doc.Body
	}
	return body, nil
}

// dupKey matches the YAML parser's message for a repeated key.
var dupKey = regexp.MustCompile(`^mapping key ("(?:[^"\\]|\\.)*") already defined at \[(\d+):(\d+)\]$`)

// ExplainSyntax rewords a YAML parser message for a person editing the
// file and returns a hint on how to fix it, or "".
func ExplainSyntax(msg string) (string, string) {
	switch {
	case strings.Contains(msg, "\t"), strings.Contains(msg, "tab"):
		// The lexer quotes the tab itself, which prints as blank space.
		return strings.ReplaceAll(msg, "\t", `\t`), "YAML indents with spaces, never tabs"
	case strings.Contains(msg, "alias"), strings.Contains(msg, "anchor"):
		return msg, `a bare * or & starts a YAML alias or anchor; quote the value ("*")`
	}
	if m := dupKey.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("duplicate key %s, first at %s:%s", m[1], m[2], m[3]), "remove one of them"
	}
	return msg, ""
}

func (d *Decoder) syntaxError(err error) {
	var ye yaml.Error
	if errors.As(err, &ye) {
		var pos Pos
		if tk := ye.GetToken(); tk != nil && tk.Position != nil {
			pos = Pos{tk.Position.Line, tk.Position.Column}
		}
		msg, hint := ExplainSyntax(ye.GetMessage())
		d.c.Add(&Error{File: d.file, Pos: pos, Msg: "yaml: " + msg, Hint: hint})
		return
	}
	d.c.Add(&Error{File: d.file, Msg: "yaml: " + err.Error()})
}

// Errorf records a problem with n, found at path.
func (d *Decoder) Errorf(n Node, path, format string, args ...any) {
	d.HintErrorf(n, path, "", format, args...)
}

// HintErrorf records a problem with a hint on how to fix it.
func (d *Decoder) HintErrorf(n Node, path, hint, format string, args ...any) {
	pos := position(n)
	if pos.IsZero() {
		// An absent value (a missing key's mapping, an empty file): the
		// closest known position, or the file's start.
		if pos = d.pos[path]; pos.IsZero() {
			pos = Pos{1, 1}
		}
	}
	d.c.Add(&Error{File: d.file, Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// IsScalar reports whether n is a plain value: string, number, boolean.
func IsScalar(n Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.LiteralNode,
		*ast.InfinityNode, *ast.NanNode:
		return true
	}
	return false
}

// IsMapping reports whether n is a mapping.
func IsMapping(n Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return true
	}
	return false
}

// Decode decodes n, found at path, into v, which must be settable.
func (d *Decoder) Decode(n Node, v reflect.Value, path string) {
	d.decode(n, v, path, nil)
}

// Describe names what n is, for "want X, got Y" messages.
func Describe(n Node) string { return describe(n) }

func (d *Decoder) decode(n Node, v reflect.Value, path string, f *field) {
	if p := position(n); !p.IsZero() {
		d.pos[path] = p
	} else if _, ok := d.pos[path]; !ok {
		d.pos[path] = Pos{1, 1}
	}
	switch n.(type) {
	case *ast.AnchorNode, *ast.AliasNode:
		d.HintErrorf(n, path, "copy the value instead", "anchors and aliases are not supported")
		return
	case *ast.TagNode:
		d.HintErrorf(n, path, "remove the tag; the format says what type each value is", "YAML tags are not supported")
		return
	case *ast.MergeKeyNode:
		d.Errorf(n, path, "merge keys (<<) are not supported")
		return
	}
	if v.CanAddr() {
		if u, ok := v.Addr().Interface().(Unmarshaler); ok {
			u.UnmarshalStrictYAML(d, n, path)
			return
		}
	}
	t := v.Type()
	switch t {
	case durationType, addrType, prefixType, addrPortType:
		d.builtin(n, v, path, f)
		return
	}
	if v.CanAddr() {
		if s, ok := v.Addr().Interface().(Scalar); ok {
			text, isScalar := scalarText(n)
			if !isScalar {
				d.Errorf(n, path, "want %s, got %s", s.Expect(), describe(n))
				return
			}
			if err := s.UnmarshalText([]byte(text)); err != nil {
				d.Errorf(n, path, "%v", err)
			}
			return
		}
	}
	switch t.Kind() {
	case reflect.Pointer:
		// An empty value is no value, except for a struct, where it is
		// the empty mapping (whose required keys are then reported).
		if isNull(n) && t.Elem().Kind() != reflect.Struct {
			return
		}
		nv := reflect.New(t.Elem())
		d.decode(n, nv.Elem(), path, f)
		v.Set(nv)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if f != nil && f.keyed {
			d.decodeKeyed(n, v, path, f)
		} else {
			d.decodeList(n, v, path, f)
		}
	case reflect.String:
		d.decodeString(n, v, path, f)
	case reflect.Bool:
		b, ok := n.(*ast.BoolNode)
		if !ok {
			d.Errorf(n, path, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b.Value)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		d.decodeInt(n, v, path, f)
	case reflect.Float32, reflect.Float64:
		d.decodeFloat(n, v, path, f)
	default:
		panic(fmt.Sprintf("strictyaml: unsupported type %s at %s", t, path))
	}
}

func (d *Decoder) decodeStruct(n Node, v reflect.Value, path string) {
	si := infoOf(v.Type())
	var kvs []*ast.MappingValueNode
	switch m := n.(type) {
	case nil, *ast.NullNode:
		// An empty value is an empty mapping: only required keys matter.
	case *ast.MappingNode:
		kvs = m.Values
	case *ast.MappingValueNode:
		kvs = []*ast.MappingValueNode{m}
	default:
		if si.shorthand != nil && IsScalar(n) {
			d.decode(n, v.FieldByIndex(si.shorthand.index), path, si.shorthand)
			return
		}
		hint := ""
		if si.shorthand != nil {
			hint = fmt.Sprintf("write a %s, or a mapping with %s",
				expectOf(si.shorthand), keyList(si.fields))
		} else if len(si.fields) > 0 {
			hint = "keys: " + keyList(si.fields)
		}
		d.HintErrorf(n, path, hint, "want a mapping, got %s", describe(n))
		return
	}
	present := map[*field]bool{}
	seen := map[string]Pos{}
	for _, kv := range kvs {
		key, ok := keyString(kv.Key)
		if !ok {
			d.Errorf(kv.Key, path, "keys must be plain strings, got %s", describe(kv.Key))
			continue
		}
		if kv.Key.IsMergeKey() {
			d.Errorf(kv.Key, path, "merge keys (<<) are not supported")
			continue
		}
		if first, dup := seen[key]; dup {
			d.HintErrorf(kv.Key, join(path, key), "remove one of them",
				"duplicate key %q, first at %d:%d", key, first.Line, first.Col)
			continue
		}
		seen[key] = position(kv.Key)
		f := si.byName[key]
		if f == nil {
			d.unknownKey(kv.Key, path, key, si)
			continue
		}
		present[f] = true
		d.decode(kv.Value, v.FieldByIndex(f.index), join(path, key), f)
	}
	for _, f := range si.fields {
		if f.required && !present[f] {
			hint := ""
			if f.doc != "" {
				hint = fmt.Sprintf("%s: %s", f.name, firstSentence(f.doc))
			}
			d.HintErrorf(n, path, hint, "missing required key %q", f.name)
		}
	}
	for _, g := range si.groups {
		var members, set []string
		for _, f := range si.fields {
			if f.oneof != g {
				continue
			}
			members = append(members, f.name)
			if present[f] {
				set = append(set, f.name)
			}
		}
		switch {
		case len(set) == 0:
			d.HintErrorf(n, path, "one of: "+strings.Join(members, ", "), "want one %s key, got none", g)
		case len(set) > 1:
			d.HintErrorf(n, path, fmt.Sprintf("split it into %d entries", len(set)),
				"one %s per entry, got %s", g, strings.Join(set, " and "))
		}
	}
}

func (d *Decoder) unknownKey(n Node, path, key string, si *structInfo) {
	names := make([]string, 0, len(si.fields))
	for _, f := range si.fields {
		names = append(names, f.name)
	}
	hint := "known keys: " + strings.Join(names, ", ")
	if s := Suggest(key, names); s != "" {
		hint = fmt.Sprintf("did you mean %q? (%s)", s, hint)
	}
	d.HintErrorf(n, path, hint, "unknown key %q", key)
}

func (d *Decoder) decodeKeyed(n Node, v reflect.Value, path string, f *field) {
	var kvs []*ast.MappingValueNode
	switch m := n.(type) {
	case nil, *ast.NullNode:
		return
	case *ast.MappingNode:
		kvs = m.Values
	case *ast.MappingValueNode:
		kvs = []*ast.MappingValueNode{m}
	default:
		d.HintErrorf(n, path, fmt.Sprintf("write %s as a mapping from names to settings, e.g. %s", f.name, keyedExample(f)),
			"want a mapping of names, got %s", describe(n))
		return
	}
	et := v.Type().Elem()
	si := infoOf(et)
	out := reflect.MakeSlice(v.Type(), 0, len(kvs))
	seen := map[string]Pos{}
	for _, kv := range kvs {
		name, ok := keyString(kv.Key)
		if !ok || kv.Key.IsMergeKey() {
			d.Errorf(kv.Key, path, "names must be plain strings, got %s", describe(kv.Key))
			continue
		}
		p := join(path, name)
		if first, dup := seen[name]; dup {
			// Decoding it would overwrite the first one's positions.
			d.HintErrorf(kv.Key, p, "give each its own name, or remove one",
				"name %q is already declared at %d:%d", name, first.Line, first.Col)
			continue
		}
		seen[name] = position(kv.Key)
		d.pos[p] = position(kv.Key)
		if si.key != nil && si.key.pattern != nil && !si.key.pattern.MatchString(name) {
			d.HintErrorf(kv.Key, p, si.key.doc, "bad name %q", name)
		}
		e := reflect.New(et).Elem()
		if si.key != nil {
			e.FieldByIndex(si.key.index).SetString(name)
		}
		d.decode(kv.Value, e, p, nil)
		d.pos[p] = position(kv.Key)
		out = reflect.Append(out, e)
	}
	v.Set(out)
}

func (d *Decoder) decodeList(n Node, v reflect.Value, path string, f *field) {
	var items []ast.Node
	switch s := n.(type) {
	case nil, *ast.NullNode:
		return
	case *ast.SequenceNode:
		items = s.Values
	default:
		hint := ""
		if IsScalar(n) {
			hint = fmt.Sprintf("for one item write [%s]", n.String())
		}
		d.HintErrorf(n, path, hint, "want a list, got %s", describe(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), len(items), len(items))
	var ef *field
	if f != nil {
		// Item constraints (enum, pattern, bounds) apply to each element.
		c := *f
		c.keyed, c.required = false, false
		ef = &c
	}
	for i, item := range items {
		d.decode(item, out.Index(i), fmt.Sprintf("%s[%d]", path, i+1), ef)
	}
	v.Set(out)
}

func (d *Decoder) decodeString(n Node, v reflect.Value, path string, f *field) {
	s, ok := scalarText(n)
	if !ok {
		want := "a string"
		if f != nil && len(f.enum) > 0 {
			want = "one of " + strings.Join(f.enum, ", ")
		}
		d.Errorf(n, path, "want %s, got %s", want, describe(n))
		return
	}
	if f != nil && len(f.enum) > 0 && !contains(f.enum, s) {
		hint := "one of: " + strings.Join(f.enum, ", ")
		if sg := Suggest(s, f.enum); sg != "" {
			hint = fmt.Sprintf("did you mean %q? (%s)", sg, hint)
		}
		d.HintErrorf(n, path, hint, "unknown value %q", s)
		return
	}
	if f != nil && f.pattern != nil && !f.pattern.MatchString(s) {
		d.HintErrorf(n, path, firstSentence(f.doc), "bad value %q", s)
		return
	}
	v.SetString(s)
}

func (d *Decoder) decodeInt(n Node, v reflect.Value, path string, f *field) {
	in, ok := n.(*ast.IntegerNode)
	if !ok {
		hint := ""
		if s, isStr := n.(*ast.StringNode); isStr {
			if _, err := strconv.ParseInt(s.Value, 10, 64); err == nil {
				hint = "remove the quotes"
			}
		}
		d.HintErrorf(n, path, hint, "want an integer, got %s", describe(n))
		return
	}
	// The kind's limits are compared and printed as integers: through
	// float64, 2^63 would pass for an int64 and 2^64-1 print rounded.
	lo, hi := intLimits(v.Kind())
	loText, hiText := strconv.FormatInt(lo, 10), strconv.FormatUint(hi, 10)
	if f != nil && f.min != nil && *f.min > float64(lo) {
		loText = fmtNum(*f.min)
	}
	if f != nil && f.max != nil && *f.max < float64(hi) {
		hiText = fmtNum(*f.max)
	}
	inTags := func(x float64) bool {
		return f == nil || ((f.min == nil || x >= *f.min) && (f.max == nil || x <= *f.max))
	}
	switch val := in.Value.(type) {
	case int64:
		if val >= lo && (val < 0 || uint64(val) <= hi) && inTags(float64(val)) {
			if v.CanInt() {
				v.SetInt(val)
			} else {
				v.SetUint(uint64(val))
			}
			return
		}
	case uint64:
		if val <= hi && inTags(float64(val)) {
			if v.CanUint() {
				v.SetUint(val)
			} else {
				v.SetInt(int64(val))
			}
			return
		}
	}
	d.Errorf(n, path, "want an integer from %s to %s, got %s", loText, hiText, in.GetToken().Value)
}

func (d *Decoder) decodeFloat(n Node, v reflect.Value, path string, f *field) {
	var x float64
	switch val := n.(type) {
	case *ast.FloatNode:
		x = val.Value
	case *ast.IntegerNode:
		switch i := val.Value.(type) {
		case int64:
			x = float64(i)
		case uint64:
			x = float64(i)
		}
	default:
		d.Errorf(n, path, "want a number, got %s", describe(n))
		return
	}
	if f != nil && ((f.min != nil && x < *f.min) || (f.max != nil && x > *f.max)) {
		d.Errorf(n, path, "want a number from %s to %s, got %s", fmtBound(f.min, "-∞"), fmtBound(f.max, "∞"), n.GetToken().Value)
		return
	}
	v.SetFloat(x)
}

func fmtBound(b *float64, none string) string {
	if b == nil {
		return none
	}
	return fmtNum(*b)
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// isNull reports whether n is absent or an explicit null.
func isNull(n Node) bool {
	switch n.(type) {
	case nil, *ast.NullNode:
		return true
	}
	return false
}

// scalarText returns a scalar's text; numbers and booleans as written.
func scalarText(n Node) (string, bool) {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true
		}
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return n.GetToken().Value, true
	}
	return "", false
}

// keyString returns a mapping key's text if it is a plain scalar.
func keyString(k ast.MapKeyNode) (string, bool) {
	if k == nil {
		return "", false
	}
	switch k.(type) {
	case *ast.StringNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return scalarText(k)
	}
	return "", false
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func keyList(fields []*field) string {
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		names = append(names, f.name)
	}
	return strings.Join(names, ", ")
}

func keyedExample(f *field) string {
	if f.example != "" {
		return f.example
	}
	return f.name + ": {NAME: {...}}"
}

// expectOf describes what a shorthand scalar field accepts.
func expectOf(f *field) string {
	switch {
	case len(f.enum) > 0:
		return "value (" + strings.Join(f.enum, ", ") + ")"
	case f.typ.Kind() == reflect.String:
		return "string"
	}
	return "value"
}
