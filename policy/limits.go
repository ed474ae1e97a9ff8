package policy

import (
	"fmt"

	"github.com/goccy/go-yaml/token"
)

// Shape limits, far beyond any policy, checked on the tokens before the
// YAML parser runs: the parser takes time quadratic in the nesting depth
// of flow collections, in the number of keys of one block mapping and in
// the number of documents (100 KB of "[" takes the better part of a
// minute), and a Watcher must not hang on a bad file.
const (
	maxFlowDepth  = 16 // [ and { nesting; a policy needs 4
	maxLineDashes = 4  // "- - - -": block lists nested on one line; a policy needs 1
	maxMapKeys    = 64 // keys of one block mapping; a policy has at most 4
	maxDocMarkers = 8  // "---" and "..."; a policy is one document
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
	for _, tk := range tks {
		if tk.Position == nil || tk.Type == token.CommentType {
			continue
		}
		switch tk.Type {
		case token.DocumentHeaderType, token.DocumentEndType:
			if markers++; markers > maxDocMarkers {
				return tk, fmt.Sprintf("more than %d document markers; a policy is one YAML document", maxDocMarkers)
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
