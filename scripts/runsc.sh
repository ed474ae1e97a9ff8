#!/bin/sh
# Builds runsc for gvisor mode into GOBIN (default GOPATH/bin) from the
# gVisor version go.mod pins, statically (CGO_ENABLED=0: a dynamically
# linked runsc fails inside its own chroot), WITH precompiled seccomp
# programs:
#
#   scripts/runsc.sh          build unless GOBIN/runsc is this build already
#   scripts/runsc.sh -f       build anyway
#   scripts/runsc.sh -o FILE  build into FILE instead (always)
#
# Why: runsc installs a seccomp filter on its sandbox (the Sentry) and its
# gofer at every start. gVisor's Bazel build compiles those filters when it
# builds runsc (a generator runs each config package's
# PrecompiledPrograms() and writes filter_precompiled.go); the Go module
# holds only the generator's empty output, so a `go install`ed runsc
# compiles its filter at each start: 120-135 ms on the critical path of a
# sandbox's start (docs/PERFORMANCE.md), its debug log says "variants (0)".
#
# This script does what the Bazel rule does, with the go toolchain and the
# module cache only. In a temp dir it writes:
#   gvisor          a symlink to the module cache's gVisor (read-only),
#   gen.go          a generator (below) that calls both filter config
#                   packages' PrecompiledPrograms() and writes, for each
#                   filter package, a filter_precompiled.go that holds the
#                   programs (the module's declares the same API, empty),
#   gen.json, overlay.json
#                   adding the generator to the tree; swapping those two
#                   files for the generated ones.
# It runs the generator and builds ./runsc with gVisor as the main module
# (its own go.mod and go.sum, as `go install gvisor.dev/gvisor/runsc@V`
# would), `-overlay` pointing at the generated files. `go build -overlay`
# may not replace files beneath GOMODCACHE; the symlink's path is not
# (scripts/vtime-flags.sh does the same). Nothing of gVisor is copied.
#
# The binary's version (runsc --version) says what it is:
#   <gVisor version>+lattice.seccomp.<N>
# so a runsc from a plain `go install` (VERSION_MISSING), an older pin or an
# older recipe (N) is rebuilt. A runsc elsewhere in PATH (a release build,
# say) is left alone: lattice uses the first runsc in PATH.
set -eu

die() {
	echo "runsc: $*" >&2
	exit 1
}

# recipe is N above: bump it when what this script builds changes.
recipe=1

caller=$(pwd)
cd "$(dirname "$0")/.."
GO=${GO:-go}
force=
dest=
while [ $# -gt 0 ]; do
	case $1 in
	-f) force=1 ;;
	-o)
		[ $# -ge 2 ] || die "-o needs a file"
		case $2 in /*) dest=$2 ;; *) dest=$caller/$2 ;; esac
		force=1
		shift
		;;
	*) die "usage: $0 [-f] [-o FILE]" ;;
	esac
	shift
done

gvver=$($GO list -m -f '{{.Version}}' gvisor.dev/gvisor) || die "go list gvisor.dev/gvisor failed"
want="$gvver+lattice.seccomp.$recipe"

if [ -z "$dest" ]; then
	gobin=$($GO env GOBIN)
	[ -n "$gobin" ] || gobin=$($GO env GOPATH | cut -d: -f1)/bin
	dest=$gobin/runsc
	if [ -z "$force" ]; then
		if onpath=$(command -v runsc 2>/dev/null) && [ "$(realpath "$onpath")" != "$(realpath -m "$dest")" ]; then
			echo "runsc: $onpath is first in PATH and lattice uses it; not building $dest (scripts/runsc.sh -f builds it anyway)"
			exit 0
		fi
		if [ -x "$dest" ]; then
			have=$("$dest" --version 2>/dev/null | sed -n 's/^runsc version //p')
			[ "$have" = "$want" ] && exit 0
			echo "runsc: $dest is version '${have:-?}', want $want (precompiled seccomp programs): rebuilding"
		fi
	fi
fi

# go list -m names the module's directory only once it is downloaded.
$GO mod download gvisor.dev/gvisor || die "go mod download gvisor.dev/gvisor failed"
gvdir=$($GO list -m -f '{{.Dir}}' gvisor.dev/gvisor) || die "go list gvisor.dev/gvisor failed"
[ -n "$gvdir" ] || die "gvisor.dev/gvisor is not downloaded"
boot=runsc/boot/filter
gofer=runsc/fsgofer/filter
for f in $boot/filter_precompiled.go $gofer/filter_precompiled.go $boot/config/config_precompiled.go $gofer/config/config_precompiled.go; do
	[ -f "$gvdir/$f" ] || die "$gvdir/$f is missing: gVisor moved its precompiled seccomp filters"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lattice-runsc.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT
case "$tmp" in *'"'* | *'\'* | *' '*) die "a path holds a quote, backslash or space: $tmp" ;; esac
ln -s "$gvdir" "$tmp/gvisor"

cat >"$tmp/gen.go" <<'GO'
// Added by lattice's scripts/runsc.sh (an -overlay; not part of gVisor).

// Command latticeseccompgen writes runsc's two filter_precompiled.go files
// with the seccomp programs their config packages list compiled in, as
// gVisor's Bazel rule precompiled_seccomp_rules does.
//
// Each program's bytecode is a package-level array of constants, which the
// linker lays out as data: looking one up costs a switch and a copy, where
// registering every program in a map at first use (the module's stub does
// that, with none) took 11 ms of the sandbox's start for 576 programs.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

func main() {
	src := flag.String("src", "", "gVisor's source tree")
	out := flag.String("out", "", "directory for the generated files")
	flag.Parse()
	for _, f := range []struct {
		name, dir string
		programs  func() ([]precompiledseccomp.Program, error)
	}{
		{"boot", "runsc/boot/filter", bootconfig.PrecompiledPrograms},
		{"gofer", "runsc/fsgofer/filter", goferconfig.PrecompiledPrograms},
	} {
		if err := generate(filepath.Join(*src, f.dir, "filter_precompiled.go"), filepath.Join(*out, f.name+"_filter_precompiled.go"), f.programs); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f.dir, err)
			os.Exit(1)
		}
	}
}

// stubDecls is what the module's filter_precompiled.go declares: the file
// written in its place declares the same exported names.
var stubDecls = []string{"GetPrecompiled", "ListPrecompiled", "PrecompilationDisabledAtBuildTime", "precompiledPrograms", "registerPrecompiledProgramsOnce", "registerPrograms"}

// generate writes, in place of the module's filter_precompiled.go (stub),
// one with the programs compiled in.
func generate(stub, out string, programs func() ([]precompiledseccomp.Program, error)) error {
	f, err := parser.ParseFile(token.NewFileSet(), stub, nil, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	var decls []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			decls = append(decls, d.Name.Name)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if v, ok := s.(*ast.ValueSpec); ok {
					for _, n := range v.Names {
						decls = append(decls, n.Name)
					}
				}
			}
		}
	}
	sort.Strings(decls)
	if !slices.Equal(decls, stubDecls) {
		return fmt.Errorf("%s declares %v, want %v: gVisor changed it", stub, decls, stubDecls)
	}
	progs, err := programs()
	if err != nil {
		return fmt.Errorf("precompiling: %w", err)
	}
	if len(progs) == 0 {
		return fmt.Errorf("no programs to precompile")
	}
	sort.Slice(progs, func(i, j int) bool { return progs[i].Name < progs[j].Name })

	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by lattice's scripts/runsc.sh from %s's PrecompiledPrograms; DO NOT EDIT.\n\n", filepath.Base(filepath.Dir(stub))+"/config")
	fmt.Fprintf(&b, "package %s\n\n", f.Name.Name)
	b.WriteString("import \"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp\"\n\n")
	b.WriteString("// PrecompilationDisabledAtBuildTime is false: the programs are below.\n")
	b.WriteString("const PrecompilationDisabledAtBuildTime = false\n\n")
	b.WriteString("var precompiledNames = []string{\n")
	for i, p := range progs {
		if i > 0 && p.Name == progs[i-1].Name {
			return fmt.Errorf("two programs named %q", p.Name)
		}
		fmt.Fprintf(&b, "\t%q,\n", p.Name)
	}
	b.WriteString("}\n\n")
	b.WriteString("// GetPrecompiled returns the precompiled program for the given name,\n// and whether that program name exists.\n")
	b.WriteString("func GetPrecompiled(programName string) (precompiledseccomp.Program, bool) {\n\tswitch programName {\n")
	for i, p := range progs {
		fmt.Fprintf(&b, "\tcase %q:\n\t\treturn precompiledseccomp.Program{Name: programName, Bytecode32: append([]uint32(nil), program%d[:]...), VarOffsets: %#v}, true\n", p.Name, i, p.VarOffsets)
	}
	b.WriteString("\t}\n\treturn precompiledseccomp.Program{}, false\n}\n\n")
	b.WriteString("// ListPrecompiled returns a list of all registered program names.\n")
	b.WriteString("func ListPrecompiled() []string {\n\treturn append([]string(nil), precompiledNames...)\n}\n")
	for i, p := range progs {
		fmt.Fprintf(&b, "\nvar program%d = [...]uint32{", i)
		for j, v := range p.Bytecode32 {
			if j%8 == 0 {
				b.WriteString("\n\t")
			} else {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "0x%08x,", v)
		}
		b.WriteString("\n}\n")
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return fmt.Errorf("formatting the generated file: %w", err)
	}
	fmt.Printf("%s: %d programs\n", stub, len(progs))
	return os.WriteFile(out, src, 0o644)
}
GO

gen=$tmp/gvisor/latticeseccompgen/main.go
printf '{"Replace":{"%s":"%s"}}\n' "$gen" "$tmp/gen.go" >"$tmp/gen.json"
printf '{"Replace":{"%s":"%s","%s":"%s"}}\n' \
	"$tmp/gvisor/$boot/filter_precompiled.go" "$tmp/boot_filter_precompiled.go" \
	"$tmp/gvisor/$gofer/filter_precompiled.go" "$tmp/gofer_filter_precompiled.go" >"$tmp/overlay.json"

# gVisor is the main module here: its go.mod and go.sum choose every
# dependency, never this module's.
cd "$tmp/gvisor"
export GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
echo "runsc: precompiling gVisor $gvver's seccomp programs"
$GO build -overlay="$tmp/gen.json" -trimpath -o "$tmp/gen" ./latticeseccompgen || die "building the generator failed"
"$tmp/gen" -src "$tmp/gvisor" -out "$tmp" || die "precompiling the seccomp programs failed"
echo "runsc: building runsc $want (static)"
$GO build -overlay="$tmp/overlay.json" -trimpath -ldflags="-X=gvisor.dev/gvisor/runsc/version.version=$want" -o "$tmp/runsc" ./runsc ||
	die "building runsc failed"
[ "$("$tmp/runsc" --version | sed -n 's/^runsc version //p')" = "$want" ] || die "the new runsc does not say it is $want"
mkdir -p "$(dirname "$dest")"
# Renamed into place: a sandbox starting meanwhile runs the old or the new.
cp "$tmp/runsc" "$dest.new.$$" && mv -f "$dest.new.$$" "$dest" || die "cannot install $dest"
echo "runsc: installed $dest"
