package strictyaml

import (
	"errors"
	"testing"
	"time"
)

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		good, "", "a: b", "networks: {a: {cidr: 10.0.0.0/8}}\nsteps: [{ping: {from: a, to: b}}]\n",
		"networks:\n  a: &x {cidr: 10.0.0.0/8}\n  b: *x\n", "- - - -\n", "{[{[{[", "size: 1.5MiB\nloss: 3%\n",
		"wait: 1h\nratio: .5e-3\nversion: 0x1\n", "? [a]\n: b\n", "networks: {a: {<<: {cidr: 1}}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d doc
		start := time.Now()
		pos, err := Decode("f.yaml", data, &d)
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("decoding %d bytes took %v", len(data), el)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error wraps neither ErrInvalid nor ErrTooLarge: %v", err)
			}
			var es *Errors
			if errors.As(err, &es) && len(es.List) == 0 {
				t.Fatal("an Errors with no problems")
			}
			return
		}
		if pos == nil {
			t.Fatal("no positions")
		}
		for i, n := range d.Networks {
			if !n.CIDR.IsValid() {
				t.Fatalf("network %d decoded without its required cidr", i)
			}
		}
		for i, s := range d.Steps {
			if (s.Ping == nil) == (s.Wait == nil) {
				t.Fatalf("step %d: want exactly one action: %+v", i, s)
			}
		}
	})
}
