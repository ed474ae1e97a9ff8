package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/latticelab/lattice/internal/unixhttp"
)

// The control socket (StateDir/sandbox.sock, mode 0600) is how `lattice
// sandbox agent` talks to a running sandbox: HTTP over a unix socket.
//
//	GET  /status               Status as JSON
//	GET  /resolve?name=NAME    Resolution as JSON
//	POST /dial?network=tcp&address=HOST:PORT
//	                           DialResult as JSON: connects as the agent
//	                           would (policy and audit included), then hangs up

// SocketName is the control socket's name in the state directory.
const SocketName = "sandbox.sock"

// DialResult is the answer to a test dial.
type DialResult struct {
	Address string        `json:"address"`
	Remote  string        `json:"remote,omitempty"`
	Denied  bool          `json:"denied,omitempty"`
	Error   string        `json:"error,omitempty"`
	Time    time.Duration `json:"time"`
}

// API is what the control socket serves.
type API interface {
	Status() Status
	Dial(ctx context.Context, network, address string) (net.Conn, error)
	Resolve(ctx context.Context, host string) (Resolution, error)
}

// ServeAPI serves api on the unix socket path until the returned function
// is called.
func ServeAPI(path string, api API) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, api.Status()) })
	mux.HandleFunc("GET /resolve", func(w http.ResponseWriter, r *http.Request) {
		res, err := api.Resolve(r.Context(), r.URL.Query().Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		writeJSON(w, res)
	})
	mux.HandleFunc("POST /dial", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		network := q.Get("network")
		if network == "" {
			network = "tcp"
		}
		res := DialResult{Address: q.Get("address")}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		start := time.Now()
		c, err := api.Dial(ctx, network, res.Address)
		res.Time = time.Since(start)
		if err != nil {
			res.Error, res.Denied = err.Error(), errors.Is(err, ErrDenied)
		} else {
			res.Remote = c.RemoteAddr().String()
			c.Close()
		}
		writeJSON(w, res)
	})
	stop, err = unixhttp.Serve(path, mux)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return stop, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Client talks to a running sandbox's control socket.
type Client struct{ hc *http.Client }

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client { return &Client{hc: unixhttp.Client(path)} }

func (c *Client) do(ctx context.Context, method, path string, q url.Values, out any) error {
	u := "http://sandbox" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox not reachable (is it running? `lattice sandbox start` serves %s in its --state-dir): %w", SocketName, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sandbox: %s", bytesTrim(body))
	}
	return json.Unmarshal(body, out)
}

func bytesTrim(b []byte) string {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return string(b)
}

// Status asks for the sandbox's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	return st, c.do(ctx, http.MethodGet, "/status", nil, &st)
}

// Resolve asks what name means to the sandbox.
func (c *Client) Resolve(ctx context.Context, name string) (Resolution, error) {
	var r Resolution
	return r, c.do(ctx, http.MethodGet, "/resolve", url.Values{"name": {name}}, &r)
}

// Dial makes the sandbox connect to address as the agent would.
func (c *Client) Dial(ctx context.Context, network, address string) (DialResult, error) {
	var r DialResult
	return r, c.do(ctx, http.MethodPost, "/dial", url.Values{"network": {network}, "address": {address}}, &r)
}
