package deploy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeMistakes: a slip in a manifest is reported at its file line
// and column, saying what is wrong, also in a file's second document.
func TestDecodeMistakes(t *testing.T) {
	const svc = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  type: ClusterIP\n"
	tests := []struct{ name, in, wantErr string }{
		{"duplicate key", svc + "  type: NodePort\n", `f.yaml:7:3: yaml: duplicate key "type"; remove one of them`},
		{"duplicate key in flow", svc + "  ports: [{port: 80, port: 81}]\n", `f.yaml:7:22: yaml: duplicate key "port"; remove one of them`},
		{"duplicate key in the second document", "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\n---\n" + svc + "  type: NodePort\n",
			`f.yaml:11:3: yaml: duplicate key "type"; remove one of them`},
		{"bad YAML in the second document", "# c\n---\n" + svc + "  type: [LoadBalancer\n",
			`f.yaml:9:1: yaml: did not find expected ',' or ']'`},
		{"tab indentation", svc + "\tselector: {}\n", `f.yaml:7:1: yaml: found a tab character that violates indentation`},
		{"misspelt field", svc + "  selectr: {}\n", `f.yaml:7:3: json: unknown field "selectr"`},
		{"word for a number", svc + "  ports: [{port: eighty}]\n", `f.yaml:7:12: json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32`},
		{"misspelt kind", "apiVersion: v1\nkind: Servce\n", `f.yaml:1:1: unknown kind "Servce" (apiVersion "v1")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("f.yaml", []byte(tt.in))
			require.Error(t, err)
			assert.EqualError(t, err, tt.wantErr)
		})
	}
}
