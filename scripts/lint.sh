#!/bin/sh
# Runs golangci-lint with .golangci.yml (STYLE.md's moderate set: errcheck,
# govet, ineffassign, staticcheck, unused, gosec; and errorlint and nilerr
# for its rules on errors) over both editions: the
# community build and `-tags pro` compile different files, and code only
# one of them uses is unused in the other.
#
# The linter is pinned and built once from the module proxy into
# $(go env GOPATH)/bin/golangci-lint-$VERSION (2.5-5 minutes on 2 cores
# with a cold module cache; a toolchain newer than the linter's own would make it refuse the
# code, so it is built with this one).
set -eu
VERSION=v2.15.0
GO=${GO:-go}
bin="$($GO env GOPATH)/bin/golangci-lint-$VERSION"
if [ ! -x "$bin" ]; then
	echo "lint: building golangci-lint $VERSION (once)" >&2
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" $GO install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$VERSION"
	mkdir -p "$(dirname "$bin")"
	mv "$tmp/golangci-lint" "$bin"
fi
"$bin" run --timeout 20m ./...
"$bin" run --timeout 20m --build-tags pro ./...
