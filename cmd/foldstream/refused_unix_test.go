//go:build unix

package main

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// refusedServer returns a base URL on 127.0.0.1 where connections are refused for the whole test:
// the port is bound but never listened on. Closing a listener instead would free the port for
// any other test or process on the machine to take, and the "refused" server could then answer.
func refusedServer(t *testing.T) string {
	t.Helper()
	syscall.ForkLock.RLock() // no child may inherit the socket before it is close-on-exec
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// TestRefusedServerKeepsItsPort: nothing else can listen on the refused server's port while the
// test runs, so it stays refused.
func TestRefusedServerKeepsItsPort(t *testing.T) {
	base := refusedServer(t)
	l, err := net.Listen("tcp", base[len("http://"):])
	if err == nil {
		l.Close()
		t.Fatalf("listened on %s: the refused server's port was free for anyone", base)
	}
}
