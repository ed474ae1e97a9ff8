package strictyaml

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Integer bounds are stated exactly, not rounded through float64: a uint64
// seed's range ends at 2^64-1, not at 18446744073709552000.
func TestDecodeIntegerBounds(t *testing.T) {
	type ints struct {
		Seed  uint64 `yaml:"seed"`
		Big   int64  `yaml:"big"`
		Small int8   `yaml:"small"`
		Port  uint16 `yaml:"port" min:"1"`
	}
	for _, tc := range []struct {
		name, in, wantErr string
		want              ints
	}{
		{name: "uint64 negative", in: "seed: -1", wantErr: "1 problem:\nf.yaml:1:7: seed: want an integer from 0 to 18446744073709551615, got -1"},
		{name: "uint64 max", in: "seed: 18446744073709551615", want: ints{Seed: 1<<64 - 1}},
		{name: "int64 min", in: "big: -9223372036854775808", want: ints{Big: -1 << 63}},
		{name: "int64 max", in: "big: 9223372036854775807", want: ints{Big: 1<<63 - 1}},
		{name: "int64 above max", in: "big: 9223372036854775808", wantErr: "1 problem:\nf.yaml:1:6: big: want an integer from -9223372036854775808 to 9223372036854775807, got 9223372036854775808"},
		{name: "int8", in: "small: 128", wantErr: "1 problem:\nf.yaml:1:8: small: want an integer from -128 to 127, got 128"},
		{name: "tag bound", in: "port: 0", wantErr: "1 problem:\nf.yaml:1:7: port: want an integer from 1 to 65535, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got ints
			_, err := Decode("f.yaml", []byte(tc.in), &got)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Equal(t, tc.wantErr, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
