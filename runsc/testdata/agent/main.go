// Command agent is a small static program the runsc tests run as PID 1.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	switch os.Args[1] {
	case "hello":
		b, _ := os.ReadFile("/proc/version")
		fmt.Printf("pid %d uid %d %s", os.Getpid(), os.Getuid(), b)
		code, _ := strconv.Atoi(os.Args[2])
		os.Exit(code)
	case "sleep":
		time.Sleep(time.Hour)
	case "cat":
		// cat FILE: print FILE as the agent sees it.
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
	case "resolve":
		// resolve NAME...: print "NAME ADDR..." per name through Go's own
		// resolver (this binary has no cgo), which reads /etc/hosts.
		code := 0
		for _, name := range os.Args[2:] {
			addrs, err := net.DefaultResolver.LookupHost(context.Background(), name)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
				continue
			}
			fmt.Println(name, addrs)
		}
		os.Exit(code)
	}
}
