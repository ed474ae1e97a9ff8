// Package pcapng writes packet captures in the pcapng format
// (draft-ietf-opsawg-pcapng) that Wireshark and tshark open directly.
//
// A Writer produces one section: a Section Header Block naming the
// application (shb_userappl), one Interface Description Block per capture
// point registered with AddInterface (if_name, if_description and
// if_tsresol = 9, so timestamps keep nanoseconds), then one Enhanced Packet
// Block per WritePacket. Each packet records the capture point, its
// direction (epb_flags bits 0-1) and an optional UTF-8 comment
// (opt_comment), which the lab uses to annotate NAT decisions such as
// "dropped by address-and-port-dependent filtering: no mapping for udp ...".
// The lab captures raw IP packets (LinkTypeRaw, LINKTYPE_RAW = 101: IPv4 or
// IPv6 by the version nibble); link-level captures use LinkTypeEthernet.
// Blocks are written little-endian and padded to 32 bits.
//
// Open a capture in Wireshark (comments appear in the packet details and
// under Statistics > Capture File Properties; filter with
// frame.comment contains "dropped"), or on the command line:
//
//	tshark -r capture.pcapng
//	tshark -r capture.pcapng -T fields -e frame.interface_name \
//		-e ip.src -e ip.dst -e frame.packet_flags_direction -e frame.comment
//
// tshark 3.6 and later name the packet comment field frame.comment; older
// releases call it pkt_comment.
//
// Reader decodes pcapng in either byte order for tests and tooling. It
// understands the blocks Writer emits plus Simple Packet Blocks and any
// timestamp resolution, skips every other block type, and rejects blocks
// larger than MaxBlockLen.
package pcapng
