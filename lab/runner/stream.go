package runner

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/latticelab/lattice/lab/scenario"
)

// A stream's receiver is the lab's, not the node's: its progress (the
// offset it has checked and the running SHA-256) lives in the lab, as an
// application's would on disk, so it outlives a restart of the receiving
// node; the sink then listens again on the node's new netstack. The
// sender is the lab's too, dialing from the sending node's current
// netstack. So with resume, a restart of either end costs a reconnect and
// resends nothing the receiver has; without it, the one TCP connection
// must survive whatever the step's block does.

// StartStream implements scenario.StreamEnv.
func (l *Lab) StartStream(ctx context.Context, spec scenario.StreamSpec) (scenario.StreamRun, error) {
	if spec.Bytes <= 0 {
		return nil, fmt.Errorf("stream of %d bytes: nothing to send", spec.Bytes)
	}
	if _, err := l.node(spec.From); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	s := &stream{l: l, spec: spec, cancel: cancel, done: make(chan struct{}),
		sink: &streamSink{l: l, name: spec.To, st: newStreamState(spec.Bytes, start)},
		sum:  streamSum(spec.Bytes), start: start}
	if _, err := s.sink.ensure(ctx); err != nil {
		cancel(nil)
		return nil, fmt.Errorf("stream receiver on %s: %w", spec.To, err)
	}
	go s.send(ctx)
	return s, nil
}

// stream is one stream step's sender and receiver.
type stream struct {
	l      *Lab
	spec   scenario.StreamSpec
	sink   *streamSink
	sum    [sha256.Size]byte
	start  time.Time
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when send returns
	once   sync.Once

	mu    sync.Mutex // guards the following fields
	conns int        // connections made
	sent  int64      // bytes written, resends included
	err   error      // why send ended without the receiver's ack
}

var _ scenario.StreamRun = (*stream)(nil)

// send runs connections until the receiver has acknowledged the end, the
// stream fails, or ctx ends.
func (s *stream) send(ctx context.Context) {
	defer close(s.done)
	for {
		err := s.session(ctx)
		switch {
		case err == nil:
			return
		case ctx.Err() != nil:
			s.setErr(fmt.Errorf("%w (last: %w)", context.Cause(ctx), err))
			return
		case errors.Is(err, errStreamFailed) || !s.spec.Resume:
			s.setErr(err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errStreamFailed marks an end no reconnect can mend.
var errStreamFailed = errors.New("stream failed")

func (s *stream) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// session is one connection: it learns where the receiver stands, sends
// the rest and the end frame, and waits for the receiver's verdict.
func (s *stream) session(ctx context.Context) error {
	src, err := s.l.node(s.spec.From)
	if err != nil {
		return err
	}
	addr, err := s.sink.ensure(ctx)
	if err != nil {
		return err
	}
	attempt, cancel := context.WithTimeout(ctx, 3*time.Second)
	conn, err := src.overlay().Dial(attempt, "tcp", addr.String())
	cancel()
	if err != nil {
		return fmt.Errorf("connect to %s's stream receiver %v: %w", s.spec.To, addr, err)
	}
	defer conn.Close()
	stop := s.watch(ctx, conn, src)
	defer stop()
	s.mu.Lock()
	s.conns++
	s.mu.Unlock()
	off, err := readResumeOffset(conn, s.spec.Bytes)
	if err != nil {
		return err
	}
	if err := s.write(ctx, conn, off); err != nil {
		return err
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return fmt.Errorf("wait for the receiver's verdict: %w", err)
	}
	if ack[0] != 1 {
		return fmt.Errorf("%w: the receiver's SHA-256 of the stream does not match the sender's", errStreamFailed)
	}
	return nil
}

// readResumeOffset reads the offset the receiver has the stream up to, 0
// to size bytes.
func readResumeOffset(r io.Reader, size int64) (int64, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, fmt.Errorf("read the receiver's offset: %w", err)
	}
	// Compared unsigned: as an int64, an offset of 2^63 or more would be
	// negative and pass.
	off := binary.BigEndian.Uint64(hdr[:])
	if off > uint64(size) {
		return 0, fmt.Errorf("%w: the receiver is at %d of %d bytes", errStreamFailed, off, size)
	}
	return int64(off), nil
}

// write sends the stream from off, paced at the spec's rate, then the end
// frame.
func (s *stream) write(ctx context.Context, conn net.Conn, off int64) error {
	chunk := int64(16 << 10)
	if s.spec.Rate > 0 { // about 20 ms of the rate per frame
		chunk = min(max(int64(s.spec.Rate/8/50), 1<<10), 16<<10)
	}
	buf := make([]byte, 0, streamHeaderLen+int(chunk))
	payload := make([]byte, chunk)
	for off < s.spec.Bytes {
		n := min(chunk, s.spec.Bytes-off)
		streamPattern(payload[:n], off)
		buf = appendStreamFrame(buf[:0], off, payload[:n])
		if _, err := conn.Write(buf); err != nil {
			return fmt.Errorf("send at %d of %d bytes: %w", off, s.spec.Bytes, err)
		}
		off += n
		s.mu.Lock()
		s.sent += n
		sent := s.sent
		s.mu.Unlock()
		if s.spec.Rate > 0 {
			due := s.start.Add(time.Duration(float64(sent) * 8 / s.spec.Rate * float64(time.Second)))
			if err := sleepUntil(ctx, due); err != nil {
				return err
			}
		}
	}
	if _, err := conn.Write(appendEndFrame(buf[:0], s.spec.Bytes, s.sum)); err != nil {
		return fmt.Errorf("send the end: %w", err)
	}
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// watch closes conn when ctx ends or the sending node is no longer src
// (it restarted: its sockets died with it, as its program would).
func (s *stream) watch(ctx context.Context, conn net.Conn, src runningNode) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				hangUp(conn)
				return
			case <-t.C:
				if cur, err := s.l.node(s.spec.From); err != nil || cur != src {
					hangUp(conn)
					return
				}
			}
		}
	})
	return func() { close(quit); wg.Wait() }
}

// hangUp ends conn and wakes whatever waits on it (a past deadline wakes
// a netstack's blocked write, which a close alone may not).
func hangUp(conn net.Conn) {
	_ = conn.SetDeadline(time.Unix(1, 0))
	_ = conn.Close()
}

// Stats implements scenario.StreamRun.
func (s *stream) Stats() scenario.StreamStats {
	st := s.sink.stats(time.Now())
	s.mu.Lock()
	st.Reconnects = max(s.conns-1, 0)
	s.mu.Unlock()
	return st
}

// Wait implements scenario.StreamRun.
func (s *stream) Wait(ctx context.Context) (scenario.StreamStats, error) {
	select {
	case <-s.done:
	case <-ctx.Done():
		return s.Stats(), context.Cause(ctx)
	}
	st := s.Stats()
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		st.Lost += s.spec.Bytes - st.Received - st.Lost - st.Corrupted // never arrived
	}
	return st, err
}

// Close implements scenario.StreamRun.
func (s *stream) Close() error {
	s.once.Do(func() {
		s.cancel(errors.New("stream closed"))
		<-s.done
		s.sink.close()
	})
	return nil
}

// streamSink is a stream's receiver, listening on the receiving node's
// current netstack.
type streamSink struct {
	l    *Lab
	name string
	wg   sync.WaitGroup

	take sync.Mutex // serializes taking over connections

	mu     sync.Mutex // guards the following fields
	st     *streamState
	node   runningNode // what ln listens on
	ln     net.Listener
	addr   netip.AddrPort
	cur    *sinkConn
	closed bool
}

type sinkConn struct {
	net.Conn
	done chan struct{} // closed when its reader returns
}

// ensure listens on the receiving node's current netstack, if not yet,
// and returns the address.
func (k *streamSink) ensure(ctx context.Context) (netip.AddrPort, error) {
	rn, err := k.l.node(k.name)
	if err != nil {
		return netip.AddrPort{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case k.closed:
		return netip.AddrPort{}, errors.New("stream closed")
	case k.ln != nil && k.node == rn:
		return k.addr, nil
	case k.ln != nil:
		_ = k.ln.Close() // on the node's last netstack
	}
	ln, err := rn.overlay().Listen(ctx, "tcp", ":0")
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("listen on %s's overlay: %w", k.name, err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return netip.AddrPort{}, fmt.Errorf("listener address %v: %w", ln.Addr(), err)
	}
	k.ln, k.node, k.addr = ln, rn, netip.AddrPortFrom(rn.addr(), ap.Port())
	k.wg.Go(func() { k.accept(ln) })
	return k.addr, nil
}

func (k *streamSink) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		k.takeOver(c)
	}
}

// takeOver makes c the stream's connection: a new connection means the
// sender gave up the last one, whose reader must finish before c learns
// the offset.
func (k *streamSink) takeOver(c net.Conn) {
	k.take.Lock()
	defer k.take.Unlock()
	sc := &sinkConn{Conn: c, done: make(chan struct{})}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		_ = c.Close()
		return
	}
	old := k.cur
	k.cur = sc
	k.mu.Unlock()
	if old != nil {
		hangUp(old)
		<-old.done
	}
	k.wg.Go(func() { k.serve(sc) })
}

// serve tells the sender the offset and checks its frames until the end.
func (k *streamSink) serve(c *sinkConn) {
	defer close(c.done)
	defer c.Close()
	k.mu.Lock()
	got := k.st.got
	k.mu.Unlock()
	if _, err := c.Write(binary.BigEndian.AppendUint64(nil, uint64(got))); err != nil {
		return
	}
	buf := make([]byte, maxStreamFrame)
	for {
		f, err := readStreamFrame(c, buf)
		if err != nil {
			return
		}
		k.mu.Lock()
		if f.end {
			ok, err := k.st.end(f)
			k.mu.Unlock()
			if err == nil {
				_, _ = c.Write([]byte{boolByte(ok)})
			}
			return
		}
		err = k.st.data(f, time.Now())
		k.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// stats is what the receiver has checked, at now.
func (k *streamSink) stats(now time.Time) scenario.StreamStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.st
	out := scenario.StreamStats{Received: st.got - st.lost - st.bad, Lost: st.lost, Duplicated: st.dup, Corrupted: st.bad,
		MaxStall: st.maxStall, StallAt: st.stallAt, Done: st.done, SHAOK: st.shaOK, Elapsed: now.Sub(st.start)}
	if st.done {
		out.Elapsed = st.last.Sub(st.start)
	}
	if stall := now.Sub(st.last); !st.done && stall > out.MaxStall { // stalled now
		out.MaxStall, out.StallAt = stall, now.Sub(st.start)
	}
	return out
}

// close stops listening and reading and waits for the goroutines.
func (k *streamSink) close() {
	k.mu.Lock()
	k.closed = true
	if k.ln != nil {
		_ = k.ln.Close()
	}
	cur := k.cur
	k.mu.Unlock()
	if cur != nil {
		hangUp(cur)
	}
	k.wg.Wait()
}
