// Command producer measures foldstream's Go IdempotentProducer and the TypeScript client's
// IdempotentProducer (@durable-streams/client, pinned in internal/harness/refserver/package.json, whose
// ts-producer.mjs it runs) against the same server
// in the same run, with the same message size and both clients' default options, and prints
// messages/s, MB/s and the Go/TypeScript ratio.
//
//	go run ./bench/producer -n 200000   # runs npm ci in internal/harness/refserver when needed
//
// -server reference (the default) starts the upstream reference Node server on 127.0.0.1;
// -server foldstream serves a SQLite file in this process; anything else is a base URL.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/refserver"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

type result struct {
	Messages int     `json:"messages"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
}

func (r result) msgsPerSec() float64 { return float64(r.Messages) / r.Seconds }
func (r result) mbPerSec() float64   { return float64(r.Bytes) / r.Seconds / 1e6 }

func main() {
	server := flag.String("server", "reference", `"reference" (start the reference Node server), "foldstream" (serve a SQLite file in process) or a base URL`)
	n := flag.Int("n", 200_000, "messages per run")
	size := flag.Int("size", 200, "bytes per JSON message")
	runs := flag.Int("runs", 3, "runs per client; the median is reported")
	skipTS := flag.Bool("skip-ts", false, "measure the Go producer only")
	flag.Parse()
	if err := run(*server, *n, *size, *runs, *skipTS); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func message(i, size int) []byte {
	head := fmt.Sprintf(`{"id":%d,"pad":"`, i)
	pad := max(0, size-len(head)-2)
	return []byte(head + strings.Repeat("x", pad) + `"}`)
}

func run(server string, n, size, runs int, skipTS bool) error {
	switch server {
	case "reference":
		u, stop, err := refserver.StartProcess()
		if err != nil {
			return err
		}
		defer stop()
		server = u
		fmt.Printf("server: reference Node server %s\n", u)
	case "foldstream":
		dir, err := os.MkdirTemp("", "foldstream-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		u, stop, err := testserver.Serve(filepath.Join(dir, "bench.db"))
		if err != nil {
			return err
		}
		defer stop()
		server = u
		fmt.Printf("server: foldstream in process, SQLite file, %s\n", u)
	default:
		fmt.Printf("server: %s\n", server)
	}
	fmt.Printf("%d messages of %d bytes per run, %d runs each, default producer options, GOMAXPROCS=%d\n", n, size, runs, runtime.GOMAXPROCS(0))
	ctx := context.Background()
	var goRes, tsRes []result
	for r := range runs {
		g, err := runGo(ctx, server, n, size, r)
		if err != nil {
			return fmt.Errorf("go producer: %w", err)
		}
		goRes = append(goRes, g)
		fmt.Printf("  go run %d: %10.0f msg/s %7.1f MB/s\n", r, g.msgsPerSec(), g.mbPerSec())
		if skipTS {
			continue
		}
		t, err := runTS(ctx, server, n, size, r)
		if err != nil {
			return fmt.Errorf("typescript producer: %w", err)
		}
		tsRes = append(tsRes, t)
		fmt.Printf("  ts run %d: %10.0f msg/s %7.1f MB/s\n", r, t.msgsPerSec(), t.mbPerSec())
	}
	g := median(goRes)
	fmt.Printf("go producer (median):         %10.0f msg/s %7.1f MB/s\n", g.msgsPerSec(), g.mbPerSec())
	if !skipTS {
		t := median(tsRes)
		fmt.Printf("typescript producer (median): %10.0f msg/s %7.1f MB/s\n", t.msgsPerSec(), t.mbPerSec())
		fmt.Printf("ratio go/typescript: %.2fx\n", g.msgsPerSec()/t.msgsPerSec())
	}
	return nil
}

func median(rs []result) result {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b result) int {
		switch {
		case a.msgsPerSec() < b.msgsPerSec():
			return -1
		case a.msgsPerSec() > b.msgsPerSec():
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

func newStream(ctx context.Context, server, name string) (*client.Stream, error) {
	s, err := client.NewStream(fmt.Sprintf("%s/v1/stream/%s-%d", server, name, time.Now().UnixNano()), client.Config{})
	if err != nil {
		return nil, err
	}
	_, err = s.Create(ctx, client.CreateOptions{ContentType: "application/json"})
	return s, err
}

func runGo(ctx context.Context, server string, n, size, r int) (result, error) {
	s, err := newStream(ctx, server, fmt.Sprintf("bench-go-%d", r))
	if err != nil {
		return result{}, err
	}
	msgs := make([][]byte, n)
	var total int64
	for i := range msgs {
		msgs[i] = message(i, size)
		total += int64(len(msgs[i]))
	}
	p, err := client.NewIdempotentProducer(s, "bench-go", client.ProducerConfig{})
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	for _, m := range msgs {
		if err := p.Append(m); err != nil {
			return result{}, err
		}
	}
	if err := p.Close(ctx); err != nil {
		return result{}, err
	}
	sec := time.Since(start).Seconds()
	if err := verifyCount(ctx, s, n); err != nil {
		return result{}, err
	}
	return result{Messages: n, Bytes: total, Seconds: sec}, nil
}

func runTS(ctx context.Context, server string, n, size, r int) (result, error) {
	s, err := newStream(ctx, server, fmt.Sprintf("bench-ts-%d", r))
	if err != nil {
		return result{}, err
	}
	refserver.Install()
	dir := refserver.Dir()
	cmd := exec.CommandContext(ctx, "node", "ts-producer.mjs", s.URL(), fmt.Sprint(n), fmt.Sprint(size))
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%w (did you run npm ci in %s?)", err, dir)
	}
	var res result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return result{}, fmt.Errorf("parse %q: %w", out.String(), err)
	}
	if err := verifyCount(ctx, s, n); err != nil {
		return result{}, err
	}
	return res, nil
}

// verifyCount checks that the stream holds exactly n messages, so a fast but lossy run cannot
// count.
func verifyCount(ctx context.Context, s *client.Stream, n int) error {
	got := 0
	for _, err := range s.Messages(ctx, client.ReadOptions{}) {
		if err != nil {
			return err
		}
		got++
	}
	if got != n {
		return fmt.Errorf("stream holds %d messages, want %d", got, n)
	}
	return nil
}
