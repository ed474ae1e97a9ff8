// Command agent is the static test program gvisor-mode tests run as PID 1
// in runsc. Each argument is a check; it prints one line per check and
// exits with the code of the last "exit N", or 1 if a check failed.
//
//	fetch URL        GET URL, print the body
//	refused ADDR     a TCP connection to ADDR must fail within 2s
//	notun            opening /dev/net/tun must fail
//	noroute          adding a route must fail
//	noread PATH      reading PATH (the WireGuard key) must fail
//	gvisor           the kernel log must say gVisor
//	sleep D          sleep for duration D
//	exit N           exit with N
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	failed := false
	fail := func(format string, a ...any) {
		fmt.Printf("FAIL "+format+"\n", a...)
		failed = true
	}
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		arg := func() string { i++; return args[i] }
		switch args[i] {
		case "fetch":
			url := arg()
			c := &http.Client{Timeout: 10 * time.Second}
			var body []byte
			var err error
			for try := 0; try < 50; try++ {
				var resp *http.Response
				if resp, err = c.Get(url); err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				fail("fetch %s: %v", url, err)
				continue
			}
			fmt.Printf("fetch %s: %s\n", url, body)
		case "refused":
			addr := arg()
			start := time.Now()
			c, err := net.DialTimeout("tcp", addr, 2*time.Second)
			if err == nil {
				c.Close()
				fail("refused %s: connected", addr)
				continue
			}
			fmt.Printf("refused %s after %v: %v\n", addr, time.Since(start).Round(time.Millisecond), err)
		case "notun":
			f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
			if err == nil {
				f.Close()
				fail("notun: /dev/net/tun opened")
				continue
			}
			fmt.Printf("notun: %v\n", err)
		case "noroute":
			if err := addRoute(); err == nil {
				fail("noroute: a route was added")
				continue
			} else {
				fmt.Printf("noroute: %v\n", err)
			}
		case "noread":
			p := arg()
			if _, err := os.ReadFile(p); err == nil {
				fail("noread: %s was readable", p)
				continue
			} else {
				fmt.Printf("noread: %v\n", err)
			}
		case "gvisor":
			buf := make([]byte, 1<<16)
			n, err := syscall.Klogctl(3, buf) // SYSLOG_ACTION_READ_ALL
			if err != nil || !strings.Contains(string(buf[:n]), "gVisor") {
				fail("gvisor: kernel log %q, %v", buf[:max(n, 0)], err)
				continue
			}
			fmt.Println("gvisor: kernel log says gVisor")
		case "sleep":
			d, _ := time.ParseDuration(arg())
			time.Sleep(d)
		case "exit":
			code, _ := strconv.Atoi(arg())
			if failed {
				os.Exit(1)
			}
			os.Exit(code)
		default:
			fail("unknown check %q", args[i])
		}
	}
	if failed {
		os.Exit(1)
	}
}

// addRoute asks the kernel for a route with SIOCADDRT, as route(8) does.
func addRoute() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	type rtentry struct {
		pad1               uint64
		dst, gateway, mask syscall.RawSockaddrInet4
		flags              uint16
		pad                [512]byte
	}
	var rt rtentry
	rt.dst.Family, rt.gateway.Family, rt.mask.Family = syscall.AF_INET, syscall.AF_INET, syscall.AF_INET
	rt.dst.Addr = [4]byte{10, 99, 99, 0}
	rt.mask.Addr = [4]byte{255, 255, 255, 0}
	rt.flags = 0x1 // RTF_UP
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCADDRT, uintptr(unsafe.Pointer(&rt))); e != 0 {
		return e
	}
	return nil
}
