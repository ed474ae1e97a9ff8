// Package strictyaml decodes YAML files into Go structs strictly and
// generates a JSON Schema from the same structs, so a file format is
// declared once, as Go types with struct tags, and its decoder, its error
// messages and its published schema can never disagree.
//
// Strict means: an unknown key, a value of the wrong type, a value outside
// its allowed set or range, a missing required key, two keys where exactly
// one is allowed, anchors, aliases, merge keys and tags are all errors, and
// every error carries file:line:col, the path of the value in the document
// ("nodes.alice.network") and what was expected. Decoding does not stop at
// the first problem: it reports all of them (up to 50), sorted by position.
//
// # Struct tags
//
//	yaml:"name"            the key; "-" skips the field
//	yaml:"name,keyed"      on a slice of structs: the YAML value is a mapping
//	                       from names to elements, kept in file order
//	yaml:",key"            on a string field of such an element: receives its name
//	yaml:",inline"         on a struct field: its keys are this struct's keys
//	yaml:"name,shorthand"  a scalar given instead of the struct's mapping sets
//	                       this field (nat: symmetric means nat: {profile: symmetric})
//	required:"true"        the key must be present
//	enum:"a|b|c"           a string must be one of these
//	min:"1" max:"65535"    bounds of a number (or a duration, written as one)
//	pattern:"^[a-z]+$"     a string (or a keyed element's name) must match
//	oneof:"group"          exactly one field of the group must be present
//	doc:"..."              the field's description, in the schema and in hints
//	example:"..."          an example value for the schema
//
// time.Duration, netip.Addr (IPv4), netip.Prefix (IPv4, masked) and
// netip.AddrPort are understood natively. Other scalar types implement
// encoding.TextUnmarshaler (a bare number is passed as its text) and,
// for the schema, Schemer. A type that decodes itself implements
// Unmarshaler.
//
// # Limits
//
// The YAML parser takes time quadratic in the nesting of flow collections,
// in the keys of one mapping and in the number of documents. Decode checks
// the token stream against generous limits before parsing (see limits.go)
// and refuses files larger than MaxSize, so a hostile or mistaken file is
// refused in milliseconds.
package strictyaml
