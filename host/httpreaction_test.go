package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/stream"
)

// httpNode is one host running the reactor on /r/* behind a real HTTP server.
type httpNode struct {
	url string
	log *reactions
}

func startHTTPNode(t testing.TB, s *stream.Store) *httpNode {
	t.Helper()
	ctx := context.Background()
	contract, err := foldstream.DefineContract(foldstream.ContractConfig[cart]{Slug: "reactor", Version: "1", Consumes: []string{"r"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	n := &httpNode{log: newReactions()}
	if err := host.RegisterPattern[cart](ctx, h, "/r/*", &reactor{Base: foldstream.NewBase(contract), log: n.log}); err != nil {
		t.Fatal(err)
	}
	n.url = serveHost(t, s, h)
	return n
}

// serveHost serves store s with host h's processors over a real HTTP server and returns its URL;
// the test's cleanup shuts the server, the host and the store down, in that order.
func serveHost(t testing.TB, s *stream.Store, h *host.Host) string {
	t.Helper()
	srv, err := server.New(s, server.Config{Processors: h, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		ts.Close()
		_ = h.Shutdown(context.Background())
		_ = s.Close(context.Background())
	})
	return ts.URL
}

// do sends one request (headers: name, value pairs) and returns the stream position its
// Stream-Next-Offset names (-1 when it has none), failing unless the status is want.
func (n *httpNode) do(t testing.TB, method, path, body string, want int, headers ...string) int64 {
	t.Helper()
	req, err := http.NewRequest(method, n.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s; want %d", method, path, res.StatusCode, b, want)
	}
	next := res.Header.Get("Stream-Next-Offset")
	if next == "" {
		return -1
	}
	off, err := strconv.ParseInt(next[strings.LastIndexByte(next, '_')+1:], 10, 64)
	if err != nil {
		t.Fatalf("Stream-Next-Offset %q: %v", next, err)
	}
	return off
}

// processorOffset asks /v1/streams/info, which never opens an engine, for the reactor's offset.
func (n *httpNode) processorOffset(t testing.TB, path string) int64 {
	t.Helper()
	res, err := http.Get(n.url + "/v1/streams/info?path=" + path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	const key = `"offset":`
	i := strings.Index(string(b), key)
	if res.StatusCode != http.StatusOK || i < 0 {
		t.Fatalf("GET /v1/streams/info?path=%s: %d %s", path, res.StatusCode, b)
	}
	rest := string(b[i+len(key):])
	end := strings.IndexAny(rest, ",}")
	off, err := strconv.ParseInt(rest[:end], 10, 64)
	if err != nil {
		t.Fatalf("info %s: %v", b, err)
	}
	return off
}

// A pattern processor reacts to every way of writing a stream over HTTP, with nobody reading it:
// its ProcessEvent runs for the written event, and /v1/streams/info (which opens no engine)
// reports the processor through it. PUT then POST, a second POST, a PUT with a body, a producer's
// POST, a close with a body, a huge record, a fork; on SQLite and on one PostgreSQL node.
func TestAPatternProcessorReactsToEveryHTTPWriteWithNobodyReading(t *testing.T) {
	var huge strings.Builder
	huge.WriteByte('[')
	for i := range 5_500 { // ~1.2 MB: past the size written in slices on SQLite
		if i > 0 {
			huge.WriteByte(',')
		}
		fmt.Fprintf(&huge, `{"type":"r","payload":{"i":%d,"pad":"%s"}}`, i, strings.Repeat("x", 180))
	}
	huge.WriteByte(']')
	tick := `{"type":"r"}`
	cases := []struct {
		name  string
		write func(t *testing.T, n *httpNode, path string) int64 // returns the event's offset
	}{
		{"put-then-post", func(t *testing.T, n *httpNode, path string) int64 {
			n.do(t, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated)
			return n.do(t, http.MethodPost, "/v1/stream"+path, tick, http.StatusNoContent)
		}},
		{"second-post", func(t *testing.T, n *httpNode, path string) int64 {
			return n.do(t, http.MethodPost, "/v1/stream/r/put-then-post", tick, http.StatusNoContent)
		}},
		{"put-with-body", func(t *testing.T, n *httpNode, path string) int64 {
			return n.do(t, http.MethodPut, "/v1/stream"+path, "["+tick+"]", http.StatusCreated)
		}},
		{"post-with-producer", func(t *testing.T, n *httpNode, path string) int64 {
			n.do(t, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated)
			n.do(t, http.MethodPost, "/v1/stream"+path, tick, http.StatusOK,
				"Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "0")
			return n.do(t, http.MethodPost, "/v1/stream"+path, tick, http.StatusOK,
				"Producer-Id", "p", "Producer-Epoch", "0", "Producer-Seq", "1")
		}},
		{"close-with-body", func(t *testing.T, n *httpNode, path string) int64 {
			n.do(t, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated)
			return n.do(t, http.MethodPost, "/v1/stream"+path, tick, http.StatusNoContent, "Stream-Closed", "true")
		}},
		{"huge-record", func(t *testing.T, n *httpNode, path string) int64 {
			n.do(t, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated)
			return n.do(t, http.MethodPost, "/v1/stream"+path, huge.String(), http.StatusNoContent)
		}},
		{"fork", func(t *testing.T, n *httpNode, path string) int64 {
			n.do(t, http.MethodPut, "/v1/stream/src/fork", "["+tick+"]", http.StatusCreated)
			return n.do(t, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated, "Stream-Forked-From", "/v1/stream/src/fork")
		}},
	}
	drivers := []struct {
		name string
		open func(t *testing.T) *stream.Store
	}{
		{"sqlite", func(t *testing.T) *stream.Store { return openStore(t, t.TempDir()+"/r.db", nil) }},
		{"postgres", func(t *testing.T) *stream.Store { return openStore(t, pgtest.URL(t), nil) }},
	}
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			n := startHTTPNode(t, d.open(t))
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					path := "/r/" + c.name
					off := c.write(t, n, path)
					acked := time.Now()
					if c.name == "second-post" {
						path = "/r/put-then-post"
					}
					key := fmt.Sprintf("%s@%d", path, off)
					re, ok := n.log.wait(key, 30*time.Second)
					if !ok {
						t.Fatalf("the processor's ProcessEvent never saw %s (nobody read the stream)", key)
					}
					t.Logf("ProcessEvent of %s %v after the write was acknowledged", key, max(0, re.at.Sub(acked)))
					deadline := time.NewTimer(30 * time.Second)
					defer deadline.Stop()
					poll := time.NewTicker(10 * time.Millisecond)
					defer poll.Stop()
					for n.processorOffset(t, path) < off {
						select {
						case <-poll.C:
						case <-deadline.C:
							t.Fatalf("/v1/streams/info never reported the processor on %s through %d", path, off)
						}
					}
				})
			}
		})
	}
}

// BenchmarkPatternReactionHTTP is BenchmarkPatternReaction for appends over HTTP: from a POST's
// acknowledgement to the processor's ProcessEvent of its event, one node behind a real HTTP
// server. engine=open: 20 streams whose engines are open (subscribed); engine=closed: every POST
// goes to a stream created just before by a PUT, whose engine the commit itself opens (nobody
// subscribes to it: the host hears of it through its commit watch). Run it with e.g.
//
//	go test -run '^$' -bench PatternReactionHTTP -benchtime 300x ./host
func BenchmarkPatternReactionHTTP(b *testing.B) {
	drivers := []struct {
		name string
		open func(b *testing.B) *stream.Store
	}{
		{"sqlite", func(b *testing.B) *stream.Store { return openStore(b, b.TempDir()+"/r.db", nil) }},
		{"postgres", func(b *testing.B) *stream.Store { return openStore(b, pgtest.URL(b), nil) }},
	}
	for _, d := range drivers {
		b.Run(d.name, func(b *testing.B) {
			n := startHTTPNode(b, d.open(b))
			for k := range reactionStreams {
				path := fmt.Sprintf("/r/open-%d", k)
				n.do(b, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated)
				off := n.do(b, http.MethodPost, "/v1/stream"+path, `{"type":"r"}`, http.StatusNoContent)
				if _, ok := n.log.wait(fmt.Sprintf("%s@%d", path, off), 30*time.Second); !ok {
					b.Fatalf("no ProcessEvent of %s@%d within 30 s", path, off)
				}
			}
			b.Run("engine=open", func(b *testing.B) {
				n.run(b, func(i int) string { return fmt.Sprintf("/r/open-%d", i%reactionStreams) })
			})
			cold := 0
			b.Run("engine=closed", func(b *testing.B) {
				n.run(b, func(int) string {
					cold++
					path := fmt.Sprintf("/r/cold-%d", cold)
					n.do(b, http.MethodPut, "/v1/stream"+path, "", http.StatusCreated)
					return path
				})
			})
		})
	}
}

// run POSTs b.N events, one at a time, to the streams pathOf names, and reports acknowledged →
// ProcessEvent (p50/p99/max-ms; 0 when the processor saw the event before the answer arrived).
func (n *httpNode) run(b *testing.B, pathOf func(i int) string) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		path := pathOf(i)
		b.StartTimer()
		off := n.do(b, http.MethodPost, "/v1/stream"+path, `{"type":"r"}`, http.StatusNoContent)
		acked := time.Now()
		key := fmt.Sprintf("%s@%d", path, off)
		re, ok := n.log.wait(key, 30*time.Second)
		if !ok {
			b.Fatalf("no ProcessEvent of %s within 30 s", key)
		}
		lat = append(lat, max(0, re.at.Sub(acked)))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(0, "ns/op")
}
