package topology

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const small = `name: small
networks:
  internet: {cidr: 203.0.113.0/24}
  home: {cidr: 192.168.1.0/24, uplink: internet, nat: symmetric, link: {latency: 20ms, loss: 1%}}
hosts:
  server: {network: internet, addr: 203.0.113.100}
control: {host: server}
relays: {relay: {host: server}}
nodes:
  peer: {network: home, count: 2, sandbox: pod}
`

func TestGraph(t *testing.T) {
	_, p := parse(t, small)
	var dot, mm strings.Builder
	require.NoError(t, p.WriteDOT(&dot))
	require.NoError(t, p.WriteMermaid(&mm))
	assert.Equal(t, `graph "small" {
  layout=dot; rankdir=BT; node [fontname="Helvetica" fontsize=10]; edge [fontname="Helvetica" fontsize=9];
  "net_internet" [shape=ellipse style=filled fillcolor="#dbeafe" label="internet\n203.0.113.0/24"];
  "net_home" [shape=ellipse style=filled fillcolor="#dbeafe" label="home\n192.168.1.0/24"];
  "rt_home-nat" [shape=box style="rounded,filled" fillcolor="#fde68a" label="home-nat\nNAT symmetric"];
  "host_server" [shape=box style=filled fillcolor="#dcfce7" label="server\ncontrol :4222\nrelay :443\n203.0.113.100"];
  "host_peer" [shape=box style=filled fillcolor="#dcfce7" label="peer ×2\npeer-1 … peer-2\nnodes (pod sandbox)"];
  "rt_home-nat" -- "net_home" [label="192.168.1.1"];
  "rt_home-nat" -- "net_internet" [label="203.0.113.1 20ms 1% loss"];
  "host_server" -- "net_internet" [label="203.0.113.100"];
  "host_peer" -- "net_home" [label=""];
}
`, dot.String())
	assert.Equal(t, `flowchart BT
  net_internet(["internet<br/>203.0.113.0/24"])
  net_home(["home<br/>192.168.1.0/24"])
  rt_home_nat{{"home-nat<br/>NAT symmetric"}}
  host_server["server<br/>control :4222<br/>relay :443<br/>203.0.113.100"]
  host_peer["peer ×2<br/>peer-1 … peer-2<br/>nodes (pod sandbox)"]
  rt_home_nat ---|"192.168.1.1"| net_home
  rt_home_nat ---|"203.0.113.1 20ms 1% loss"| net_internet
  host_server ---|"203.0.113.100"| net_internet
  host_peer --- net_home
  classDef host fill:#dcfce7
  class host_server,host_peer host
  classDef network fill:#dbeafe
  class net_internet,net_home network
  classDef router fill:#fde68a
  class rt_home_nat router
`, mm.String())
}
