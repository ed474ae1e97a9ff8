package strictyaml

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSchema(t *testing.T) {
	s := Schema(doc{}, "https://example.com/doc.json", "Doc", "A test format.")
	b, err := json.MarshalIndent(s, "", "  ")
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))

	assert.Equal(t, SchemaURI, got["$schema"])
	assert.Equal(t, "#/$defs/doc", got["$ref"])
	defs := got["$defs"].(map[string]any)
	root := defs["doc"].(map[string]any)
	assert.Equal(t, false, root["additionalProperties"])
	assert.Equal(t, []any{"networks"}, root["required"])
	props := root["properties"].(map[string]any)
	networks := props["networks"].(map[string]any)
	assert.Equal(t, "object", networks["type"])
	assert.Equal(t, map[string]any{"pattern": "^[a-z][a-z0-9-]*$"}, networks["propertyNames"])
	assert.Equal(t, map[string]any{"$ref": "#/$defs/net"}, networks["additionalProperties"])
	assert.Equal(t, "The networks.", networks["description"])
	assert.Equal(t, map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []any{"slow", "pro", "root"}}}, props["tags"])
	assert.Equal(t, map[string]any{"type": "integer", "minimum": 1.0, "maximum": 1.0}, props["version"])

	step := defs["step"].(map[string]any)
	assert.Equal(t, []any{
		map[string]any{"required": []any{"ping"}},
		map[string]any{"required": []any{"wait"}},
	}, step["oneOf"])

	n := defs["net"].(map[string]any)["properties"].(map[string]any)
	assert.Equal(t, map[string]any{"type": "integer", "minimum": 1.0, "maximum": 65535.0}, n["port"])
	assert.Equal(t, "ipv4", n["addr"].(map[string]any)["format"])

	nat := defs["nat"].(map[string]any)
	alts := nat["anyOf"].([]any)
	require.Len(t, alts, 2, "a shorthand struct is a scalar or a mapping")
	assert.Equal(t, []any{"full-cone", "symmetric"}, alts[0].(map[string]any)["enum"])
}
