// Command agent is a small static program the runsc tests run as PID 1.
package main

import (
	"fmt"
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
	}
}
