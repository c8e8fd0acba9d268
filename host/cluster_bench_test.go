package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// Benchmarks of several nodes on one PostgreSQL database (docs/postgres.md#figures). They start
// real processes on loopback; run them one at a time, e.g.
//
//	go test -run '^$' -bench 'Nodes|CrossNode|Failover' -benchtime 2000x ./host

var (
	serveOnce sync.Once
	serveBin  string
	nodeOnce  sync.Once
	plainNode string
	benchErr  error
)

// buildBench builds cmd/foldstream and testdata/node without the race detector.
func buildBench(b *testing.B) (serve, nodeBin string) {
	b.Helper()
	serveOnce.Do(func() {
		dir, err := os.MkdirTemp("", "foldstream-bench")
		if err != nil {
			benchErr = err
			return
		}
		serveBin = filepath.Join(dir, "foldstream")
		plainNode = filepath.Join(dir, "node")
		for _, c := range [][]string{{"-o", serveBin, "../cmd/foldstream"}, {"-o", plainNode, "./testdata/node"}} {
			if out, err := exec.Command("go", append([]string{"build"}, c...)...).CombinedOutput(); err != nil {
				benchErr = fmt.Errorf("build %s: %v\n%s", c[2], err, out)
				return
			}
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return serveBin, plainNode
}

// serveNodes starts n `foldstream serve --db url` processes.
func serveNodes(b *testing.B, url string, n int) []*exec.Cmd {
	b.Helper()
	bin, _ := buildBench(b)
	var cmds []*exec.Cmd
	var addrs []string
	for range n {
		addr := freeAddr(b)
		cmd := exec.Command(bin, "serve", "--addr", addr, "--db", url, "--log-level", "warn")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds = append(cmds, cmd)
		addrs = append(addrs, addr)
	}
	b.Cleanup(func() {
		for _, c := range cmds {
			_ = c.Process.Signal(syscall.SIGTERM)
			_ = c.Wait()
		}
	})
	for _, a := range addrs {
		waitHTTP(b, "http://"+a)
	}
	benchAddrs = addrs
	return cmds
}

var benchAddrs []string

func waitHTTP(b *testing.B, base string) {
	if !wait.Every(30*time.Second, 20*time.Millisecond, func() bool { // polling a port another process opens
		resp, err := http.Get(base + "/v1/stream/__ready")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}) {
		b.Fatalf("%s does not answer", base)
	}
}

func put(b *testing.B, hc *http.Client, url string) {
	req, _ := http.NewRequest(http.MethodPut, url, nil)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
}

func post(hc *http.Client, url string, body []byte) error {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d", url, resp.StatusCode)
	}
	return nil
}

// BenchmarkNodesAppend measures the total rate of plain appends (16 writers, one stream each,
// one request at a time per writer) spread over 1 and 3 nodes on one database.
func BenchmarkNodesAppend(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			url := pgtest.URL(b)
			serveNodes(b, url, n)
			addrs := benchAddrs
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			const writers = 16
			for w := range writers {
				put(b, hc, fmt.Sprintf("http://%s/v1/stream/w%d", addrs[w%n], w))
			}
			body := []byte(`{"type":"t","payload":{"pad":"` + string(bytes.Repeat([]byte("x"), 160)) + `"}}`)
			var next atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					url := fmt.Sprintf("http://%s/v1/stream/w%d", addrs[w%n], w)
					for next.Add(1) <= int64(b.N) {
						if err := post(hc, url, body); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "messages/s")
		})
	}
}

// BenchmarkCrossNodePostToSSE measures the latency from a POST on one node to the message's
// arrival at an SSE reader connected to another node.
func BenchmarkCrossNodePostToSSE(b *testing.B) {
	url := pgtest.URL(b)
	serveNodes(b, url, 2)
	a, r := "http://"+benchAddrs[0], "http://"+benchAddrs[1]
	hc := &http.Client{}
	put(b, hc, a+"/v1/stream/lat")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := client.NewStream(r+"/v1/stream/lat", client.Config{})
	if err != nil {
		b.Fatal(err)
	}
	arrived := make(chan int, 1)
	ready := make(chan struct{}) // closed when the reader saw its first warm-up message (n < 0)
	go func() {
		warm := false
		for m, err := range s.Messages(ctx, client.ReadOptions{Offset: client.OffsetNow, Live: client.LiveSSE}) {
			if err != nil {
				return
			}
			var v struct {
				N int `json:"n"`
			}
			if json.Unmarshal(m, &v) != nil {
				continue
			}
			if v.N < 0 {
				if !warm {
					warm = true
					close(ready)
				}
				continue
			}
			arrived <- v.N
		}
	}()
	// The SSE connection is up once a warm-up message posted after it opened arrives; one posted
	// before is never seen (the reader starts at the tail), so post another until one is.
	for w := 1; ; w++ {
		if err := post(hc, a+"/v1/stream/lat", []byte(fmt.Sprintf(`{"n":%d}`, -w))); err != nil {
			b.Fatal(err)
		}
		select {
		case <-ready:
		case <-time.After(time.Second):
			if w == 30 {
				b.Fatal("the other node's SSE reader saw no warm-up message in 30 s")
			}
			continue
		}
		break
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := post(hc, a+"/v1/stream/lat", []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			b.Fatal(err)
		}
		select {
		case n := <-arrived:
			if n != i {
				b.Fatalf("SSE delivered %d, want %d", n, i)
			}
		case <-time.After(10 * time.Second):
			b.Fatalf("message %d never reached the other node's SSE reader", i)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkFailover measures the time from stopping the node running the counter on
// /counters/a — SIGKILL, or SIGTERM (a clean shutdown hands the lease over) — to the counter's
// next committed checkpoint on the other node (lease 1 s).
func BenchmarkFailover(b *testing.B) {
	for _, sig := range []string{"KILL", "TERM"} {
		b.Run("signal="+sig, func(b *testing.B) { benchFailover(b, sig) })
	}
}

func benchFailover(b *testing.B, sig string) {
	const ttl = time.Second
	url := pgtest.URL(b)
	_, nodeBin := buildBench(b)
	nodes := make([]*node, 2)
	for i := range nodes {
		nodes[i] = &node{t: b, bin: nodeBin, db: url, addr: freeAddr(b), ttl: ttl, logs: &strings.Builder{},
			name: fmt.Sprintf("n%d", i), args: []string{"--advertise"}}
		nodes[i].start()
	}
	b.Cleanup(func() {
		for _, nd := range nodes {
			nd.kill()
		}
	})
	ctx := context.Background()
	hc := &http.Client{Timeout: 5 * time.Second}
	put(b, hc, nodes[0].url()+"/v1/stream"+counterStream)
	var durs []time.Duration
	tick := 0
	postTick := func(nd *node) int64 {
		var pos int64
		if !wait.Every(time.Minute, 20*time.Millisecond, func() bool { // the node may be restarting
			tick++
			req, _ := http.NewRequest(http.MethodPost, nd.url()+"/v1/stream"+counterStream,
				bytes.NewReader([]byte(fmt.Sprintf(`{"type":"ticked","payload":{"by":1,"n":%d}}`, tick))))
			req.Header.Set("Content-Type", "application/json")
			resp, err := hc.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				return false
			}
			// Stream-Next-Offset is "<0 padded>_<position>": the tick's offset.
			var hi int64
			_, err = fmt.Sscanf(resp.Header.Get("Stream-Next-Offset"), "%d_%d", &hi, &pos)
			return err == nil
		}) {
			b.Fatalf("no node took tick %d within a minute", tick)
		}
		return pos
	}
	waitCP := func(min int64) {
		if !wait.Every(time.Minute, 5*time.Millisecond, func() bool { // polling another process's commit
			var off int64
			err := pgQueryRow(ctx, url, `SELECT reduced_through_offset FROM reduce_checkpoints WHERE slug = 'counter' AND scope = '`+counterStream+`'`, &off)
			return err == nil && off >= min
		}) {
			b.Fatalf("the checkpoint did not reach %d within a minute", min)
		}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		waitCP(postTick(nodes[0]))
		var owner string
		if err := pgQueryRow(ctx, url, `SELECT holder_addr FROM leases WHERE key LIKE 'processor%' AND expires_at > clock_timestamp()`, &owner); err != nil {
			b.Fatal(err)
		}
		var victim, other *node
		for _, nd := range nodes {
			if nd.url() == owner {
				victim = nd
			} else {
				other = nd
			}
		}
		if victim == nil {
			b.Fatalf("no node owns the counter (lease holder %q)", owner)
		}
		b.StartTimer()
		start := time.Now()
		if sig == "KILL" {
			victim.kill()
		} else {
			victim.term()
		}
		waitCP(postTick(other))
		durs = append(durs, time.Since(start))
		b.StopTimer()
		victim.start()
	}
	slices.Sort(durs)
	b.ReportMetric(float64(durs[len(durs)/2].Milliseconds()), "p50-failover-ms")
	b.ReportMetric(float64(durs[len(durs)-1].Milliseconds()), "max-failover-ms")
}
