package deploy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// KnownFlags returns the flags (with their leading "--") the lattice
// command at path (e.g. ["sandbox", "start"]) accepts, or an error when
// there is no such command.
type KnownFlags func(path []string) (map[string]bool, error)

// CheckFlags verifies that every lattice command line in the manifests
// (container args, exec probes and hooks) names a real command and only
// flags it has, so the manifests cannot drift from the CLI.
func CheckFlags(m *Manifests, known KnownFlags) error {
	var errs []error
	for _, w := range m.Workloads() {
		for _, c := range w.Pod.Spec.Containers {
			if !LatticeImage(&c) {
				continue
			}
			lines := [][]string{c.Args}
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
				if p != nil && p.Exec != nil {
					lines = append(lines, execArgs(p.Exec.Command))
				}
			}
			for _, args := range lines {
				if err := checkLine(args, known); err != nil {
					errs = append(errs, fmt.Errorf("%s: container %s: %w", w.Where(), c.Name, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// execArgs drops the binary from an exec command: /lattice sandbox ...
func execArgs(cmd []string) []string {
	if len(cmd) > 0 && cmd[0] == "/lattice" {
		return cmd[1:]
	}
	return nil
}

// checkLine checks one command line: the leading words are the command's
// path, the rest flags and their values; after "--" comes the agent's own.
func checkLine(args []string, known KnownFlags) error {
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "-") })
	if i < 0 {
		i = len(args)
	}
	path := slices.Clone(args[:i])
	if len(path) == 0 {
		return errors.New("no lattice command in its arguments")
	}
	flags, err := known(path)
	if err != nil {
		return fmt.Errorf("lattice %s: %w", strings.Join(path, " "), err)
	}
	var errs []error
	for _, a := range args[i:] {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(a, "=")
		if !flags[name] {
			errs = append(errs, fmt.Errorf("lattice %s has no flag %s", strings.Join(path, " "), name))
		}
	}
	return errors.Join(errs...)
}
