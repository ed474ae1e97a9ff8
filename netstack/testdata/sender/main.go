// Command sender connects to ADDR and writes BYTES bytes in 64 KiB
// writes: the agent BenchmarkDataPath/gvisor runs in runsc.
package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

func main() {
	n, err := strconv.ParseInt(os.Args[2], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := net.Dial("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(int64(len(buf)), n)
		if _, err := c.Write(buf[:k]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		n -= k
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
