package strictyaml

import (
	"fmt"
	"reflect"
	"strings"
)

// SchemaURI is the JSON Schema dialect Schema produces.
const SchemaURI = "https://json-schema.org/draft/2020-12/schema"

// Schemer is implemented by types whose JSON Schema the generator cannot
// derive: Scalar and Unmarshaler types.
type Schemer interface {
	JSONSchema(g *Generator) map[string]any
}

// Generator builds JSON Schemas from Go types, collecting struct types in
// $defs so each is described once.
type Generator struct {
	defs  map[string]any
	names map[reflect.Type]string
}

// Schema returns the JSON Schema (draft 2020-12) of the file format whose
// document is root's type.
func Schema(root any, id, title, description string) map[string]any {
	g := &Generator{defs: map[string]any{}, names: map[reflect.Type]string{}}
	ref := g.Type(reflect.TypeOf(root))
	out := map[string]any{
		"$schema":     SchemaURI,
		"$id":         id,
		"title":       title,
		"description": description,
		"$defs":       g.defs,
	}
	for k, v := range ref {
		out[k] = v
	}
	return out
}

// Type returns the schema of t (a $ref for structs).
func (g *Generator) Type(t reflect.Type) map[string]any { return g.of(t, nil) }

func (g *Generator) of(t reflect.Type, f *field) map[string]any {
	s := g.bare(t, f)
	if f != nil {
		if f.doc != "" {
			s["description"] = f.doc
		}
		if f.example != "" {
			s["examples"] = []any{f.example}
		}
	}
	return s
}

func (g *Generator) bare(t reflect.Type, f *field) map[string]any {
	if sc, ok := reflect.New(t).Interface().(Schemer); ok {
		return copyMap(sc.JSONSchema(g))
	}
	switch t {
	case durationType:
		s := map[string]any{
			"type":    []any{"string", "integer"},
			"pattern": `^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`,
			"minimum": 0, "maximum": 0, // a bare number may only be 0
		}
		if f != nil && (f.min != nil || f.max != nil) {
			s["$comment"] = fmt.Sprintf("from %s to %s", fmtDurBound(f.min, "0s"), fmtDurBound(f.max, "any"))
		}
		return s
	case addrType:
		return map[string]any{"type": "string", "format": "ipv4"}
	case prefixType:
		if f != nil && f.ipv6 {
			return map[string]any{"type": "string", "pattern": `^[0-9a-fA-F:.]+/[0-9]{1,3}$`}
		}
		return map[string]any{"type": "string", "pattern": `^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$`}
	case addrPortType:
		return map[string]any{"type": "string", "pattern": `^[0-9]{1,3}(\.[0-9]{1,3}){3}:[0-9]{1,5}$`}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.bare(t.Elem(), f)
	case reflect.Struct:
		return map[string]any{"$ref": "#/$defs/" + g.define(t)}
	case reflect.Slice:
		if f != nil && f.keyed {
			s := map[string]any{"type": "object", "additionalProperties": g.of(t.Elem(), nil)}
			if si := infoOf(t.Elem()); si.key != nil && si.key.pattern != nil {
				s["propertyNames"] = map[string]any{"pattern": si.key.pattern.String()}
			}
			return s
		}
		var item *field
		if f != nil {
			c := *f
			c.doc, c.example = "", ""
			item = &c
		}
		return map[string]any{"type": "array", "items": g.of(t.Elem(), item)}
	case reflect.String:
		s := map[string]any{"type": "string"}
		if f != nil && len(f.enum) > 0 {
			enum := make([]any, len(f.enum))
			for i, e := range f.enum {
				enum[i] = e
			}
			s["enum"] = enum
		}
		if f != nil && f.pattern != nil {
			s["pattern"] = f.pattern.String()
		}
		return s
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo, hi := intRange(t.Kind())
		if f != nil && f.min != nil {
			lo = max(lo, *f.min)
		}
		if f != nil && f.max != nil {
			hi = min(hi, *f.max)
		}
		s := map[string]any{"type": "integer"}
		if lo > -1<<53 {
			s["minimum"] = lo
		}
		if hi < 1<<53 {
			s["maximum"] = hi
		}
		return s
	case reflect.Float32, reflect.Float64:
		s := map[string]any{"type": "number"}
		if f != nil && f.min != nil {
			s["minimum"] = *f.min
		}
		if f != nil && f.max != nil {
			s["maximum"] = *f.max
		}
		return s
	}
	panic(fmt.Sprintf("strictyaml: no schema for %s", t))
}

// define adds struct type t to $defs and returns its name.
func (g *Generator) define(t reflect.Type) string {
	if name, ok := g.names[t]; ok {
		return name
	}
	name := t.Name()
	for taken := true; taken; {
		taken = false
		for other, n := range g.names {
			if n == name && other != t {
				name = strings.ReplaceAll(t.PkgPath(), "/", ".") + "." + t.Name()
				taken = name == n
			}
		}
	}
	g.names[t] = name
	g.defs[name] = true // placeholder against recursion
	si := infoOf(t)
	props := map[string]any{}
	var required []any
	for _, f := range si.fields {
		props[f.name] = g.of(f.typ, f)
		if f.required {
			required = append(required, f.name)
		}
	}
	obj := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		obj["required"] = required
	}
	var all []any
	for _, grp := range si.groups {
		var alts []any
		for _, f := range si.fields {
			if f.oneof == grp {
				alts = append(alts, map[string]any{"required": []any{f.name}})
			}
		}
		all = append(all, map[string]any{"oneOf": alts})
	}
	if len(all) == 1 {
		obj["oneOf"] = all[0].(map[string]any)["oneOf"]
	} else if len(all) > 1 {
		obj["allOf"] = all
	}
	def := obj
	if si.shorthand != nil {
		short := g.bare(si.shorthand.typ, si.shorthand)
		short["description"] = "shorthand for {" + si.shorthand.name + ": VALUE}"
		def = map[string]any{"anyOf": []any{short, obj}}
	}
	if doc := typeDoc(t); doc != "" {
		def["description"] = doc
	}
	g.defs[name] = def
	return name
}

// typeDoc is a struct's description: its DocYAML method's answer, if any.
func typeDoc(t reflect.Type) string {
	if d, ok := reflect.New(t).Interface().(interface{ DocYAML() string }); ok {
		return d.DocYAML()
	}
	return ""
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
