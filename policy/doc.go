// Package policy decides which destinations a sandboxed agent may connect
// to. Every outbound connection the sandbox makes for the agent (SOCKS5,
// HTTP proxy, netstack) is first put to Policy.Decide, and the Decision,
// with the rule that made it, goes to the audit log.
//
// Decide is pure: no goroutines, no clock, no allocation. A Watcher keeps a
// policy file loaded and reloads it when it changes.
//
// # File format
//
// A policy is one YAML document (YAML 1.2: yes/no/on/off are strings, not
// booleans):
//
//	# lattice egress policy
//	version: 1              # optional; the only version is 1
//	default: deny           # allow | deny; if omitted, deny
//	allow_metadata: false   # true | false; if omitted, false
//	rules:                  # first match wins
//	  - allow: 93.184.216.0/24
//	    ports: [80, 443, "8000-8100"]
//	    proto: tcp
//	  - allow: peer:web-1
//	    ports: [8080]
//	  - allow: [1.1.1.1, 2606:4700:4700::1111]
//	    ports: [53]
//	    proto: udp
//	  - deny: 10.0.0.0/8
//	  - allow: any
//
// A rule has exactly one of these keys, naming one destination or a list of
// them:
//
//	allow: DEST | [DEST, ...]
//	deny:  DEST | [DEST, ...]
//
// and optionally:
//
//	ports: PORT | [PORT, ...]   PORT is 1-65535, or "LO-HI" (inclusive, quoted or not);
//	                            if omitted, every port
//	proto: tcp | udp | icmp | any   if omitted, any; icmp covers ICMPv4 and ICMPv6
//
// A DEST is one of:
//
//	203.0.113.7, 2001:db8::1    one address
//	10.0.0.0/8, fd00::/8        a CIDR prefix, written masked (10.0.0.0/8, not 10.1.2.3/8)
//	peer:web-1                  the overlay peer with that node name (letters, digits, '.', '-', '_';
//	                            compared case-insensitively)
//	peer:*                      every overlay peer
//	any                         every destination not on the overlay; "*" (quoted: a bare * is
//	                            YAML alias syntax) means the same
//
// Host names are not destinations: the policy matches the address a
// connection goes to, after resolution. IPv4 is matched by IPv4 prefixes
// and IPv6 by IPv6 prefixes; an IPv4-mapped IPv6 destination
// (::ffff:10.1.2.3) is matched as IPv4.
//
// Parsing is strict. Unknown keys, wrong types (ports: "http", default:
// maybe), ports with proto icmp, empty lists, anchors, aliases, tags and a
// second YAML document are errors. Every problem in a file is reported at
// once, as "file:line:col: rule N: what is wrong; what was expected", one
// per line (the first 50). An empty file, or one with only comments, is a
// valid policy that denies everything.
//
// # Semantics
//
// Decide takes a Dest: address, port, protocol, and the caller's word on
// whether the address is an overlay peer (and the peer's node name, when
// known). It decides in this order:
//
//  1. Invalid destination. An invalid address, or a protocol other than
//     TCP, UDP or ICMP, is denied: "invalid destination".
//  2. Metadata. The cloud metadata and credential endpoints (169.254.169.254,
//     169.254.170.2, 169.254.170.23, 168.63.129.16, 100.100.100.200,
//     192.0.0.192, fd00:ec2::254, fd00:ec2::23, fd20:ce::254, and their
//     NAT64 and 6to4 forms; see IsMetadata and DefaultDenied) are denied,
//     "metadata", unless allow_metadata is true. This holds for overlay
//     destinations too, so an overlay must not give a peer one of these
//     addresses. With allow_metadata: true they are ordinary destinations,
//     subject to the rules and the default.
//  3. Other default-denied ranges (DefaultDenied): loopback (127.0.0.0/8,
//     ::1), unspecified (0.0.0.0/8, ::), link-local (169.254.0.0/16,
//     fe80::/10), and each of these IPv4 ranges inside 64:ff9b::/96 (NAT64)
//     and 2002::/16 (6to4); and the sandbox host's own addresses
//     (Dest.Host). They are denied with the range's reason ("loopback",
//     "unspecified", "link-local", "loopback via nat64", "host address",
//     ...) unless a rule names them: a CIDR or address rule lying within
//     that range (for a host address, that one address), the first such
//     that matches deciding. any, "*", 0.0.0.0/0 and other wider prefixes
//     never name them, so neither the default nor allow: any opens them.
//  4. Rules, in file order; the first whose destination, protocol and ports
//     all match decides, and Decision.Rule names it:
//     "policy.yaml:7 deny 10.0.0.0/8". A rule with ports never matches ICMP.
//  5. Overlay peers the policy does not name. For an overlay destination,
//     only rules that name overlay peers can match: peer:NAME, peer:*, or a
//     CIDR prefix lying within the overlay prefix (100.64.0.0/10 unless
//     Policy.WithOverlay or WatcherConfig.Overlay says otherwise; a single
//     address counts as a /32 or /128). any, "*", 0.0.0.0/0 and
//     100.0.0.0/8 do not name peers. An overlay destination no such rule
//     matches is denied: "overlay peer not named". The default never
//     applies to overlay peers.
//  6. Default. Any other destination takes the default: "default allow" or
//     "default deny".
//
// A deny rule naming overlay peers denies them like any other rule; a deny
// rule that does not name them does not match them, which changes nothing
// since they are denied unless named.
//
// # No policy
//
// AllowAll is the policy in force when none is configured: every
// destination, every overlay peer included, is allowed ("default allow"),
// except the default-denied ranges and host addresses of step 3 and the
// metadata addresses. Without a policy file an agent can reach
// every peer on its overlay; write a policy to confine it.
//
// # Reloading
//
// A Watcher checks the file every Interval (1s) by stat, and re-reads and
// hashes it when size, mtime or identity changed, or when its mtime is too
// recent to trust (a write within the timestamp granularity of the last
// read). New bytes are installed once they have settled: read the same on
// two polls in a row, so a file caught half-written (which may well parse,
// and allow more than the whole file) is not installed. A change therefore
// takes effect one to two Intervals after the write ends. Reload re-reads
// the file at once and installs it without waiting; the sandbox calls it
// on SIGHUP. A file that cannot be read or parsed is logged with all its
// errors and the policy in force stays in force: a bad edit never opens or
// closes anything. Only a file whose bytes differ from the policy in force
// is installed and reported to OnChange.
//
// To switch policies atomically, write the new file beside the old and
// rename it over; then send SIGHUP, or wait for the poll.
package policy
