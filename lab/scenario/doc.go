// Package scenario reads lattice-lab scenario files: a topology (a path or
// inline, see lab/topology) and a timeline of steps that act on it and check
// what happens. Parse decodes a file strictly (internal/strictyaml), resolves
// its topology and checks every step against it, reporting each problem at
// its file:line:col; Schema is the format's JSON Schema, generated from the
// same types.
//
// # Steps
//
// Each step is a type implementing Action: it checks itself against the
// topology while the timeline is walked (check), names itself in progress
// output (Describe) and carries itself out (Run) against an Env, which
// lab/runner implements on a running lab. The types live in files by
// family: paths.go, traffic.go, stream.go (data through a fault),
// lifecycle.go and refused.go, faults.go, timeline.go and sandbox.go, each
// with the part of Env its steps need (PathEnv, TrafficEnv, StreamEnv, ...).
//
// A new step is a type in its family's file with those three methods, and
// a field of that type in Step, whose yaml tag is the step's key
// (Step.Action finds the one that is set, so nothing else dispatches on
// it). A step that needs something the lab cannot do yet adds a method to
// its family's Env interface and lab/runner implements it in its file of
// the same family. Steps that share a payload (start, stop and restart all
// name a Target) are distinct types over it whose JSON Schema is the
// payload's, so the published schema describes the payload once.
package scenario
