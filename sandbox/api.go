package sandbox

import (
	"bytes"
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
// sandbox agent` and `lattice sandbox exec` talk to a running sandbox:
// HTTP over a unix socket.
//
//	GET  /status               Status as JSON (every mode)
//	GET  /resolve?name=NAME    Resolution as JSON (pod mode)
//	POST /dial?network=tcp&address=HOST:PORT
//	                           DialResult as JSON: connects as the agent
//	                           would (policy and audit included), then
//	                           hangs up (pod mode)
//	POST /run                  ExecRequest in, ExecResult out: runs a
//	                           command as the sandbox's agent (Pro)
//
// An endpoint the sandbox's mode does not have answers 501.

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

// API is what every sandbox's control socket serves. What else it serves
// depends on what the API value can do: Dialer, Resolver, Runner.
type API interface {
	Status() Status
}

// Dialer connects as the agent would.
type Dialer interface {
	Dial(ctx context.Context, network, address string) (net.Conn, error)
}

// Resolver says what a host name means inside the sandbox.
type Resolver interface {
	Resolve(ctx context.Context, host string) (Resolution, error)
}

// Runner runs a command as the sandbox's agent and returns its exit code;
// every IsolationDriver is one.
type Runner interface {
	Run(ctx context.Context, argv []string, stdio Stdio) (int, error)
}

var (
	_ Dialer   = (*PodDriver)(nil)
	_ Resolver = (*PodDriver)(nil)
	_ Runner   = IsolationDriver(nil)
)

// ServeAPI serves api on the unix socket path until the returned function
// is called.
func ServeAPI(path string, api API) (stop func(), err error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, api.Status()) })
	if d, ok := api.(Resolver); ok {
		mux.HandleFunc("GET /resolve", func(w http.ResponseWriter, r *http.Request) {
			res, err := d.Resolve(r.Context(), r.URL.Query().Get("name"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			writeJSON(w, res)
		})
	} else {
		mux.HandleFunc("GET /resolve", unsupported(api))
	}
	if d, ok := api.(Dialer); ok {
		mux.HandleFunc("POST /dial", func(w http.ResponseWriter, r *http.Request) { serveDial(w, r, d) })
	} else {
		mux.HandleFunc("POST /dial", unsupported(api))
	}
	if d, ok := api.(Runner); ok {
		mux.HandleFunc("POST /run", runHandler(d))
	} else {
		mux.HandleFunc("POST /run", unsupported(api))
	}
	stop, err = unixhttp.Serve(path, mux)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return stop, nil
}

func serveDial(w http.ResponseWriter, r *http.Request, d Dialer) {
	q := r.URL.Query()
	network := q.Get("network")
	if network == "" {
		network = "tcp"
	}
	res := DialResult{Address: q.Get("address")}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	c, err := d.Dial(ctx, network, res.Address)
	res.Time = time.Since(start)
	if err != nil {
		res.Error, res.Denied = err.Error(), errors.Is(err, ErrDenied)
	} else {
		res.Remote = c.RemoteAddr().String()
		c.Close()
	}
	writeJSON(w, res)
}

// unsupported answers for an endpoint api's mode does not have.
func unsupported(api API) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		msg := fmt.Sprintf("sandbox: %s %s is not served in %s mode", r.Method, r.URL.Path, api.Status().Mode)
		http.Error(w, msg, http.StatusNotImplemented)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Client talks to a running sandbox's control socket.
type Client struct {
	hc   *http.Client // bounded: quick questions
	long *http.Client // the same connections, unbounded: Run lasts as long as its ctx
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	hc := unixhttp.Client(path)
	return &Client{hc: hc, long: &http.Client{Transport: hc.Transport}}
}

// Close drops the client's idle connections; it is idempotent.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

func (c *Client) do(ctx context.Context, hc *http.Client, method, path string, q url.Values, in, out any) error {
	u := "http://sandbox" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("sandbox: encode %s request: %w", path, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("sandbox not reachable (is it running? `lattice sandbox start` serves %s in its --state-dir): %w", SocketName, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("sandbox: read %s answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sandbox: %s", bytes.TrimRight(data, "\n "))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("sandbox: %s answer: %w", path, err)
	}
	return nil
}

// Status asks for the sandbox's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	return st, c.do(ctx, c.hc, http.MethodGet, "/status", nil, nil, &st)
}

// Resolve asks what name means to the sandbox.
func (c *Client) Resolve(ctx context.Context, name string) (Resolution, error) {
	var r Resolution
	return r, c.do(ctx, c.hc, http.MethodGet, "/resolve", url.Values{"name": {name}}, nil, &r)
}

// Dial makes the sandbox connect to address as the agent would.
func (c *Client) Dial(ctx context.Context, network, address string) (DialResult, error) {
	var r DialResult
	return r, c.do(ctx, c.hc, http.MethodPost, "/dial", url.Values{"network": {network}, "address": {address}}, nil, &r)
}

// Run runs req's command as the sandbox's agent and waits for it, as long
// as ctx allows (ending ctx stops the agent). The error is what kept the
// command from running or finishing (ExecResult.Error); a command that ran
// and failed is a nil error and a non-zero Code.
func (c *Client) Run(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var r ExecResult
	if err := c.do(ctx, c.long, http.MethodPost, "/run", nil, req, &r); err != nil {
		return r, err
	}
	if r.Error != "" {
		return r, errors.New(r.Error)
	}
	return r, nil
}
