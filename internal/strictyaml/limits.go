package strictyaml

import (
	"fmt"

	"github.com/goccy/go-yaml/token"
)

// MaxSize bounds a file. Lab files are at most a few hundred lines (a
// 100-node topology uses count:, not 100 entries); a larger file is a
// mistake or an attack on the parser.
const MaxSize = 1 << 20

// Shape bounds a document's shape, checked on its tokens before the YAML
// parser runs: the parser takes time quadratic in the nesting depth of flow
// collections, in the keys of one block mapping and in the number of
// documents, and 1 MiB of "[" would take it minutes. Policy files and lab
// files share the check with their own bounds.
type Shape struct {
	FlowDepth  int // [ and { nesting
	LineDashes int // "- - -": block lists nested on one line
	MapKeys    int // keys of one block mapping
	DocMarkers int // "---" and "..."
	Tokens     int // if zero, no bound
	// What names the kind of file in messages: "a lab file", "a policy".
	What string
}

// LabShape bounds lab files, far beyond any real one (1000 keys of one
// mapping parse in 0.02 s).
var LabShape = Shape{FlowDepth: 32, LineDashes: 8, MapKeys: 1000, DocMarkers: 2, Tokens: 200_000, What: "a lab file"}

// CheckShape returns the token where tks exceeds a bound of lim, and how.
func CheckShape(tks token.Tokens, lim Shape) (*token.Token, string) {
	type level struct{ col, keys int }
	var (
		flow     int
		stack    []level // open block mappings, by their keys' column
		dashLine int
		dashes   int
		markers  int
		prev     *token.Token
	)
	if lim.Tokens > 0 && len(tks) > lim.Tokens {
		return tks[lim.Tokens], fmt.Sprintf("more than %d tokens; %s is far smaller", lim.Tokens, lim.What)
	}
	for _, tk := range tks {
		if tk.Position == nil || tk.Type == token.CommentType {
			continue
		}
		switch tk.Type {
		case token.DocumentHeaderType, token.DocumentEndType:
			if markers++; markers > lim.DocMarkers {
				return tk, fmt.Sprintf("more than %d document markers; %s is one YAML document", lim.DocMarkers, lim.What)
			}
			stack = stack[:0]
		case token.SequenceStartType, token.MappingStartType:
			flow++
			if flow > lim.FlowDepth {
				return tk, fmt.Sprintf("nested deeper than %d levels", lim.FlowDepth)
			}
		case token.SequenceEndType, token.MappingEndType:
			flow = max(flow-1, 0)
		case token.SequenceEntryType:
			if flow > 0 {
				break
			}
			if tk.Position.Line != dashLine {
				dashLine, dashes = tk.Position.Line, 0
			}
			if dashes++; dashes > lim.LineDashes {
				return tk, fmt.Sprintf("more than %d lists nested on one line", lim.LineDashes)
			}
		case token.MappingValueType:
			if flow > 0 || prev == nil || prev.Position.Line != tk.Position.Line {
				break
			}
			// A block mapping's keys share a column; a token left of it
			// (a "-", a parent's key) ends the mapping.
			col := prev.Position.Column
			for len(stack) > 0 && stack[len(stack)-1].col > col {
				stack = stack[:len(stack)-1]
			}
			if n := len(stack); n > 0 && stack[n-1].col == col {
				if stack[n-1].keys++; stack[n-1].keys > lim.MapKeys {
					return prev, fmt.Sprintf("more than %d keys in one mapping", lim.MapKeys)
				}
			} else {
				stack = append(stack, level{col: col, keys: 1})
			}
		}
		if flow == 0 {
			for len(stack) > 0 && stack[len(stack)-1].col > tk.Position.Column {
				stack = stack[:len(stack)-1]
			}
		}
		prev = tk
	}
	return nil, ""
}
