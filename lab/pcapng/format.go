package pcapng

import "strconv"

// LinkType is a LINKTYPE_ value from the tcpdump.org link-layer header
// registry; it tells readers how to decode packet data.
type LinkType uint16

// Link types the lab uses.
const (
	// LinkTypeEthernet is LINKTYPE_ETHERNET: IEEE 802.3 frames.
	LinkTypeEthernet LinkType = 1
	// LinkTypeRaw is LINKTYPE_RAW: raw IPv4 or IPv6 packets, told apart by
	// the version nibble.
	LinkTypeRaw LinkType = 101
)

// Direction is the packet's direction at its capture point, stored in bits
// 0-1 of epb_flags.
type Direction uint8

// Directions as numbered by epb_flags.
const (
	DirUnknown  Direction = 0 // direction not recorded
	DirInbound  Direction = 1 // received by the capture point
	DirOutbound Direction = 2 // sent by the capture point
)

// String returns "unknown", "inbound" or "outbound".
func (d Direction) String() string {
	switch d {
	case DirUnknown:
		return "unknown"
	case DirInbound:
		return "inbound"
	case DirOutbound:
		return "outbound"
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

const (
	// MaxBlockLen bounds every block Reader accepts. Wireshark's own limit
	// is similar; a longer length field almost always means corruption, and
	// the bound keeps a hostile file from making Reader allocate gigabytes.
	MaxBlockLen = 16 << 20

	// MaxSnapLen is the largest Interface.SnapLen AddInterface accepts: a
	// full packet plus a maximal comment must still fit in MaxBlockLen.
	MaxSnapLen = MaxBlockLen - 1<<17

	// DefaultSnapLen is the SnapLen used when Interface.SnapLen is zero
	// (libpcap's default, enough for any IP packet including jumbograms
	// up to 256 KiB).
	DefaultSnapLen = 262144

	// maxOptionLen is the most an option value can hold: its length field
	// is 16 bits.
	maxOptionLen = 1<<16 - 1
)

// Block types (draft-ietf-opsawg-pcapng section 10.1).
const (
	blockSHB = 0x0A0D0D0A // Section Header Block
	blockIDB = 0x00000001 // Interface Description Block
	blockSPB = 0x00000003 // Simple Packet Block
	blockEPB = 0x00000006 // Enhanced Packet Block
)

// byteOrderMagic is written in the writer's byte order; a reader that sees
// 0x4D3C2B1A knows the section was written in the other order.
const byteOrderMagic = 0x1A2B3C4D

// Option codes. Codes 0 and 1 are common to every block; the others are
// specific to the block they are listed under.
const (
	optEndOfOpt = 0
	optComment  = 1

	optSHBUserAppl = 4

	optIfName        = 2
	optIfDescription = 3
	optIfTSResol     = 9
	optIfTSOffset    = 14

	optEPBFlags = 2
)

// tsResolNanos is the if_tsresol value Writer uses: 10^-9 seconds.
const tsResolNanos = 9

// pad4 returns n rounded up to a multiple of four: pcapng aligns packet data,
// option values and whole blocks to 32 bits.
func pad4(n int) int { return (n + 3) &^ 3 }
