package main

import "github.com/latticelab/lattice/lab/labfile"

// lab loads every topology and scenario the commands name; execute holds
// its copy of the builtins for the whole command.
var lab labfile.Loader

// builtinFiles is what execute holds while a command runs.
var builtinFiles = builtinHold{&lab}

type builtinHold struct{ l *labfile.Loader }

// hold keeps the builtins' copy until release is called.
func (h builtinHold) hold() (release func() error) { return h.l.Hold() }
