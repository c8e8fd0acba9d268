//go:build !unix

package main

import (
	"net"
	"testing"
)

// refusedServer returns a base URL on 127.0.0.1 where nothing listens.
func refusedServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}
