package strictyaml

import (
	"fmt"

	"github.com/goccy/go-yaml/token"
)

// MaxSize bounds a file. Lab files are at most a few hundred lines (a
// 100-node topology uses count:, not 100 entries); a larger file is a
// mistake or an attack on the parser.
const MaxSize = 1 << 20

// Shape limits, far beyond any lab file, checked on the tokens before the
// YAML parser runs: it takes time quadratic in the nesting depth of flow
// collections, in the keys of one block mapping and in the number of
// documents, and 1 MiB of "[" would take it minutes.
const (
	maxFlowDepth  = 32   // [ and { nesting
	maxLineDashes = 8    // "- - -": block lists nested on one line
	maxMapKeys    = 1000 // keys of one block mapping (0.02 s to parse)
	maxDocMarkers = 2    // "---" and "...": a lab file is one document
	maxTokens     = 200_000
)

// checkShape returns the token where tks exceeds a shape limit, and how.
func checkShape(tks token.Tokens) (*token.Token, string) {
	type level struct{ col, keys int }
	var (
		flow     int
		stack    []level // open block mappings, by their keys' column
		dashLine int
		dashes   int
		markers  int
		prev     *token.Token
	)
	if len(tks) > maxTokens {
		return tks[maxTokens], fmt.Sprintf("more than %d tokens; a lab file is far smaller", maxTokens)
	}
	for _, tk := range tks {
		if tk.Position == nil || tk.Type == token.CommentType {
			continue
		}
		switch tk.Type {
		case token.DocumentHeaderType, token.DocumentEndType:
			if markers++; markers > maxDocMarkers {
				return tk, "more than one document; a lab file is one YAML document"
			}
			stack = stack[:0]
		case token.SequenceStartType, token.MappingStartType:
			flow++
			if flow > maxFlowDepth {
				return tk, fmt.Sprintf("nested deeper than %d levels", maxFlowDepth)
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
			if dashes++; dashes > maxLineDashes {
				return tk, fmt.Sprintf("more than %d lists nested on one line", maxLineDashes)
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
				if stack[n-1].keys++; stack[n-1].keys > maxMapKeys {
					return prev, fmt.Sprintf("more than %d keys in one mapping", maxMapKeys)
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
