package scenario

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clockWorld has a kernel host (box) and a gvisor sandbox (agent).
const clockWorld = `topology:
  networks:
    internet: {cidr: 203.0.113.0/24}
    home: {cidr: 192.168.1.0/24, uplink: internet, nat: port-restricted-cone}
  hosts:
    server: {network: internet, addr: 203.0.113.100}
    box: {network: home, kind: netns}
  control: {host: server}
  relays: {relay: {host: server}}
  nodes:
    kern: {host: box}
    agent: {network: home, sandbox: gvisor}
    web: {network: internet}
requires: [pro, root, gvisor]
steps:
  - ping: {from: kern, to: web}
`

func TestClock(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		wantClock string
		wantNeeds []string
		wantErr   string
	}{
		{name: "absent", src: inlineWorld + "steps:\n  - ping: {from: alice, to: bob}\n"},
		{name: "virtual, in-process", src: "clock: virtual\n" + inlineWorld + "steps:\n  - ping: {from: alice, to: bob}\n",
			wantClock: "virtual"},
		{name: "real, kernel host", src: "clock: real\n" + clockWorld, wantClock: "real",
			wantNeeds: []string{"node agent is a gvisor sandbox (runsc in a network namespace, host agent)",
				"host box is a kernel host (kind netns: the kernel's TCP/IP behind a TUN device)"}},
		{name: "virtual, kernel host and gvisor sandbox", src: "clock: virtual\n" + clockWorld,
			wantErr: `2 problems:
s.yaml:1:8: clock: virtual time cannot run this scenario: node agent is a gvisor sandbox (runsc in a network namespace, host agent), which waits on the wall clock outside the bubble; write clock: real, or leave clock out to run on the wall clock where needed
s.yaml:1:8: clock: virtual time cannot run this scenario: host box is a kernel host (kind netns: the kernel's TCP/IP behind a TUN device), which waits on the wall clock outside the bubble; write clock: real, or leave clock out to run on the wall clock where needed`},
		{name: "requires virtual, in-process", src: "requires: [virtual]\n" + inlineWorld + "steps:\n  - ping: {from: alice, to: bob}\n"},
		{name: "requires virtual on the real clock", src: "clock: real\nrequires: [virtual]\n" + inlineWorld + "steps:\n  - ping: {from: alice, to: bob}\n",
			wantErr: "1 problem:\ns.yaml:1:8: clock: clock: real contradicts requires: [virtual]; leave clock out, or write clock: virtual"},
		{name: "requires virtual with a kernel host", src: strings.Replace(clockWorld, "requires: [pro, root, gvisor]", "requires: [pro, root, gvisor, virtual]", 1),
			wantErr: `2 problems:
s.yaml:14:11: requires: virtual time cannot run this scenario: node agent is a gvisor sandbox (runsc in a network namespace, host agent), which waits on the wall clock outside the bubble; drop virtual from requires: the scenario needs the wall clock
s.yaml:14:11: requires: virtual time cannot run this scenario: host box is a kernel host (kind netns: the kernel's TCP/IP behind a TUN device), which waits on the wall clock outside the bubble; drop virtual from requires: the scenario needs the wall clock`},
		{name: "unknown clock", src: "clock: fake\n" + inlineWorld + "steps:\n  - ping: {from: alice, to: bob}\n",
			wantErr: "1 problem:\ns.yaml:1:8: clock: unknown value \"fake\"; one of: virtual, real"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("s.yaml", []byte(tt.src), Options{})
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tt.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantClock, f.Clock)
			assert.Equal(t, tt.wantNeeds, f.WallClockNeeds())
		})
	}
}
