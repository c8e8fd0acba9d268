// Package freeport picks loopback ports for servers a test starts as processes of their own, and
// starts again on the same address.
//
// The kernel's answer to a listen on port 0 comes from the ephemeral range, the same range every
// outgoing connection on the machine draws its local port from. Such a port is free only until
// the listener that found it closes: on a busy machine (a test suite opening thousands of
// connections) another socket can take it before the server binds it, or while a killed server is
// started again, and the start fails with "address already in use". The ports picked here lie
// below the ephemeral range, where no outgoing connection is ever bound.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// low and high bound the ports tried (high is lowered to the start of the ephemeral range).
const (
	low  = 20000
	high = 32768
)

// Port returns a loopback TCP port that was free when it was tried, outside the ephemeral range
// when the machine leaves room below it, else one the kernel picks.
func Port() (int, error) {
	top := high
	if start, ok := ephemeralStart(); ok {
		top = min(top, start)
	}
	for range 200 {
		if top <= low {
			break
		}
		p := low + rand.IntN(top-low)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		return p, nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Addr is Port as a 127.0.0.1:PORT address.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// ephemeralStart reads the first port of Linux's ephemeral range.
func ephemeralStart() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(f[0])
	return n, err == nil
}
