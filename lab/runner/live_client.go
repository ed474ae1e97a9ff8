package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
)

// CallLive sends req to the live lab in stateDir and returns its answer
// and the connection, still open, positioned after the answer (a
// capture's stream follows it); the caller closes the connection. A lab
// that does not answer is ErrNoLiveLab.
func CallLive(ctx context.Context, stateDir string, req LiveRequest) (LiveResponse, net.Conn, error) {
	sock := filepath.Join(stateDir, LiveSocketFile)
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return LiveResponse{}, nil, fmt.Errorf("%w in %s: %w", ErrNoLiveLab, stateDir, err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		stop()
		c.Close()
		return LiveResponse{}, nil, fmt.Errorf("live: send %s: %w", req.Op, err)
	}
	// A capture's answer is read byte by byte up to its newline, so
	// nothing of the stream that follows is left in a buffer.
	br := bufio.NewReader(c)
	if req.Op == "capture" {
		br = bufio.NewReaderSize(&byteReader{c}, 16)
	}
	var resp LiveResponse
	line, err := readLine(br, maxRequest)
	if err == nil {
		err = json.Unmarshal(line, &resp)
	}
	if err != nil {
		stop()
		c.Close()
		if ctx.Err() != nil {
			return LiveResponse{}, nil, context.Cause(ctx)
		}
		return LiveResponse{}, nil, fmt.Errorf("live: %s: read answer: %w", req.Op, err)
	}
	if !stop() { // ctx ended while reading: c is closed
		return LiveResponse{}, nil, context.Cause(ctx)
	}
	return resp, c, nil
}

// byteReader reads one byte at a time.
type byteReader struct{ c net.Conn }

func (r *byteReader) Read(p []byte) (int, error) { return r.c.Read(p[:min(len(p), 1)]) }

func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		if b == '\n' {
			return line, nil
		}
		if line = append(line, b); len(line) > limit {
			return nil, errors.New("answer too long")
		}
	}
}
