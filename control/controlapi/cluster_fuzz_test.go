package controlapi

import (
	"strings"
	"testing"
)

// FuzzParseServers: a NATS URL list (from a flag, or a registration
// answer's nats.urls) never panics the parser; what it accepts is one
// plain URL per item, all TLS or all plaintext, and plaintext only to
// loopback or with insecure=1.
func FuzzParseServers(f *testing.F) {
	f.Add("nats://127.0.0.1:4222")
	f.Add("tls://a.example:4222?fingerprint=" + strings.Repeat("ab", 32) + ",tls://b.example:4222")
	f.Add("nats://10.0.0.1:4222?insecure=1, nats://10.0.0.2:4222?insecure=1")
	f.Add("tls://a:1,nats://127.0.0.1:2")
	f.Add(",,")
	f.Fuzz(func(t *testing.T, list string) {
		urls := SplitURLs(list)
		ns, err := parseServers(urls)
		if err != nil {
			return
		}
		if len(ns.plain) != len(urls) || len(ns.eps) != len(urls) {
			t.Fatalf("%d URLs parsed into %d", len(urls), len(ns.plain))
		}
		for _, ep := range ns.eps {
			if ep.isTLS() != (ns.tls != nil) {
				t.Fatalf("%s: TLS setting not shared", ep.plainURL())
			}
			if ep.isHTTP() {
				t.Fatalf("%s: an HTTP URL accepted for NATS", ep.plainURL())
			}
		}
	})
}
