package gate

import (
	"fmt"
	"os"
	"syscall"
)

func init() {
	if len(os.Args) == 2 && os.Args[0] == Arg0 {
		if err := wait(os.Args[1]); err != nil {
			fmt.Fprintf(os.Stderr, "lattice: container start held: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// wait blocks until the FIFO at path yields a byte, and reports whether
// it was Open. The FIFO is opened without blocking (a plain open would
// wait for a writer forever if the sandbox is already gone), then read
// blocking: with no writer left the read returns end of file.
func wait(path string) error {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer syscall.Close(fd)
	if err := syscall.SetNonblock(fd, false); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var b [1]byte
	for {
		n, err := syscall.Read(fd, b[:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return fmt.Errorf("read %s: %w", path, err)
		case n == 0:
			return fmt.Errorf("%s: the sandbox called the start off", path)
		case b[0] != Open:
			return fmt.Errorf("%s: the sandbox called the start off (%q)", path, b[0])
		}
		return nil
	}
}
