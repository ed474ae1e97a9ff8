package strictyaml

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small format exercising every feature the decoder has.
type doc struct {
	Version  int            `yaml:"version" min:"1" max:"1"`
	Name     string         `yaml:"name" pattern:"^[a-z]+$" doc:"Lower-case letters. Used in reports."`
	Networks []net          `yaml:"networks,keyed" required:"true" doc:"The networks." example:"networks: {home: {cidr: 192.168.1.0/24}}"`
	Steps    []step         `yaml:"steps"`
	Tags     []string       `yaml:"tags" enum:"slow|pro|root"`
	Ratio    float64        `yaml:"ratio" min:"0" max:"1"`
	Enabled  bool           `yaml:"enabled"`
	Wait     time.Duration  `yaml:"wait" max:"1m"`
	Size     Size           `yaml:"size"`
	Loss     Fraction       `yaml:"loss"`
	Listen   netip.AddrPort `yaml:"listen"`
	NAT      *nat           `yaml:"nat"`
}

type net struct {
	Name string       `yaml:",key" pattern:"^[a-z][a-z0-9-]*$" doc:"A name is lower-case letters, digits and dashes."`
	CIDR netip.Prefix `yaml:"cidr" required:"true" doc:"The network's IPv4 prefix. For example 192.168.1.0/24."`
	Addr netip.Addr   `yaml:"addr"`
	Port uint16       `yaml:"port" min:"1"`
}

type nat struct {
	Profile string `yaml:"profile,shorthand" enum:"full-cone|symmetric"`
	Hairpin bool   `yaml:"hairpin"`
}

type step struct {
	Name string    `yaml:"name"`
	Ping *pingStep `yaml:"ping" oneof:"action"`
	Wait *waitStep `yaml:"wait" oneof:"action"`
}

type pingStep struct {
	From string `yaml:"from" required:"true"`
	To   string `yaml:"to" required:"true"`
}

type waitStep struct {
	For time.Duration `yaml:"for" required:"true"`
}

const good = `version: 1
name: lab
networks:
  home:
    cidr: 192.168.1.0/24
    addr: 192.168.1.7
    port: 51820
  internet: {cidr: 203.0.113.0/24}
steps:
  - ping: {from: a, to: b}
    name: first
  - wait: {for: 1m}
tags: [slow, pro]
ratio: 0.5
enabled: true
wait: 1m
size: 64MiB
loss: 1%
listen: 203.0.113.1:3478
nat: symmetric
`

func TestDecodeGood(t *testing.T) {
	var d doc
	pos, err := Decode("lab.yaml", []byte(good), &d)
	require.NoError(t, err)
	assert.Equal(t, doc{
		Version: 1, Name: "lab",
		Networks: []net{
			{Name: "home", CIDR: netip.MustParsePrefix("192.168.1.0/24"), Addr: netip.MustParseAddr("192.168.1.7"), Port: 51820},
			{Name: "internet", CIDR: netip.MustParsePrefix("203.0.113.0/24")},
		},
		Steps:   []step{{Name: "first", Ping: &pingStep{From: "a", To: "b"}}, {Wait: &waitStep{For: time.Minute}}},
		Tags:    []string{"slow", "pro"},
		Ratio:   0.5,
		Enabled: true, Wait: time.Minute, Size: 64 << 20, Loss: 0.01,
		Listen: netip.MustParseAddrPort("203.0.113.1:3478"),
		NAT:    &nat{Profile: "symmetric"},
	}, d)
	assert.Equal(t, Pos{4, 3}, pos["networks.home"], "a keyed element is where its name is")
	assert.Equal(t, Pos{5, 11}, pos["networks.home.cidr"])
	assert.Equal(t, Pos{10, 5}, pos["steps[1]"])
	assert.Equal(t, Pos{10, 18}, pos["steps[1].ping.from"])
	assert.Equal(t, Pos{12, 5}, pos["steps[2]"])
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // every problem, as Error prints them
	}{
		{
			name: "empty file",
			in:   "",
			want: `1 problem:
f.yaml:1:1: missing required key "networks"; networks: The networks`,
		},
		{
			name: "unknown keys with suggestions",
			in:   "networks: {home: {cidr: 10.0.0.0/8, cidrr: 1}}\nnmae: x\nbogus: 1\n",
			want: `3 problems:
f.yaml:1:37: networks.home: unknown key "cidrr"; did you mean "cidr"? (known keys: cidr, addr, port)
f.yaml:2:1: unknown key "nmae"; did you mean "name"? (known keys: version, name, networks, steps, tags, ratio, enabled, wait, size, loss, listen, nat)
f.yaml:3:1: unknown key "bogus"; known keys: version, name, networks, steps, tags, ratio, enabled, wait, size, loss, listen, nat`,
		},
		{
			name: "type errors",
			in: `version: "1"
name: 7
networks: [home]
ratio: lots
enabled: yes
wait: 30
size: 64 Mb
loss: 150%
listen: 203.0.113.1
`,
			want: `9 problems:
f.yaml:1:10: version: want an integer, got "1"; remove the quotes
f.yaml:2:7: name: bad value "7"; Lower-case letters
f.yaml:3:11: networks: want a mapping of names, got a list; write networks as a mapping from names to settings, e.g. networks: {home: {cidr: 192.168.1.0/24}}
f.yaml:4:8: ratio: want a number, got "lots"
f.yaml:5:10: enabled: want true or false, got "yes"
f.yaml:6:7: wait: want a duration such as 500ms, 3s or 1m30s, got number 30; add a unit: 30s or 30ms
f.yaml:7:7: size: want a size such as 65536, 64KiB, 16MiB or 1GB, got "64 Mb"
f.yaml:8:7: loss: want a fraction from 0 to 1 or a percentage such as 1%, got "150%" (outside 0-100%)
f.yaml:9:9: listen: want an IPv4 ADDRESS:PORT such as 203.0.113.100:3478 (port 1-65535), got "203.0.113.1"`,
		},
		{
			name: "values out of range",
			in: `version: 2
networks:
  Home: {cidr: 10.0.0.1/8, addr: "::1", port: 0}
  lan: {cidr: 10.0.0.0, addr: 10.0.0.300, port: 70000}
ratio: 1.5
wait: 2m
tags: [slow, fast]
nat: cone
`,
			want: `12 problems:
f.yaml:1:10: version: want an integer from 1 to 1, got 2
f.yaml:3:3: networks.Home: bad name "Home"; A name is lower-case letters, digits and dashes.
f.yaml:3:16: networks.Home.cidr: "10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?
f.yaml:3:34: networks.Home.addr: "::1" is IPv6: this field takes IPv4 only
f.yaml:3:47: networks.Home.port: want an integer from 1 to 65535, got 0
f.yaml:4:15: networks.lan.cidr: "10.0.0.0" has no prefix length; write e.g. 10.0.0.0/24
f.yaml:4:31: networks.lan.addr: want an IPv4 address such as 192.168.1.10, got "10.0.0.300"
f.yaml:4:49: networks.lan.port: want an integer from 1 to 65535, got 70000
f.yaml:5:8: ratio: want a number from 0 to 1, got 1.5
f.yaml:6:7: wait: want a duration from 0s to 1m0s, got 2m0s
f.yaml:7:14: tags[2]: unknown value "fast"; one of: slow, pro, root
f.yaml:8:6: nat: unknown value "cone"; one of: full-cone, symmetric`,
		},
		{
			name: "oneof and required in list items",
			in: `networks: {}
steps:
  - name: nothing
  - ping: {from: a}
    wait: {for: 1s}
  - ping: {to: b, form: a}
  - just a string
`,
			want: `6 problems:
f.yaml:3:5: steps[1]: want one action key, got none; one of: ping, wait
f.yaml:4:5: steps[2]: one action per entry, got ping and wait; split it into 2 entries
f.yaml:4:12: steps[2].ping: missing required key "to"
f.yaml:6:12: steps[3].ping: missing required key "from"
f.yaml:6:19: steps[3].ping: unknown key "form"; did you mean "from"? (known keys: from, to)
f.yaml:7:5: steps[4]: want a mapping, got "just a string"; keys: name, ping, wait`,
		},
		{
			name: "yaml syntax",
			in:   "networks:\n  home: {cidr: 10.0.0.0/8\n",
			want: "1 problem:\nf.yaml:2:9: yaml: could not find flow mapping end token '}'",
		},
		{
			name: "anchors and aliases",
			in:   "networks:\n  a: &x {cidr: 10.0.0.0/8}\n  b: *x\n",
			want: `2 problems:
f.yaml:2:6: networks.a: anchors and aliases are not supported; copy the value instead
f.yaml:3:6: networks.b: anchors and aliases are not supported; copy the value instead`,
		},
		{
			name: "two documents",
			in:   "networks: {}\n---\nname: x\n",
			want: "1 problem:\nf.yaml:3:5: yaml: a lab file is one YAML document; remove the second",
		},
		{
			name: "not a mapping",
			in:   "- a\n- b\n",
			want: "1 problem:\nf.yaml:1:1: want a mapping, got a list; keys: version, name, networks, steps, tags, ratio, enabled, wait, size, loss, listen, nat",
		},
		{
			name: "shorthand of the wrong kind",
			in:   "networks: {}\nnat: [a]\n",
			want: "1 problem:\nf.yaml:2:6: nat: want a mapping, got a list; write a value (full-cone, symmetric), or a mapping with profile, hairpin",
		},
		{
			name: "duplicate keys and names, other problems still reported",
			in: `networks:
  home: {cidr: 10.0.0.0/8}
  home: {cidr: 10.1.0.0/16}
name: a
name: b
steps:
  - ping: {from: a, to: b, to: c}
wait: 30
`,
			want: `4 problems:
f.yaml:3:3: networks.home: name "home" is already declared at 2:3; give each its own name, or remove one
f.yaml:5:1: name: duplicate key "name", first at 4:1; remove one of them
f.yaml:7:28: steps[1].ping.to: duplicate key "to", first at 7:21; remove one of them
f.yaml:8:7: wait: want a duration such as 500ms, 3s or 1m30s, got number 30; add a unit: 30s or 30ms`,
		},
		{
			name: "tab indentation",
			in:   "networks:\n  home:\n\tcidr: 10.0.0.0/8\n",
			want: `1 problem:
f.yaml:3:1: yaml: found character '\t' that cannot start any token; YAML indents with spaces, never tabs`,
		},
		{
			name: "only comments",
			in:   "# networks: {}\n\n",
			want: `1 problem:
f.yaml:1:1: missing required key "networks"; networks: The networks`,
		},
		{
			name: "tags",
			in:   "networks: {}\nname: !!str abc\n",
			want: "1 problem:\nf.yaml:2:7: name: YAML tags are not supported; remove the tag; the format says what type each value is",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d doc
			_, err := Decode("f.yaml", []byte(tt.in), &d)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

// TestExplainSyntax: the YAML parser's messages that other parsers (policy)
// still get from it are reworded with a hint.
func TestExplainSyntax(t *testing.T) {
	tests := []struct{ in, msg, hint string }{
		{`mapping key "default" already defined at [1:1]`, `duplicate key "default", first at 1:1`, "remove one of them"},
		{`mapping key "a \"b\"" already defined at [12:5]`, `duplicate key "a \"b\"", first at 12:5`, "remove one of them"},
		{"found character '\t' that cannot start any token", `found character '\t' that cannot start any token`, "YAML indents with spaces, never tabs"},
		{"undefined alias name", "undefined alias name", `a bare * or & starts a YAML alias or anchor; quote the value ("*")`},
		{"could not find flow mapping end token '}'", "could not find flow mapping end token '}'", ""},
	}
	for _, tt := range tests {
		msg, hint := ExplainSyntax(tt.in)
		assert.Equal(t, tt.msg, msg, tt.in)
		assert.Equal(t, tt.hint, hint, tt.in)
	}
}

func TestDecodeLimits(t *testing.T) {
	big := []byte(strings.Repeat("#", MaxSize+1))
	_, err := Decode("big.yaml", big, &doc{})
	assert.ErrorIs(t, err, ErrTooLarge)

	for name, in := range map[string]string{
		"deep flow":    strings.Repeat("[", 10000),
		"many keys":    strings.Repeat("k: 1\n", 2000)[:2000*5],
		"many docs":    strings.Repeat("---\n", 100),
		"many dashes":  strings.Repeat("- ", 100) + "x\n",
		"many tokens":  "tags: [" + strings.Repeat("a, ", 210_000) + "]\n",
		"wide mapping": "a: {" + strings.Repeat("k: 1, ", 2000) + "}\n",
	} {
		t.Run(name, func(t *testing.T) {
			// CPU time, not wall time: a loaded CI machine stretches the
			// wall clock (12.7 s seen at load 14), not the work done.
			start := cpuTime(t)
			_, err := Decode("f.yaml", []byte(in), &doc{})
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Less(t, cpuTime(t)-start, 10*time.Second, "refused quickly (race detector included)")
		})
	}
}

func TestErrorsAs(t *testing.T) {
	_, err := Decode("f.yaml", []byte("networks: {a: {cidr: x}}\nbogus: 1\n"), &doc{})
	var es *Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es.List, 2)
	var e *Error
	require.ErrorAs(t, err, &e, "errors.As finds the first problem")
	assert.Equal(t, "networks.a.cidr", e.Path)
	b, jerr := json.Marshal(es.List[1])
	require.NoError(t, jerr)
	assert.JSONEq(t, `{"file":"f.yaml","pos":{"line":2,"col":1},"message":"unknown key \"bogus\"","hint":"known keys: version, name, networks, steps, tags, ratio, enabled, wait, size, loss, listen, nat"}`, string(b))
}

func TestCollectorCap(t *testing.T) {
	var c Collector
	for i := range MaxErrors + 5 {
		c.Addf("f", Pos{Line: MaxErrors + 5 - i}, "", "problem")
	}
	err := c.Err()
	var es *Errors
	require.True(t, errors.As(err, &es))
	assert.Len(t, es.List, MaxErrors)
	assert.Equal(t, 5, es.Dropped)
	assert.True(t, strings.HasPrefix(err.Error(), "55 problems:\nf:1:0: problem"), err.Error())
	assert.True(t, strings.HasSuffix(err.Error(), "(5 more not shown)"))
}

func TestSuggest(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"latncy", "latency"}, {"LATENCY", "latency"}, {"x", ""}, {"jitterrrrr", ""}, {"los", "loss"},
	} {
		assert.Equal(t, tt.want, Suggest(tt.in, []string{"latency", "jitter", "loss"}), tt.in)
	}
}

func TestUnits(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Size
		err  bool
	}{
		{"65536", 65536, false}, {"64KiB", 64 << 10, false}, {"1.5MiB", 3 << 19, false}, {"1GB", 1e9, false},
		{"10 MB", 10e6, false}, {"7B", 7, false}, {"-1", 0, true}, {"1e9", 0, true}, {"MiB", 0, true},
		{"1.MiB", 0, true}, {"2PiB", 0, true}, {"99999999999999999999GiB", 0, true},
	} {
		var s Size
		err := s.UnmarshalText([]byte(tt.in))
		if tt.err {
			assert.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, s, tt.in)
	}
	assert.Equal(t, "64MiB", Size(64<<20).String())
	assert.Equal(t, "1000B", Size(1000).String())
	var f Fraction
	require.NoError(t, f.UnmarshalText([]byte("2.5%")))
	assert.InDelta(t, 0.025, float64(f), 1e-12)
	assert.Equal(t, "2.5%", f.String())
	assert.Error(t, f.UnmarshalText([]byte("NaN")))
}

// cpuTime is the CPU time this process has used so far (user + system).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
