#!/usr/bin/env bash
# Runs every Go fuzz target in the module for the given time each.
set -euo pipefail
t=${1:-30s}
grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
  dir=$(dirname "$f")
  grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //' | while read -r fn; do
    echo "== $dir $fn ($t)"
    # Minimizing a large input can take a minute and counts no execs:
    # keep it short so the time goes to finding inputs.
    go test "$dir" -run '^$' -fuzz "^$fn\$" -fuzztime "$t" -fuzzminimizetime 5s
  done
done
