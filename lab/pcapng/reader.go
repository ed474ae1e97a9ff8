package pcapng

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Reader reads packets from a pcapng stream, for tests and tooling. It
// accepts either byte order, several sections and any timestamp
// resolution, skips block types it does not know, and reports corrupt input
// as an error (wrapping ErrCorrupt, ErrBlockTooLarge, ErrUnknownInterface,
// ErrVersion or io.ErrUnexpectedEOF) with the offending block's offset. It
// never panics and allocates at most MaxBlockLen for any one block. A
// Reader is not safe for concurrent use.
type Reader struct {
	r     *bufio.Reader
	order binary.ByteOrder // of the current section
	off   int64            // offset of the next block in the stream
	sec   Options          // the current section's header options
	ifs   []readIface      // the current section's interfaces, by id
	buf   []byte           // the current block, reused
	err   error            // sticky: once reading fails, Next keeps failing
}

// readIface is an Interface plus what Reader needs to decode timestamps.
type readIface struct {
	Interface
	resol  uint8 // if_tsresol: 10^-resol s, or 2^-(resol&0x7f) s if the top bit is set
	offset int64 // if_tsoffset: seconds added to every timestamp
}

// NewReader reads the Section Header Block that must open r.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{r: bufio.NewReader(r)}
	typ, body, err := rd.readBlock()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("pcapng: empty input: %w", ErrNotPcapng)
	}
	if err != nil {
		return nil, err
	}
	if err := rd.handleSection(typ, body); err != nil {
		return nil, err
	}
	return rd, nil
}

// Next returns the next packet. Interface and Data refer to the section the
// packet is in; interface ids restart with each section. At the end of the
// input Next returns io.EOF.
func (r *Reader) Next() (Packet, error) {
	for r.err == nil {
		start := r.off
		typ, body, err := r.readBlock()
		if err != nil {
			r.err = err
			break
		}
		var p Packet
		switch typ {
		case blockSHB:
			err = r.handleSection(typ, body)
		case blockIDB:
			if err = r.parseInterface(body); err != nil {
				err = fmt.Errorf("pcapng: interface description at offset %d: %w", start, err)
			}
		case blockEPB:
			if p, err = r.parseEPB(body); err == nil {
				return p, nil
			}
			err = fmt.Errorf("pcapng: enhanced packet at offset %d: %w", start, err)
		case blockSPB:
			if p, err = r.parseSPB(body); err == nil {
				return p, nil
			}
			err = fmt.Errorf("pcapng: simple packet at offset %d: %w", start, err)
		}
		r.err = err
	}
	return Packet{}, r.err
}

// Interfaces returns the interfaces described so far in the current
// section, indexed by id. Raw values are reported: no defaults applied.
func (r *Reader) Interfaces() []Interface {
	out := make([]Interface, len(r.ifs))
	for i, ifc := range r.ifs {
		out[i] = ifc.Interface
	}
	return out
}

// Section returns the current section's shb_userappl and opt_comment.
func (r *Reader) Section() Options { return r.sec }

// readBlock reads one block and returns its type and body: everything
// between the length field (or, for a section header, the byte-order
// magic) and the trailing length. The body is valid until the next call.
func (r *Reader) readBlock() (uint32, []byte, error) {
	start := r.off
	var hdr [12]byte
	if n, err := io.ReadFull(r.r, hdr[:8]); err != nil {
		if n == 0 && err == io.EOF {
			return 0, nil, io.EOF
		}
		return 0, nil, fmt.Errorf("pcapng: block at offset %d: header: %w", start, noEOF(err))
	}
	hdrLen, minLen := 8, 12
	// The section header's type reads the same in both byte orders; the
	// byte-order magic after the length says how to read everything else,
	// the length included.
	if le.Uint32(hdr[:4]) == blockSHB {
		if _, err := io.ReadFull(r.r, hdr[8:12]); err != nil {
			return 0, nil, fmt.Errorf("pcapng: section header at offset %d: %w", start, noEOF(err))
		}
		switch {
		case le.Uint32(hdr[8:]) == byteOrderMagic:
			r.order = binary.LittleEndian
		case binary.BigEndian.Uint32(hdr[8:]) == byteOrderMagic:
			r.order = binary.BigEndian
		default:
			return 0, nil, fmt.Errorf("pcapng: section header at offset %d: byte-order magic %#x: %w",
				start, le.Uint32(hdr[8:]), ErrCorrupt)
		}
		// type, length, magic, version, section length, trailing length
		hdrLen, minLen = 12, 28
	} else if r.order == nil {
		return 0, nil, fmt.Errorf("pcapng: block type %#x at offset 0: %w", le.Uint32(hdr[:4]), ErrNotPcapng)
	}
	typ, length := r.order.Uint32(hdr[:4]), r.order.Uint32(hdr[4:8])
	switch {
	case length > MaxBlockLen:
		return 0, nil, fmt.Errorf("pcapng: block type %#x at offset %d: length %d exceeds %d: %w",
			typ, start, length, MaxBlockLen, ErrBlockTooLarge)
	case int(length) < minLen || length%4 != 0:
		return 0, nil, fmt.Errorf("pcapng: block type %#x at offset %d: invalid length %d: %w",
			typ, start, length, ErrCorrupt)
	}
	rest, err := r.fill(int(length) - hdrLen)
	if err != nil {
		return 0, nil, fmt.Errorf("pcapng: block type %#x at offset %d: body: %w", typ, start, noEOF(err))
	}
	if trail := r.order.Uint32(rest[len(rest)-4:]); trail != length {
		return 0, nil, fmt.Errorf("pcapng: block type %#x at offset %d: trailing length %d, want %d: %w",
			typ, start, trail, length, ErrCorrupt)
	}
	r.off += int64(length)
	return typ, rest[:len(rest)-4], nil
}

// fill reads n bytes into r.buf. It grows the buffer as data arrives rather
// than trusting the length field up front, so a short hostile input cannot
// make it allocate MaxBlockLen.
func (r *Reader) fill(n int) ([]byte, error) {
	const chunk = 1 << 20
	r.buf = r.buf[:0]
	for len(r.buf) < n {
		m := min(n-len(r.buf), chunk)
		r.buf = slices.Grow(r.buf, m)
		got, err := io.ReadFull(r.r, r.buf[len(r.buf):len(r.buf)+m])
		r.buf = r.buf[:len(r.buf)+got]
		if err != nil {
			return nil, err
		}
	}
	return r.buf, nil
}

// handleSection starts a new section: interface ids restart.
func (r *Reader) handleSection(typ uint32, body []byte) error {
	if typ != blockSHB { // unreachable: readBlock only accepts a leading SHB
		return fmt.Errorf("pcapng: block type %#x at offset 0: %w", typ, ErrNotPcapng)
	}
	start := r.off - int64(len(body)) - 16
	major, minor := r.order.Uint16(body[0:]), r.order.Uint16(body[2:])
	if major != 1 {
		return fmt.Errorf("pcapng: section header at offset %d: version %d.%d: %w", start, major, minor, ErrVersion)
	}
	r.sec, r.ifs = Options{}, nil
	err := r.options(body[12:], func(code uint16, val []byte) {
		switch code {
		case optComment:
			r.sec.Comment = joinComment(r.sec.Comment, val)
		case optSHBUserAppl:
			r.sec.Application = string(val)
		}
	})
	if err != nil {
		return fmt.Errorf("pcapng: section header at offset %d: %w", start, err)
	}
	return nil
}

func (r *Reader) parseInterface(body []byte) error {
	if len(body) < 8 {
		return fmt.Errorf("body of %d bytes: %w", len(body), ErrCorrupt)
	}
	ifc := readIface{resol: 6} // microseconds unless if_tsresol says otherwise
	ifc.LinkType = LinkType(r.order.Uint16(body[0:]))
	ifc.SnapLen = r.order.Uint32(body[4:])
	err := r.options(body[8:], func(code uint16, val []byte) {
		switch {
		case code == optIfName:
			ifc.Name = string(val)
		case code == optIfDescription:
			ifc.Description = string(val)
		case code == optIfTSResol && len(val) >= 1:
			ifc.resol = val[0]
		case code == optIfTSOffset && len(val) == 8:
			ifc.offset = int64(r.order.Uint64(val))
		}
	})
	if err != nil {
		return err
	}
	r.ifs = append(r.ifs, ifc)
	return nil
}

func (r *Reader) parseEPB(body []byte) (Packet, error) {
	if len(body) < 20 {
		return Packet{}, fmt.Errorf("body of %d bytes: %w", len(body), ErrCorrupt)
	}
	id := r.order.Uint32(body[0:])
	if uint64(id) >= uint64(len(r.ifs)) {
		return Packet{}, fmt.Errorf("interface %d: %w", id, ErrUnknownInterface)
	}
	ts := uint64(r.order.Uint32(body[4:]))<<32 | uint64(r.order.Uint32(body[8:]))
	capLen, origLen := r.order.Uint32(body[12:]), r.order.Uint32(body[16:])
	if uint64(capLen) > uint64(len(body)-20) {
		return Packet{}, fmt.Errorf("captured length %d exceeds the block: %w", capLen, ErrCorrupt)
	}
	ifc := &r.ifs[id]
	at, err := ifc.time(ts)
	if err != nil {
		return Packet{}, err
	}
	p := Packet{
		Interface: int(id),
		Time:      at,
		Data:      bytes.Clone(body[20 : 20+capLen]),
		OrigLen:   int(origLen),
	}
	opts := body[min(20+pad4(int(capLen)), len(body)):]
	err = r.options(opts, func(code uint16, val []byte) {
		switch {
		case code == optComment:
			p.Comment = joinComment(p.Comment, val)
		case code == optEPBFlags && len(val) == 4:
			// 0b11 is not a direction; call it unknown.
			if d := Direction(r.order.Uint32(val) & 3); d <= DirOutbound {
				p.Dir = d
			}
		}
	})
	return p, err
}

// parseSPB decodes a Simple Packet Block: interface 0, no timestamp, data
// cut to the interface's snap length.
func (r *Reader) parseSPB(body []byte) (Packet, error) {
	if len(body) < 4 {
		return Packet{}, fmt.Errorf("body of %d bytes: %w", len(body), ErrCorrupt)
	}
	if len(r.ifs) == 0 {
		return Packet{}, fmt.Errorf("interface 0: %w", ErrUnknownInterface)
	}
	origLen := r.order.Uint32(body)
	n := min(uint64(origLen), uint64(len(body)-4))
	if snap := r.ifs[0].SnapLen; snap != 0 {
		n = min(n, uint64(snap))
	}
	return Packet{Data: bytes.Clone(body[4 : 4+n]), OrigLen: int(origLen)}, nil
}

// options walks a block's options, calling fn for each until opt_endofopt
// or the end of b.
func (r *Reader) options(b []byte, fn func(code uint16, val []byte)) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return fmt.Errorf("%d stray bytes after the options: %w", len(b), ErrCorrupt)
		}
		code, n := r.order.Uint16(b), int(r.order.Uint16(b[2:]))
		if code == optEndOfOpt {
			return nil
		}
		if 4+n > len(b) {
			return fmt.Errorf("option %d: length %d exceeds the block: %w", code, n, ErrCorrupt)
		}
		fn(code, b[4:4+n])
		b = b[min(4+pad4(n), len(b)):]
	}
	return nil
}

// noEOF turns io.EOF inside a block into io.ErrUnexpectedEOF: only a clean
// end between blocks is the end of the capture.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func joinComment(have string, val []byte) string {
	if have == "" {
		return string(val)
	}
	return have + "\n" + string(val)
}

// maxUnixSec is the latest Unix second a time.Time holds: it counts
// seconds from the year 1 in an int64.
const maxUnixSec = math.MaxInt64 - 62_135_596_800

// time converts a timestamp in the interface's units to a time.Time in
// UTC. Resolutions finer than a nanosecond are truncated. One past what a
// time.Time holds (in seconds, a uint64 can count to the year 5.8e11) is
// corrupt.
func (ifc *readIface) time(units uint64) (time.Time, error) {
	var sec, nsec uint64
	exp := uint(ifc.resol & 0x7f)
	if ifc.resol&0x80 != 0 { // 2^-exp seconds
		if exp < 64 {
			sec = units >> exp
			frac := units & (1<<exp - 1)
			hi, lo := bits.Mul64(frac, 1e9)
			nsec = shr128(hi, lo, exp)
		} else {
			hi, lo := bits.Mul64(units, 1e9)
			nsec = shr128(hi, lo, exp)
		}
	} else if exp <= 19 { // 10^-exp seconds; 10^19 still fits in a uint64
		p := pow10(exp)
		sec = units / p
		hi, lo := bits.Mul64(units%p, 1e9)
		nsec, _ = bits.Div64(hi, lo, p) // hi < p since units%p < p
	} else if exp-9 <= 19 { // the whole value is less than a second
		nsec = units / pow10(exp-9)
	}
	s, ok := addOffset(sec, ifc.offset)
	if !ok {
		return time.Time{}, fmt.Errorf("timestamp %d (if_tsresol %#x, if_tsoffset %d) is later than a time can be: %w",
			units, ifc.resol, ifc.offset, ErrCorrupt)
	}
	return time.Unix(s, int64(nsec)).UTC(), nil
}

// addOffset returns sec+off and whether it is at most maxUnixSec. The sum
// of a uint64 and an int64 is computed without wrapping.
func addOffset(sec uint64, off int64) (int64, bool) {
	if off >= 0 {
		sum, carry := bits.Add64(sec, uint64(off), 0)
		return int64(sum), carry == 0 && sum <= maxUnixSec
	}
	back := -uint64(off) // |off|: 1 to 2^63
	if sec >= back {
		d := sec - back
		return int64(d), d <= maxUnixSec
	}
	// back-sec is 1 to 2^63; negating 2^63 as an int64 gives MinInt64,
	// which is the sum.
	return -int64(back - sec), true
}

// shr128 returns the low 64 bits of (hi:lo) >> n.
func shr128(hi, lo uint64, n uint) uint64 {
	switch {
	case n == 0:
		return lo
	case n < 64:
		return lo>>n | hi<<(64-n)
	case n < 128:
		return hi >> (n - 64)
	}
	return 0
}

func pow10(n uint) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}
