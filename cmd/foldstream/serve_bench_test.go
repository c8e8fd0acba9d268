package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/wait"
)

// BenchmarkServeIdleSSEReaders measures the resident memory of a "foldstream serve" process
// holding 1,000 SSE readers that never read, each stalled in the middle of a 1 MiB stream (aim:
// at most 200 MB in total). It reports MB-rss (after the readers connected) and MB-peak (the
// process's high-water mark). Run it alone:
//
//	go test ./cmd/foldstream -run '^$' -bench BenchmarkServeIdleSSEReaders -benchtime 1x
//
// FOLDSTREAM_BENCH_READERS changes the number of readers and FOLDSTREAM_BENCH_BIN runs another
// foldstream binary (an older build, for a side-by-side figure).
func BenchmarkServeIdleSSEReaders(b *testing.B) {
	readers := 1000
	if v, err := strconv.Atoi(os.Getenv("FOLDSTREAM_BENCH_READERS")); err == nil && v > 0 {
		readers = v
	}
	dir := b.TempDir()
	bin := os.Getenv("FOLDSTREAM_BENCH_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "foldstream")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			b.Fatalf("build: %v\n%s", err, out)
		}
	}
	for b.Loop() {
		cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "idle.db"), "--log-level", "error")
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		base := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "foldstream: serving ")), "/v1/stream/")
		req, _ := http.NewRequest("PUT", base+"/v1/stream/big", strings.NewReader(strings.Repeat("0123456789abcdef", 1<<16)))
		req.Header.Set("Content-Type", "application/octet-stream")
		if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusCreated {
			b.Fatalf("create: %v", err)
		}
		before := rssMB(b, cmd.Process.Pid, "VmRSS")
		conns := make([]net.Conn, 0, readers)
		d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			return errors.Join(err, serr)
		}}
		for range readers {
			c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.WriteString(c, "GET /v1/stream/big?offset=-1&live=sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		// Every handler reaches its blocked write (well within the 10 s write timeout): the
		// server's end of each reader's connection holds bytes the reader does not take.
		port := base[strings.LastIndexByte(base, ':')+1:]
		if !wait.Every(30*time.Second, 50*time.Millisecond, func() bool { return sendersBlocked(b, port) >= readers }) {
			b.Fatalf("%d of %d handlers blocked in their write after 30 s", sendersBlocked(b, port), readers)
		}
		rss, peak := rssMB(b, cmd.Process.Pid, "VmRSS"), rssMB(b, cmd.Process.Pid, "VmHWM")
		b.ReportMetric(before, "MB-rss-before")
		b.ReportMetric(rss, "MB-rss")
		b.ReportMetric(peak, "MB-peak")
		for _, c := range conns {
			c.Close()
		}
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
}

// sendersBlocked counts the established IPv4 connections whose local port is port (hexadecimal in
// /proc/net/tcp) with bytes queued to send: the server's ends of the connections whose reader
// stopped reading.
func sendersBlocked(b *testing.B, port string) int {
	p, err := strconv.Atoi(port)
	if err != nil {
		b.Fatalf("server port %q: %v", port, err)
	}
	raw, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		b.Fatal(err)
	}
	suffix := fmt.Sprintf(":%04X", p)
	n := 0
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		// sl local_address rem_address st tx_queue:rx_queue ...
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], suffix) || f[3] != "01" {
			continue
		}
		if tx, _, ok := strings.Cut(f[4], ":"); ok && strings.TrimLeft(tx, "0") != "" {
			n++
		}
	}
	return n
}

// rssMB reads a memory field of /proc/<pid>/status in MB.
func rssMB(b *testing.B, pid int, field string) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
