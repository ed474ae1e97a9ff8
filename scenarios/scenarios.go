// Package scenarios holds lattice-lab's scenario files, embedded so the
// lattice-lab binary can run them from anywhere; scenarios_test.go runs
// every one of them as a subtest of go test ./scenarios/...
package scenarios

import "embed"

// FS holds every scenario file, by base name, and the files they name
// by a path relative to themselves (testdata/, e.g. egress policies).
// Their topology paths (../topologies/NAME.yaml) resolve against package
// topologies' FS.
//
//go:embed *.yaml testdata
var FS embed.FS
