package link

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Rate
		wantErr string
	}{
		{name: "mbit", in: "100Mbit", want: 100 * Mbit},
		{name: "fractional gbit", in: "1.5Gbit", want: 1500 * Mbit},
		{name: "kbit", in: "500kbit", want: 500 * Kbit},
		{name: "bare number", in: "64000", want: 64000},
		{name: "bit", in: "64000bit", want: 64000},
		{name: "bps", in: "9600bps", want: 9600},
		{name: "Kbps", in: "56Kbps", want: 56 * Kbit},
		{name: "Mbps", in: "10Mbps", want: 10 * Mbit},
		{name: "Gbps", in: "2.5Gbps", want: 2500 * Mbit},
		{name: "tbit", in: "1Tbit", want: Tbit},
		{name: "lower case", in: "100mbit", want: 100 * Mbit},
		{name: "upper case", in: "100MBIT", want: 100 * Mbit},
		{name: "spaces", in: " 10 Mbit ", want: 10 * Mbit},
		{name: "leading dot", in: ".5Mbit", want: 500 * Kbit},
		{name: "trailing dot", in: "5.Mbit", want: 5 * Mbit},
		{name: "precise fraction", in: "1.000000001Gbit", want: Gbit + 1},
		{name: "sub-bit digits truncated", in: "1.0000000019Gbit", want: Gbit + 1},
		{name: "largest", in: "9223372036854775807", want: 9223372036854775807},
		{name: "zero", in: "0", wantErr: `link: rate must be positive, got "0"`},
		{name: "zero with unit", in: "0Mbit", wantErr: `link: rate must be positive, got "0Mbit"`},
		{name: "below one bit", in: "0.5bit", wantErr: `link: rate must be positive, got "0.5bit"`},
		{name: "negative", in: "-5Mbit", wantErr: `link: rate must be positive, got "-5Mbit"`},
		{name: "empty", in: "", wantErr: `link: invalid rate "": want a number and a unit like "100Mbit"`},
		{name: "unit only", in: "Mbit", wantErr: `link: invalid rate "Mbit": want a number and a unit like "100Mbit"`},
		{name: "lone dot", in: ".", wantErr: `link: invalid rate ".": want a number and a unit like "100Mbit"`},
		{name: "two dots", in: "1.2.3Mbit", wantErr: `link: invalid rate "1.2.3Mbit": want a number and a unit like "100Mbit"`},
		{name: "unknown unit", in: "10Xbit", wantErr: `link: invalid rate "10Xbit": unknown unit "Xbit"`},
		{name: "bare prefix", in: "10M", wantErr: `link: invalid rate "10M": unknown unit "M"`},
		{name: "exponent", in: "1e9", wantErr: `link: invalid rate "1e9": unknown unit "e9"`},
		{name: "bytes", in: "10MBps", wantErr: `link: invalid rate "10MBps": unit "MBps" is bytes, rates are in bits ("bit", "bps")`},
		{name: "bytes slash", in: "10MB/s", wantErr: `link: invalid rate "10MB/s": unit "MB/s" is bytes, rates are in bits ("bit", "bps")`},
		{name: "too large", in: "9223372036854775808", wantErr: `link: invalid rate "9223372036854775808": too large`},
		{name: "too large with unit", in: "10000000Tbit", wantErr: `link: invalid rate "10000000Tbit": too large`},
		{name: "too large by fraction", in: "9223372.036854775808Tbit", wantErr: `link: invalid rate "9223372.036854775808Tbit": too large`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRate(tt.in)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestRateString(t *testing.T) {
	tests := []struct {
		name string
		in   Rate
		want string
	}{
		{name: "zero", in: 0, want: "unlimited"},
		{name: "one bit", in: 1, want: "1bit"},
		{name: "kbit", in: 64 * Kbit, want: "64kbit"},
		{name: "fractional kbit", in: 1500, want: "1.5kbit"},
		{name: "mbit", in: 100 * Mbit, want: "100Mbit"},
		{name: "fractional gbit", in: 1500 * Mbit, want: "1.5Gbit"},
		{name: "odd", in: 1234567891, want: "1.234567891Gbit"},
		{name: "small fraction", in: Gbit + 1, want: "1.000000001Gbit"},
		{name: "tbit", in: 40 * Tbit, want: "40Tbit"},
		{name: "negative", in: -5 * Mbit, want: "-5Mbit"},
		{name: "min int", in: -9223372036854775808, want: "-9223372036854775808bit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.in.String())
		})
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100Mbit", "1.5Gbit", "500kbit", "64000", "10Mbps", "0", "-1", "", ".", "1e9", "9223372036854775807", "9.999999999999Tbit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if r != 0 {
				t.Fatalf("ParseRate(%q) = %v with error %v", s, r, err)
			}
			return
		}
		if r <= 0 {
			t.Fatalf("ParseRate(%q) = %d, want positive", s, r)
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRate(%q) = %d, String %q parses back to %d, %v", s, r, r.String(), back, err)
		}
	})
}
