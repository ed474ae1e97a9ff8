package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Genesis is the "prev" of a log's first line: the hex SHA-256 of
// "lattice audit log v1".
const Genesis = "9b48e92cc87361edba103b7f803bf66278c55535c426add529242aa85091491b"

// MaxLineLen bounds a line, without its newline. Lines a FileWriter writes
// are far shorter (see MaxDetailLen); Verify rejects longer ones.
const MaxLineLen = 64 << 10

// hashKey introduces the hash that ends every line: the line is
// body + hashKey + 64 hex digits + `"}` + "\n".
const (
	hashKey    = `,"hash":"`
	hashSuffix = len(hashKey) + sha256.Size*2 + len(`"}`)
)

// record is a line as JSON; field order is the order on disk.
type record struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Decision string    `json:"decision,omitempty"`
	Proto    string    `json:"proto,omitempty"`
	Src      string    `json:"src,omitempty"`
	Dst      string    `json:"dst,omitempty"`
	Rule     string    `json:"rule,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	Prev     string    `json:"prev"`
	Hash     string    `json:"hash,omitempty"` // set on decode only; encoding appends it
}

// lineEncoder builds lines; it is not safe for concurrent use.
type lineEncoder struct {
	buf  bytes.Buffer
	enc  *json.Encoder
	line []byte
}

func newLineEncoder() *lineEncoder {
	e := &lineEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false) // "<" stays "<"; the bytes are hashed, not the meaning
	return e
}

// encode returns the line for r (valid until the next call, newline
// included) and its hash.
func (e *lineEncoder) encode(r *record) ([]byte, string, error) {
	e.buf.Reset()
	if err := e.enc.Encode(r); err != nil {
		return nil, "", err
	}
	// Encode wrote {...}\n; the body is everything before the final }.
	body := bytes.TrimSuffix(e.buf.Bytes(), []byte("}\n"))
	sum := sha256.Sum256(body)
	h := hex.EncodeToString(sum[:])
	e.line = append(e.line[:0], body...)
	e.line = append(e.line, hashKey...)
	e.line = append(e.line, h...)
	e.line = append(e.line, "\"}\n"...)
	return e.line, h, nil
}

// parseLine checks one line (without its newline) on its own: that it ends
// in a hash, that the hash is right, and that it is a well-formed entry. The
// chain (prev, seq) is the caller's to check.
func parseLine(raw []byte) (*record, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: empty line", ErrMalformed)
	}
	if len(raw) < 1+hashSuffix || raw[0] != '{' {
		return nil, fmt.Errorf("%w: not an audit entry", ErrMalformed)
	}
	body, tail := raw[:len(raw)-hashSuffix], raw[len(raw)-hashSuffix:]
	hexHash, ok := bytes.CutPrefix(tail, []byte(hashKey))
	if !ok || !bytes.HasSuffix(hexHash, []byte(`"}`)) || !isHex(hexHash[:sha256.Size*2]) {
		return nil, fmt.Errorf("%w: no hash at the end of the line", ErrMalformed)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != string(hexHash[:sha256.Size*2]) {
		return nil, ErrEdited
	}
	// The hash matched, so these bytes are what some writer hashed; the
	// checks below catch a writer (or a forger) that wrote no valid entry.
	var r record
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: invalid JSON: %w", ErrMalformed, err)
	}
	switch {
	case dec.InputOffset() != int64(len(raw)):
		return nil, fmt.Errorf("%w: data after the JSON object", ErrMalformed)
	case r.Seq == 0:
		return nil, fmt.Errorf("%w: no seq", ErrMalformed)
	case len(r.Prev) != sha256.Size*2 || !isHex([]byte(r.Prev)):
		return nil, fmt.Errorf("%w: prev is not a SHA-256", ErrMalformed)
	case r.Kind == "":
		return nil, fmt.Errorf("%w: no kind", ErrMalformed)
	case r.Time.IsZero():
		return nil, fmt.Errorf("%w: no time", ErrMalformed)
	}
	return &r, nil
}

// isHex reports whether b is lowercase hex digits, as hex.EncodeToString
// writes them.
func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
