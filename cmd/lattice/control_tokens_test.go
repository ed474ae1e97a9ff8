package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/latticelab/lattice/control"
)

// TestReadTokensTags: a token line's tags= field gives the token its tags,
// before or after the expiry; a bad one is named with its line.
func TestReadTokensTags(t *testing.T) {
	exp := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, file string
		want       []control.JoinToken
		wantErr    string // after "PATH:"
	}{
		{"tags", "router-token-0123456789 tags=router,db\n", []control.JoinToken{{Value: "router-token-0123456789", Tags: []string{"router", "db"}}}, ""},
		{"tags then expiry", "router-token-0123456789 tags=router 2027-01-01T00:00:00Z\n",
			[]control.JoinToken{{Value: "router-token-0123456789", Tags: []string{"router"}, Expires: exp}}, ""},
		{"expiry then tags", "router-token-0123456789 2027-01-01T00:00:00Z tags=router\n",
			[]control.JoinToken{{Value: "router-token-0123456789", Tags: []string{"router"}, Expires: exp}}, ""},
		{"bad tag", "plain-token-0123456789\nrouter-token-0123456789 tags=router,Exit\n", nil,
			`2: tag "Exit": use 1-63 lowercase letters, digits and inner hyphens`},
		{"empty tag", "router-token-0123456789 tags=\n", nil, `1: tag "": use 1-63 lowercase letters, digits and inner hyphens`},
		{"tags twice", "router-token-0123456789 tags=a tags=b\n", nil, "1: tags= given twice"},
		{"two expiries", "router-token-0123456789 2027-01-01T00:00:00Z 2028-01-01T00:00:00Z\n", nil,
			`1: "2028-01-01T00:00:00Z": an expiry was given already; tags go as tags=T1,T2`},
		{"four fields", "router-token-0123456789 a b c\n", nil, "1: want TOKEN [EXPIRY] [tags=T1,T2], got 4 fields"},
		{"token twice", "# routers\nrouter-token-0123456789 tags=router\nplain-token-0123456789\nrouter-token-0123456789 tags=db\n", nil,
			"4: the token on line 2 again; keep one line per token"},
		{"bad expiry", "router-token-0123456789 2027-13-01\n", nil, `1: expiry "2027-13-01" is not RFC 3339 (e.g. 2027-01-01T00:00:00Z)`},
		{"short token", "\n\nshort\n", nil, "3: token is 5 characters; use at least 16"},
		{"only comments", "# no tokens yet\n\n", nil, " no tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writePrivate(t, "tokens", []byte(tc.file))
			got, err := readTokens(path)
			if tc.wantErr != "" {
				require.EqualError(t, err, path+":"+tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
