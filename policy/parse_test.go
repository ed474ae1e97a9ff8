package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docExample is the example in the package documentation.
const docExample = `# lattice egress policy
version: 1              # optional; the only version is 1
default: deny           # allow | deny; if omitted, deny
allow_metadata: false   # true | false; if omitted, false
rules:                  # first match wins
  - allow: 93.184.216.0/24
    ports: [80, 443, "8000-8100"]
    proto: tcp
  - allow: peer:web-1
    ports: [8080]
  - allow: [1.1.1.1, 2606:4700:4700::1111]
    ports: [53]
    proto: udp
  - deny: 10.0.0.0/8
  - allow: any
`

func TestParseDocExample(t *testing.T) {
	p := mustParse(t, docExample)
	assert.Len(t, p.rules, 6, "the list rule is one rule per destination")
	assert.Equal(t, allow("p.yaml:6 allow 93.184.216.0/24 tcp ports 80,443,8000-8100"), p.Decide(tcp("93.184.216.34", 8080)))
	assert.Equal(t, allow("p.yaml:9 allow peer:web-1 ports 8080"), p.Decide(peer(tcp("100.64.0.7", 8080), "web-1")))
	assert.Equal(t, allow("p.yaml:11 allow 2606:4700:4700::1111 udp ports 53"), p.Decide(udp("2606:4700:4700::1111", 53)))
	assert.Equal(t, deny("p.yaml:14 deny 10.0.0.0/8"), p.Decide(tcp("10.9.9.9", 443)))
	assert.Equal(t, allow("p.yaml:15 allow any"), p.Decide(tcp("203.0.113.9", 22)))
	assert.Equal(t, deny("overlay peer not named"), p.Decide(peer(tcp("100.64.0.8", 22), "db")))
	assert.Equal(t, deny("metadata"), p.Decide(tcp("169.254.169.254", 80)))
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name string
		src  string
	}{
		{"flow style", "{default: allow, rules: [{deny: 10.0.0.0/8, ports: [22, 23]}]}"},
		{"port scalar", "rules:\n  - allow: any\n    ports: 443\n"},
		{"port range unquoted", "rules:\n  - allow: any\n    ports: 8000-8100\n"},
		{"port string", "rules:\n  - allow: any\n    ports: \"443\"\n"},
		{"single port range", "rules:\n  - allow: any\n    ports: [\"80-80\"]\n"},
		{"proto any explicit", "rules:\n  - allow: any\n    proto: any\n    ports: [1]\n"},
		{"icmp without ports", "rules:\n  - allow: any\n    proto: icmp\n"},
		{"quoted keys", "\"default\": 'deny'\n"},
		{"peer with dots", "rules:\n  - allow: peer:web-1.prod_eu\n"},
		{"v6 single", "rules:\n  - deny: 2001:db8::1\n"},
		{"document marker", "---\ndefault: deny\n"},
		{"document end", "default: deny\n...\n"},
		{"crlf", "default: deny\r\nrules:\r\n  - allow: any\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tt.src))
			assert.NoError(t, err)
		})
	}
}

func TestParseLargePolicy(t *testing.T) {
	// Thousands of rules, in every style, stay within the shape limits.
	var b strings.Builder
	b.WriteString("---\ndefault: deny\nrules:\n")
	for i := range 1000 {
		fmt.Fprintf(&b, "  # rule %d\n  - allow: 10.%d.%d.0/24\n    ports: [80, \"8000-8100\"]\n    proto: tcp\n", i, i/256, i%256)
		fmt.Fprintf(&b, "  - {deny: [10.%d.%d.1, 10.%d.%d.2], ports: [22]}\n", i/256, i%256, i/256, i%256)
	}
	b.WriteString("  - allow:\n    - peer:a\n    - peer:b\n    proto: udp\n...\n")
	p := mustParse(t, b.String())
	assert.Len(t, p.rules, 3002)
	assert.Equal(t, deny("p.yaml:13 deny 10.0.1.1 ports 22"), p.Decide(tcp("10.0.1.1", 22)))
	assert.Equal(t, allow("p.yaml:5004 allow peer:b udp"), p.Decide(peer(udp("100.64.0.1", 53), "b")))
}

func TestParseErrors(t *testing.T) {
	const portWant = `want a port (1-65535) or a range "LO-HI"`
	tests := []struct {
		name    string
		src     string
		wantErr string // the problems, one a line, after the summary line
	}{
		{"unknown key", "foo: 1\n", `p.yaml:1:1: unknown key "foo"; want version, default, allow_metadata or rules`},
		{"default word", "default: maybe\n", `p.yaml:1:10: default: want allow or deny, got "maybe"`},
		{"default number", "default: 1\n", `p.yaml:1:10: default: want allow or deny, got number 1`},
		{"default null", "default:\n", `p.yaml:1:10: default: want allow or deny, got nothing`},
		{"default block scalar", "default: |\n  deny\n", `p.yaml:1:10: default: want allow or deny, got a block scalar`},
		{"default tag", "default: !!str deny\n", `p.yaml:1:10: default: want allow or deny, got a tagged value (tags are not supported)`},
		{"default anchor", "default: &d deny\n", `p.yaml:1:10: default: want allow or deny, got an anchor or alias (not supported)`},
		{"metadata yes", "allow_metadata: yes\n", `p.yaml:1:17: allow_metadata: want true or false, got "yes"`},
		{"metadata string", "allow_metadata: \"true\"\n", `p.yaml:1:17: allow_metadata: want true or false, got "true"`},
		{"version 2", "version: 2\n", `p.yaml:1:10: version: want 1, got number 2`},
		{"version string", "version: \"1\"\n", `p.yaml:1:10: version: want 1, got "1"`},
		{"rules mapping", "rules: {a: b}\n", `p.yaml:1:9: rules: want a list of rules, got a mapping`},
		{"rules scalar", "rules: any\n", `p.yaml:1:8: rules: want a list of rules, got "any"`},
		{"root list", "- a\n", `p.yaml:1:1: policy: want a mapping, got a list`},
		{"root scalar", "deny\n", `p.yaml:1:1: policy: want a mapping, got "deny"`},
		{"two documents", "a: 1\n---\nb: 2\n", `p.yaml:3:1: a policy is one YAML document; remove the second`},
		{"rule scalar", "rules:\n  - 10.0.0.0/8\n", `p.yaml:2:5: rule 1: want a mapping, got "10.0.0.0/8"`},
		{"rule empty", "rules:\n  -\n", `p.yaml:2:5: rule 1: want a mapping, got nothing`},
		{"rule allow and deny", "rules:\n  - allow: 10.0.0.0/8\n    deny: 1.1.1.1\n", `p.yaml:3:5: rule 1: has both allow and deny; a rule does one`},
		{"rule no action", "rules:\n  - ports: [80]\n", `p.yaml:2:5: rule 1: want allow: or deny: naming a destination`},
		{"rule unknown key", "rules:\n  - allow: 1.1.1.1\n    color: red\n", `p.yaml:3:5: rule 1: unknown key "color"; want allow or deny, and optionally ports and proto`},
		{"rule host bits", "rules:\n  - allow: 10.0.0.1/8\n", `p.yaml:2:12: rule 1: "10.0.0.1/8" has bits set past the prefix length; did you mean 10.0.0.0/8?`},
		{"rule host name", "rules:\n  - allow: example.com\n", `p.yaml:2:12: rule 1: want an IP address, CIDR, peer:NAME or any, got "example.com" (host names are not supported)`},
		{"rule bad prefix len", "rules:\n  - allow: 10.0.0.0/33\n", `p.yaml:2:12: rule 1: "10.0.0.0/33" is not a CIDR prefix`},
		{"rule 4in6 addr", "rules:\n  - allow: ::ffff:1.2.3.4\n", `p.yaml:2:12: rule 1: "::ffff:1.2.3.4": write IPv4 addresses in IPv4 form`},
		{"rule 4in6 prefix", "rules:\n  - allow: ::ffff:1.2.3.0/120\n", `p.yaml:2:12: rule 1: "::ffff:1.2.3.0/120": write IPv4 prefixes in IPv4 form`},
		{"rule zone", "rules:\n  - allow: fe80::1%eth0\n", `p.yaml:2:12: rule 1: "fe80::1%eth0": zones are not supported`},
		{"rule bad peer", "rules:\n  - allow: peer:a b\n", `p.yaml:2:12: rule 1: "peer:a b": a peer name is 1-253 letters, digits, '.', '-' or '_'`},
		{"rule empty peer", "rules:\n  - allow: \"peer:\"\n", `p.yaml:2:12: rule 1: "peer:": a peer name is 1-253 letters, digits, '.', '-' or '_'`},
		{"rule long peer", "rules:\n  - allow: peer:" + strings.Repeat("a", 254) + "\n", `p.yaml:2:12: rule 1: "peer:` + strings.Repeat("a", 254) + `": a peer name is 1-253 letters, digits, '.', '-' or '_'`},
		{"rule empty target list", "rules:\n  - allow: []\n", `p.yaml:2:12: rule 1: empty destination list`},
		{"rule number target", "rules:\n  - allow: [1.1.1.1, 5]\n", `p.yaml:2:22: rule 1: want an IP address, CIDR, peer:NAME or any, got number 5`},
		{"rule mapping target", "rules:\n  - deny: {a: b}\n", `p.yaml:2:12: rule 1: want an IP address, CIDR, peer:NAME or any, got a mapping`},
		{"bare star", "rules:\n  - allow: *\n", `p.yaml:2:12: yaml: undefined alias name (a bare * starts a YAML alias; write any or "*")`},
		{"ports empty", "rules:\n  - allow: 1.1.1.1\n    ports: []\n", `p.yaml:3:12: rule 1: ports: empty list; omit ports to match every port`},
		{"ports with icmp", "rules:\n  - allow: 1.1.1.1\n    ports: [80]\n    proto: icmp\n", `p.yaml:3:12: rule 1: ports need proto tcp, udp or any; icmp has no ports`},
		{"ports with icmp before", "rules:\n  - proto: icmp\n    ports: 80\n    deny: any\n", `p.yaml:3:12: rule 1: ports need proto tcp, udp or any; icmp has no ports`},
		{"proto upper", "rules:\n  - allow: 1.1.1.1\n    proto: TCP\n", `p.yaml:3:12: rule 1: proto: want tcp, udp, icmp or any, got "TCP"`},
		{"proto list", "rules:\n  - allow: 1.1.1.1\n    proto: [tcp]\n", `p.yaml:3:12: rule 1: proto: want tcp, udp, icmp or any, got a list`},
		{"duplicate key", "default: deny\ndefault: allow\n", `p.yaml:2:1: yaml: duplicate key "default", first at 1:1; remove one of them`},
		{"duplicate rule key", "rules:\n  - allow: 1.1.1.1\n    allow: 2.2.2.2\n", `p.yaml:3:5: yaml: duplicate key "allow", first at 2:5; remove one of them`},
		{"tab indentation", "rules:\n\t- allow: 1.1.1.1\n", `p.yaml:2:1: yaml: found character '\t' that cannot start any token; YAML indents with spaces, never tabs`},
		{"misspelt key", "defualt: deny\n", `p.yaml:1:1: unknown key "defualt"; did you mean "default"? want version, default, allow_metadata or rules`},
		{"misspelt rule key", "rules:\n  - allow: 1.1.1.1\n    prots: tcp\n", `p.yaml:3:5: rule 1: unknown key "prots"; did you mean "proto"? want allow or deny, and optionally ports and proto`},
		{"misspelt action", "rules:\n  - alow: 1.1.1.1\n", "p.yaml:2:5: rule 1: unknown key \"alow\"; did you mean \"allow\"? want allow or deny, and optionally ports and proto\np.yaml:2:5: rule 1: want allow: or deny: naming a destination"},
		{"negative port", "rules:\n  - allow: 1.1.1.1\n    ports: -1\n", `p.yaml:3:12: rule 1: ports: want a port (1-65535) or a range "LO-HI", got "-1"`},
		{"unknown proto", "rules:\n  - allow: 1.1.1.1\n    proto: tpc\n", `p.yaml:3:12: rule 1: proto: want tcp, udp, icmp or any, got "tpc"`},
		{"complex key", "? [a]\n: b\n", `p.yaml:2:1: yaml: found an invalid key for this map`},
		// Shapes the YAML parser would take quadratic time over.
		{"deep flow", strings.Repeat("[", 1000), `p.yaml:1:17: yaml: nested deeper than 16 levels`},
		{"deep flow maps", strings.Repeat("{a: ", 1000), `p.yaml:1:65: yaml: nested deeper than 16 levels`},
		{"lists on one line", strings.Repeat("- ", 1000), `p.yaml:1:9: yaml: more than 4 lists nested on one line`},
		{"many keys", manyKeys("", 1000), `p.yaml:65:1: yaml: more than 64 keys in one mapping`},
		{"many rule keys", "rules:\n  - allow: any\n" + strings.ReplaceAll(manyKeys("    ", 1000), "\n", "\n# c\n"), `p.yaml:129:5: yaml: more than 64 keys in one mapping`},
		{"many documents", strings.Repeat("a: 1\n---\n", 1000), `p.yaml:18:1: yaml: more than 8 document markers; a policy is one YAML document`},
		{
			"bad ports all reported",
			"rules:\n  - allow: 1.1.1.1\n    ports: [0, 65536, http, 90-80, 1-2-3, -5, 0x50, 1.5, true]\n",
			strings.Join([]string{
				`p.yaml:3:13: rule 1: ports: ` + portWant + `, got "0"`,
				`p.yaml:3:16: rule 1: ports: ` + portWant + `, got "65536"`,
				`p.yaml:3:23: rule 1: ports: ` + portWant + `, got "http"`,
				`p.yaml:3:29: rule 1: ports: range "90-80" is reversed; write 80-90`,
				`p.yaml:3:36: rule 1: ports: ` + portWant + `, got "1-2-3"`,
				`p.yaml:3:43: rule 1: ports: ` + portWant + `, got "-5"`,
				`p.yaml:3:47: rule 1: ports: ` + portWant + `, got "0x50"`,
				`p.yaml:3:53: rule 1: ports: ` + portWant + `, got number 1.5`,
				`p.yaml:3:58: rule 1: ports: ` + portWant + `, got boolean true`,
			}, "\n"),
		},
		{
			"every problem in the file",
			"default: sometimes\nextra: 1\nrules:\n  - allow: 10.0.0.0/8\n  - allow: nope\n    proto: sctp\n  - deny: 1.1.1.1\n    ports: [99999]\n  - ports: 80\n",
			strings.Join([]string{
				`p.yaml:1:10: default: want allow or deny, got "sometimes"`,
				`p.yaml:2:1: unknown key "extra"; want version, default, allow_metadata or rules`,
				`p.yaml:5:12: rule 2: want an IP address, CIDR, peer:NAME or any, got "nope" (host names are not supported)`,
				`p.yaml:6:12: rule 2: proto: want tcp, udp, icmp or any, got "sctp"`,
				`p.yaml:8:13: rule 3: ports: ` + portWant + `, got "99999"`,
				`p.yaml:9:5: rule 4: want allow: or deny: naming a destination`,
			}, "\n"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tt.src))
			require.Error(t, err)
			assert.Nil(t, p)
			assert.ErrorIs(t, err, ErrInvalid)
			var pe *PosError
			assert.ErrorAs(t, err, &pe)
			n := strings.Count(tt.wantErr, "\n") + 1
			summary := "1 problem"
			if n > 1 {
				summary = fmt.Sprintf("%d problems", n)
			}
			assert.Equal(t, "policy: invalid policy file: "+summary+" in p.yaml:\n"+tt.wantErr, err.Error())
		})
	}
}

// manyKeys returns n lines "k0: 1", "k1: 1", ... indented by indent.
func manyKeys(indent string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%sk%d: 1\n", indent, i)
	}
	return b.String()
}

func TestParseErrorPositions(t *testing.T) {
	_, err := Parse("dir/p.yaml", []byte("rules:\n  - allow: 1.1.1.1\n    ports: [http]\n"))
	var joined interface{ Unwrap() []error }
	require.ErrorAs(t, err, &joined)
	var got []PosError
	for _, e := range joined.Unwrap() {
		var pe *PosError
		if errors.As(e, &pe) {
			got = append(got, *pe)
		}
	}
	assert.Equal(t, []PosError{{File: "dir/p.yaml", Line: 3, Col: 13, Msg: `rule 1: ports: want a port (1-65535) or a range "LO-HI", got "http"`}}, got)
}

func TestParseTooManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for range 60 {
		b.WriteString("  - allow: bad\n")
	}
	_, err := Parse("p.yaml", []byte(b.String()))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	assert.Equal(t, "policy: invalid policy file: 60 problems in p.yaml:", lines[0])
	assert.Len(t, lines, 1+maxErrors+1)
	assert.Equal(t, "p.yaml: 10 more problems not shown", lines[len(lines)-1])
}

func TestParseTooLarge(t *testing.T) {
	_, err := Parse("p.yaml", make([]byte, MaxSize+1))
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.EqualError(t, err, "policy: file too large: p.yaml is larger than 1048576 bytes")
}

func TestParseDefaultName(t *testing.T) {
	p, err := Parse("", []byte("rules:\n  - deny: any\n"))
	require.NoError(t, err)
	assert.Equal(t, deny("policy:2 deny any"), p.Decide(tcp("1.1.1.1", 1)))
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "egress.yaml")
	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - allow: 1.1.1.1\n"), 0o600))

	p, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, path, p.Source())
	assert.Equal(t, allow("egress.yaml:2 allow 1.1.1.1"), p.Decide(tcp("1.1.1.1", 1)), "labels carry the base name")

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	require.NoError(t, os.WriteFile(path, []byte("rules:\n  - allow: nope\n"), 0o600))
	_, err = Load(path)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "\n"+path+":2:12: rule 1: ")

	require.NoError(t, os.WriteFile(path, make([]byte, MaxSize+1), 0o600))
	_, err = Load(path)
	assert.ErrorIs(t, err, ErrTooLarge)

	_, err = Load(dir)
	assert.EqualError(t, err, "policy: read "+dir+": is a directory, not a policy file")
}
