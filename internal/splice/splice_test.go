package splice_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/latticelab/lattice/internal/splice"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err = net.DialTCP("tcp4", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	server = <-accepted
	require.NotNil(t, server, "accept failed")
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// proxy splices the server end of client→proxy with the client end of
// proxy→backend, as a relay does, and returns the outer ends and a channel
// closed when Splice returns.
func proxy(t *testing.T) (client, backend *net.TCPConn, done <-chan struct{}) {
	t.Helper()
	client, a := tcpPair(t)
	b, backend := tcpPair(t)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		splice.Splice(a, b)
	}()
	t.Cleanup(func() {
		client.Close()
		backend.Close()
		<-ch
	})
	return client, backend, ch
}

func deadline(t *testing.T, cs ...net.Conn) {
	t.Helper()
	for _, c := range cs {
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	}
}

func waitDone(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Splice did not return")
	}
}

func TestBothWaysIntact(t *testing.T) {
	client, backend, done := proxy(t)
	deadline(t, client, backend)
	up := make([]byte, 1<<20)
	down := make([]byte, 1<<20)
	_, _ = rand.Read(up)
	_, _ = rand.Read(down)

	// Both directions at once, so a splice that serialises them or mixes
	// the streams up shows.
	errc := make(chan error, 2)
	go func() { _, err := client.Write(up); errc <- err }()
	go func() { _, err := backend.Write(down); errc <- err }()
	gotUp := make([]byte, len(up))
	gotDown := make([]byte, len(down))
	readErr := make(chan error, 1)
	go func() { _, err := io.ReadFull(backend, gotUp); readErr <- err }()
	_, err := io.ReadFull(client, gotDown)
	require.NoError(t, err)
	require.NoError(t, <-readErr)
	require.NoError(t, <-errc)
	require.NoError(t, <-errc)
	assert.True(t, bytes.Equal(up, gotUp), "client→backend bytes differ")
	assert.True(t, bytes.Equal(down, gotDown), "backend→client bytes differ")

	client.Close()
	backend.Close()
	waitDone(t, done)
}

// A client that sends its request and half-closes still reads the answer,
// which the backend writes only after it saw the request's end.
func TestHalfClosePassedOn(t *testing.T) {
	client, backend, done := proxy(t)
	deadline(t, client, backend)

	_, err := client.Write([]byte("request"))
	require.NoError(t, err)
	require.NoError(t, client.CloseWrite())

	req, err := io.ReadAll(backend) // ends only if the half-close came through
	require.NoError(t, err)
	assert.Equal(t, "request", string(req))

	_, err = backend.Write([]byte("answer"))
	require.NoError(t, err)
	require.NoError(t, backend.CloseWrite())

	resp, err := io.ReadAll(client)
	require.NoError(t, err, "the client's read side must survive its own half-close")
	assert.Equal(t, "answer", string(resp))
	waitDone(t, done)
}

// A reset on one side tears both down: the other side sees its stream end
// and Splice returns, leaving no goroutine behind.
func TestAbortTearsDown(t *testing.T) {
	client, backend, done := proxy(t)
	deadline(t, client, backend)

	_, err := client.Write([]byte("x"))
	require.NoError(t, err)
	buf := make([]byte, 1)
	_, err = io.ReadFull(backend, buf)
	require.NoError(t, err)

	require.NoError(t, client.SetLinger(0)) // Close sends RST
	require.NoError(t, client.Close())

	waitDone(t, done)
	// The backend never half-closed, so the backend→client copy would
	// still be waiting unless the reset closed its source.
	_, err = backend.Read(buf)
	assert.Error(t, err, "backend must see its connection end")
}

// net.Pipe cannot half-close: a clean end of one direction closes the
// destination, so Splice returns without the other side doing anything.
func TestNoHalfCloseClosesDestination(t *testing.T) {
	client, a := net.Pipe()
	b, backend := net.Pipe()
	t.Cleanup(func() { client.Close(); backend.Close() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		splice.Splice(a, b)
	}()
	deadline(t, client, backend)

	go func() {
		_, _ = client.Write([]byte("hi"))
		_ = client.Close()
	}()
	got, err := io.ReadAll(backend)
	require.NoError(t, err, "the pipe's end must read as EOF once the client closed")
	assert.Equal(t, "hi", string(got))
	waitDone(t, done)

	_, err = backend.Write([]byte("late"))
	assert.True(t, errors.Is(err, io.ErrClosedPipe), "backend's pipe must be closed, got %v", err)
}
