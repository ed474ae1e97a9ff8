package deploy

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"k8s.io/apimachinery/pkg/api/resource"
)

// quantityFinder finds the first resource quantity in a document that
// Kubernetes would refuse: a value under a "limits" or "requests" map.
// The JSON decoder's error for one ("quantities must match the regular
// expression ...") names neither the field nor the value, so the
// document is walked again for its position (line and col 1-based, line
// within the document).
type quantityFinder struct {
	found      bool
	line, col  int
	key, value string
}

func (v *quantityFinder) Visit(n ast.Node) ast.Visitor {
	if v.found {
		return nil
	}
	mv, ok := n.(*ast.MappingValueNode)
	if !ok {
		return v
	}
	if k := mv.Key.String(); k != "limits" && k != "requests" {
		return v
	}
	var entries []*ast.MappingValueNode
	switch m := mv.Value.(type) {
	case *ast.MappingNode:
		entries = m.Values
	case *ast.MappingValueNode:
		entries = []*ast.MappingValueNode{m}
	default:
		return v
	}
	for _, e := range entries {
		s := scalarText(e.Value)
		if _, err := resource.ParseQuantity(s); err != nil {
			tk := e.Value.GetToken()
			v.found, v.line, v.col = true, tk.Position.Line, tk.Position.Column
			v.key, v.value = e.Key.String(), s
			return nil
		}
	}
	return nil
}

// scalarText is a scalar's value as the JSON conversion sees it (a
// quoted string unquoted, a number as written).
func scalarText(n ast.Node) string {
	switch s := n.(type) {
	case *ast.StringNode:
		return s.Value
	case nil:
		return ""
	default:
		return n.GetToken().Value
	}
}

// quantityError locates a decoding error about a resource quantity:
// "file:line:col: memory: "12xyz" is not a Kubernetes quantity ...". It
// reports false for any other error, or when the value is not found.
func quantityError(file string, doc document, err error) (error, bool) {
	msg := err.Error()
	if !strings.Contains(msg, resource.ErrFormatWrong.Error()) && !strings.Contains(msg, resource.ErrNumeric.Error()) &&
		!strings.Contains(msg, resource.ErrSuffix.Error()) {
		return nil, false
	}
	v := &quantityFinder{}
	if f, perr := parser.ParseBytes(doc.text, 0); perr == nil { // it did parse as YAML, once
		for _, d := range f.Docs {
			if d.Body != nil && !v.found {
				ast.Walk(v, d.Body)
			}
		}
	}
	if !v.found {
		return nil, false
	}
	return fmt.Errorf("%s:%d:%d: %s: %q is not a Kubernetes quantity (a number with an optional suffix: 100m, 64Mi, 2, 1.5G)", file, doc.line+v.line-1, v.col, v.key, v.value), true
}
