// Command fakerunsc stands in for a wedged runsc in the runsc tests: a
// static binary (runsc.Find accepts no other) that takes runsc's command
// line, answers at once, or never for the subcommand FAKE_RUNSC_HANG names.
//
// FAKE_RUNSC_PIDS is a directory it writes a file per hanging process
// to: runsc.PID for itself, child.PID for its child. FAKE_RUNSC_CHILD=group makes a hanging one
// start a child that holds its stdout and stderr, in its process group;
// FAKE_RUNSC_CHILD=escaped, in a process group of its own.
// FAKE_RUNSC_LEAVE makes `run` exit at once, leaving such an escaped
// child behind with its stdout and stderr.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "child" {
		hang()
	}
	pids := map[string]int{"runsc": os.Getpid()}
	sub := ""
	for i := 1; i < len(os.Args); i++ {
		if os.Args[i] == "--root" {
			i++
			continue
		}
		sub = os.Args[i]
		break
	}
	if slices.Contains(os.Args, "run") && os.Getenv("FAKE_RUNSC_LEAVE") != "" {
		// A sandbox process that outlives runsc run, holding its output.
		child := exec.Command(os.Args[0], "child")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		record(map[string]int{"child": child.Process.Pid})
		os.Exit(0)
	}
	if sub == "" || sub != os.Getenv("FAKE_RUNSC_HANG") {
		// Every container exists, and there is none to list.
		fmt.Fprintf(os.Stderr, "fakerunsc: %s: ok\n", sub)
		os.Exit(0)
	}
	if mode := os.Getenv("FAKE_RUNSC_CHILD"); mode != "" {
		child := exec.Command(os.Args[0], "child")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: mode == "escaped"}
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		pids["child"] = child.Process.Pid
	}
	record(pids)
	hang()
}

// record writes a file per hanging process into FAKE_RUNSC_PIDS, the
// child's too: it is there before the test can look.
func record(pids map[string]int) {
	dir := os.Getenv("FAKE_RUNSC_PIDS")
	if dir == "" {
		return
	}
	for role, pid := range pids {
		if err := os.WriteFile(filepath.Join(dir, role+"."+strconv.Itoa(pid)), nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// hang waits, deaf to SIGTERM, SIGINT and SIGHUP, until killed.
func hang() {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	time.Sleep(24 * time.Hour)
	os.Exit(1)
}
