package pcapng

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sync"
	"time"
	"unicode/utf8"
)

// le is the byte order Writer emits; readers learn it from the section
// header's byte-order magic.
var le = binary.LittleEndian

// Options configures the section a Writer starts. The zero value works.
type Options struct {
	// Application names the program that wrote the file (shb_userappl).
	// If empty, "lattice-lab".
	Application string
	// Comment annotates the whole file (opt_comment on the section
	// header). If empty, none is written.
	Comment string
}

// Interface describes one capture point: a link, a NAT's WAN side, a host's
// interface.
type Interface struct {
	// Name identifies the capture point (if_name), e.g. "nat-a/wan". It
	// is what tshark prints for frame.interface_name.
	Name string
	// Description is free text (if_description). If empty, none is
	// written.
	Description string
	// LinkType says how packet data is framed. If zero, LinkTypeRaw.
	LinkType LinkType
	// SnapLen is the most bytes of each packet kept; WritePacket
	// truncates longer packets and records their original length. If
	// zero, DefaultSnapLen. At most MaxSnapLen.
	SnapLen uint32
}

// Packet is one captured packet.
type Packet struct {
	// Interface is the id AddInterface returned for the capture point.
	Interface int
	// Time is when the packet was seen. It is written with nanosecond
	// resolution; times before the Unix epoch are written as the epoch,
	// times after 2554-07-21T23:34:33.709551615Z (the last nanosecond a
	// uint64 counts) as that.
	Time time.Time
	// Data is the packet, starting at the interface's link-layer header
	// (the IP header for LinkTypeRaw). WritePacket keeps the first
	// SnapLen bytes. Reader returns a fresh copy.
	Data []byte
	// OrigLen is the packet's length on the wire. If zero, len(Data).
	// It must not be smaller than len(Data).
	OrigLen int
	// Dir is the direction at the capture point. DirUnknown writes no
	// epb_flags.
	Dir Direction
	// Comment annotates the packet (opt_comment), e.g. why a NAT dropped
	// it. Empty means none. Comments longer than 65535 bytes are cut
	// at a UTF-8 character boundary. Reader joins several opt_comment
	// options with newlines.
	Comment string
}

// Writer writes one pcapng section. It is safe for concurrent use, so
// several capture points can share one file; packets appear in the order
// WritePacket calls take the Writer's lock.
//
// Output is buffered: call Flush to push written packets to the underlying
// io.Writer and Close when done. The first error WritePacket returns
// (a rejected packet or a failed write) is remembered and reported again by
// Flush and Close, so callers on a packet path may ignore WritePacket's
// result and check Close. After a write to the underlying io.Writer fails,
// every later call fails with that error.
type Writer struct {
	closer io.Closer // the file Create opened; nil for NewWriter

	mu       sync.Mutex // guards the following fields
	bw       *bufio.Writer
	snap     []uint32 // SnapLen of each interface, indexed by id
	err      error    // first WritePacket error, reported by Flush and Close
	ioErr    error    // first failed write; sticky
	closed   bool
	packets  uint64   // written by WritePacket
	closeErr error    // Close's result, returned again by later Close calls
	scratch  [32]byte // block header, then option headers and trailer
}

// bufSize is the bufio.Writer size: big enough that a busy capture issues
// few write syscalls, small enough not to matter per Writer.
const bufSize = 64 << 10

// NewWriter starts a pcapng section on w and writes its Section Header
// Block. The Writer buffers; Close flushes but does not close w.
func NewWriter(w io.Writer, opts Options) (*Writer, error) {
	if opts.Application == "" {
		opts.Application = "lattice-lab"
	}
	if err := checkOption("application", opts.Application); err != nil {
		return nil, fmt.Errorf("pcapng: new writer: %w", err)
	}
	if err := checkOption("comment", opts.Comment); err != nil {
		return nil, fmt.Errorf("pcapng: new writer: %w", err)
	}

	// Section Header Block body: byte-order magic, version 1.0, section
	// length -1 ("not specified": we stream and never seek back).
	b := make([]byte, 0, 64+len(opts.Application)+len(opts.Comment))
	b = le.AppendUint32(b, byteOrderMagic)
	b = le.AppendUint16(b, 1)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint64(b, math.MaxUint64)
	b = appendOption(b, optSHBUserAppl, opts.Application)
	if opts.Comment != "" {
		b = appendOption(b, optComment, opts.Comment)
	}
	b = le.AppendUint32(b, optEndOfOpt)

	wr := &Writer{bw: bufio.NewWriterSize(w, bufSize)}
	if err := wr.writeBlock(blockSHB, b); err != nil {
		return nil, fmt.Errorf("pcapng: new writer: write section header: %w", err)
	}
	return wr, nil
}

// Create creates (or truncates) the file at path with mode 0644, so
// Wireshark running as another user can open it, and starts a Writer on
// it. Close closes the file.
func Create(path string, opts Options) (*Writer, error) {
	return CreateWith(path, opts, os.OpenFile)
}

// CreateWith is Create opening the file with open (for example one that
// gives the file it creates to another user, internal/owner).
func CreateWith(path string, opts Options, open func(name string, flag int, perm os.FileMode) (*os.File, error)) (*Writer, error) {
	f, err := open(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644) //nolint:gosec // captures are meant to be shared; path is the caller's choice
	if err != nil {
		return nil, fmt.Errorf("pcapng: create: %w", err)
	}
	w, err := NewWriter(f, opts)
	if err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	w.closer = f
	return w, nil
}

// AddInterface writes an Interface Description Block for a capture point
// and returns the id packets captured there pass as Packet.Interface. Ids
// count up from 0.
func (w *Writer) AddInterface(ifc Interface) (int, error) {
	if ifc.LinkType == 0 {
		ifc.LinkType = LinkTypeRaw
	}
	if ifc.SnapLen == 0 {
		ifc.SnapLen = DefaultSnapLen
	}
	if ifc.SnapLen > MaxSnapLen {
		return 0, fmt.Errorf("pcapng: add interface %q: snap length %d exceeds %d: %w",
			ifc.Name, ifc.SnapLen, MaxSnapLen, ErrInvalid)
	}
	if err := checkOption("name", ifc.Name); err != nil {
		return 0, fmt.Errorf("pcapng: add interface: %w", err)
	}
	if err := checkOption("description", ifc.Description); err != nil {
		return 0, fmt.Errorf("pcapng: add interface %q: %w", ifc.Name, err)
	}

	b := make([]byte, 0, 48+len(ifc.Name)+len(ifc.Description))
	b = le.AppendUint16(b, uint16(ifc.LinkType))
	b = le.AppendUint16(b, 0) // reserved
	b = le.AppendUint32(b, ifc.SnapLen)
	if ifc.Name != "" {
		b = appendOption(b, optIfName, ifc.Name)
	}
	if ifc.Description != "" {
		b = appendOption(b, optIfDescription, ifc.Description)
	}
	b = appendOption(b, optIfTSResol, string([]byte{tsResolNanos}))
	b = le.AppendUint32(b, optEndOfOpt)

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, fmt.Errorf("pcapng: add interface %q: %w", ifc.Name, ErrClosed)
	}
	if w.ioErr != nil {
		return 0, fmt.Errorf("pcapng: add interface %q: %w", ifc.Name, w.ioErr)
	}
	if err := w.writeBlock(blockIDB, b); err != nil {
		w.ioErr = err
		return 0, fmt.Errorf("pcapng: add interface %q: %w", ifc.Name, err)
	}
	w.snap = append(w.snap, ifc.SnapLen)
	return len(w.snap) - 1, nil
}

// WritePacket writes an Enhanced Packet Block. It copies p.Data into the
// Writer's buffer before returning, so the caller may reuse it, and it
// allocates nothing on success.
func (w *Writer) WritePacket(p Packet) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.writePacketLocked(&p); err != nil {
		if w.err == nil {
			w.err = err
		}
		return err
	}
	return nil
}

func (w *Writer) writePacketLocked(p *Packet) error {
	if w.closed {
		return fmt.Errorf("pcapng: write packet: %w", ErrClosed)
	}
	if w.ioErr != nil {
		return fmt.Errorf("pcapng: write packet: %w", w.ioErr)
	}
	if p.Interface < 0 || p.Interface >= len(w.snap) {
		return fmt.Errorf("pcapng: write packet: interface %d: %w", p.Interface, ErrUnknownInterface)
	}
	if p.Dir > DirOutbound {
		return fmt.Errorf("pcapng: write packet: direction %d: %w", p.Dir, ErrInvalid)
	}
	orig := p.OrigLen
	if orig == 0 {
		orig = len(p.Data)
	}
	if orig < len(p.Data) || uint64(orig) > math.MaxUint32 {
		return fmt.Errorf("pcapng: write packet: original length %d with %d bytes captured: %w",
			p.OrigLen, len(p.Data), ErrInvalid)
	}
	data := p.Data
	if snap := w.snap[p.Interface]; uint64(len(data)) > uint64(snap) {
		data = data[:snap]
	}
	comment := truncateUTF8(p.Comment, maxOptionLen)

	// Block layout (section 4.3): type, total length, interface id,
	// timestamp (high, low), captured length, original length, data
	// padded to 32 bits, options, total length again.
	optLen := 0
	if p.Dir != DirUnknown {
		optLen += 8
	}
	if comment != "" {
		optLen += 4 + pad4(len(comment))
	}
	if optLen > 0 {
		optLen += 4 // opt_endofopt
	}
	total := 28 + pad4(len(data)) + optLen + 4
	ts := timestamp(p.Time)

	s := w.scratch[:]
	le.PutUint32(s[0:], blockEPB)
	le.PutUint32(s[4:], uint32(total))
	le.PutUint32(s[8:], uint32(p.Interface))
	le.PutUint32(s[12:], uint32(ts>>32))
	le.PutUint32(s[16:], uint32(ts))
	le.PutUint32(s[20:], uint32(len(data)))
	le.PutUint32(s[24:], uint32(orig))
	if err := w.write(s[:28]); err != nil {
		return err
	}
	if err := w.write(data); err != nil {
		return err
	}

	// Padding after the data, then the options up to the comment text.
	n := pad4(len(data)) - len(data)
	clear(s[:n])
	if p.Dir != DirUnknown {
		le.PutUint16(s[n:], optEPBFlags)
		le.PutUint16(s[n+2:], 4)
		le.PutUint32(s[n+4:], uint32(p.Dir))
		n += 8
	}
	if comment != "" {
		le.PutUint16(s[n:], optComment)
		le.PutUint16(s[n+2:], uint16(len(comment)))
		n += 4
	}
	if err := w.write(s[:n]); err != nil {
		return err
	}
	if comment != "" {
		if _, err := w.bw.WriteString(comment); err != nil {
			w.ioErr = err
			return fmt.Errorf("pcapng: write packet: %w", err)
		}
	}

	// Comment padding, opt_endofopt, trailing total length.
	n = pad4(len(comment)) - len(comment)
	clear(s[:n])
	if optLen > 0 {
		le.PutUint32(s[n:], optEndOfOpt)
		n += 4
	}
	le.PutUint32(s[n:], uint32(total))
	if err := w.write(s[:n+4]); err != nil {
		return err
	}
	w.packets++
	return nil
}

// Packets reports how many packets have been written, so a caller can tell
// a capture that saw nothing.
func (w *Writer) Packets() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.packets
}

// write writes b to the buffer and makes a failure sticky. The caller holds
// w.mu.
func (w *Writer) write(b []byte) error {
	if _, err := w.bw.Write(b); err != nil {
		w.ioErr = err
		return fmt.Errorf("pcapng: write packet: %w", err)
	}
	return nil
}

// Flush writes buffered blocks to the underlying io.Writer. It returns the
// first error any WritePacket returned, if any, else the flush's error.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("pcapng: flush: %w", ErrClosed)
	}
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.ioErr == nil {
		if err := w.bw.Flush(); err != nil {
			w.ioErr = err
			if w.err == nil {
				w.err = fmt.Errorf("pcapng: flush: %w", err)
			}
		}
	}
	if w.err != nil {
		return w.err
	}
	if w.ioErr != nil {
		return fmt.Errorf("pcapng: flush: %w", w.ioErr)
	}
	return nil
}

// Close flushes, closes the file if Create opened it, and returns the first
// error the Writer saw. It does not close an io.Writer passed to NewWriter.
// Later calls return the same result; every other method then fails with
// ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.closeErr
	}
	w.closed = true
	err := w.flushLocked()
	if w.closer != nil {
		if cerr := w.closer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("pcapng: close: %w", cerr)
		}
	}
	w.closeErr = err
	return err
}

// writeBlock writes a block around body, which must be padded to 32 bits.
// Used for the rare, small header blocks; packets take the
// allocation-free path in writePacketLocked.
func (w *Writer) writeBlock(typ uint32, body []byte) error {
	total := uint32(12 + len(body))
	var hdr [8]byte
	le.PutUint32(hdr[0:], typ)
	le.PutUint32(hdr[4:], total)
	if _, err := w.bw.Write(hdr[:]); err != nil {
		return err
	}
	if _, err := w.bw.Write(body); err != nil {
		return err
	}
	_, err := w.bw.Write(le.AppendUint32(hdr[:0], total))
	return err
}

// appendOption appends an option (code, length, value padded to 32 bits).
func appendOption(b []byte, code uint16, val string) []byte {
	b = le.AppendUint16(b, code)
	b = le.AppendUint16(b, uint16(len(val)))
	b = append(b, val...)
	for range pad4(len(val)) - len(val) {
		b = append(b, 0)
	}
	return b
}

// checkOption rejects a string option too long for its 16-bit length.
func checkOption(what, s string) error {
	if len(s) > maxOptionLen {
		return fmt.Errorf("%s is %d bytes, more than %d: %w", what, len(s), maxOptionLen, ErrInvalid)
	}
	return nil
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// timestamp converts t to nanoseconds since the Unix epoch, clamping
// earlier times to 0. A uint64 of nanoseconds lasts until the year 2554;
// later times clamp to its last nanosecond rather than wrap to 1970.
func timestamp(t time.Time) uint64 {
	sec := t.Unix()
	if sec < 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(sec), 1e9)
	ns, carry := bits.Add64(lo, uint64(t.Nanosecond()), 0)
	if hi != 0 || carry != 0 {
		return math.MaxUint64
	}
	return ns
}
