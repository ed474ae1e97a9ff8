// Package policytest holds the policy file the egress backends' tests
// check against Policy.Decide, so each backend is held to the same rules.
package policytest

// Sample is an egress policy that uses every kind of rule: prefixes,
// single addresses of both families, peers by name, port lists and
// ranges, each protocol, deny inside allow, and a catch-all.
const Sample = `default: deny
rules:
  - allow: 93.184.216.0/24
    ports: [80, 443, "8000-8100"]
    proto: tcp
  - deny: 93.184.216.7
  - allow: peer:web-1
    ports: [8080]
  - allow: [1.1.1.1, 2606:4700:4700::1111]
    ports: [53]
    proto: udp
  - allow: 127.0.0.1
    ports: [9000]
  - allow: 100.64.1.0/24
    proto: icmp
  - deny: 10.0.0.0/8
  - allow: fe80::1
  - allow: 64:ff9b::7f00:1
  - allow: any
    proto: tcp
    ports: ["1-1024"]
`
