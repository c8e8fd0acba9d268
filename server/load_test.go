package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// TestLoadWritersAndSSEReaders runs many concurrent writers and SSE readers over loopback for a
// fixed time, then closes the streams and checks that every reader saw every acknowledged message
// exactly once, in each writer's order. SSE connections are cycled every second, so readers also
// exercise reconnecting from their last offset.
func TestLoadWritersAndSSEReaders(t *testing.T) {
	t.Parallel()
	const (
		streams          = 4
		writersPerStream = 4
		readersPerStream = 3
	)
	duration := 5 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	st, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "load.db"), storeopen.Config{SQLite: sqlitedriver.Config{Synchronous: sqlitedriver.SyncNormal}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	ts := httptest.NewServer(newServer(t, st, server.Config{LongPollTimeout: 200 * time.Millisecond, SSEMaxDuration: time.Second}))
	defer ts.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

	for s := range streams {
		req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/v1/stream/load-%d", ts.URL, s), nil)
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("create: %v %v", err, res)
		}
		res.Body.Close()
	}

	type msg struct{ W, N int }
	acked := make([][]msg, streams) // per stream, acknowledged messages
	var ackMu sync.Mutex
	var appends atomic.Int64

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	received := make([][][]msg, streams)
	var readers sync.WaitGroup
	for s := range streams {
		received[s] = make([][]msg, readersPerStream)
		for r := range readersPerStream {
			readers.Add(1)
			go func() {
				defer readers.Done()
				got, err := readSSEUntilClosed(ctx, client, fmt.Sprintf("%s/v1/stream/load-%d", ts.URL, s))
				if err != nil {
					t.Errorf("reader %d/%d: %v", s, r, err)
				}
				for _, raw := range got {
					var m msg
					if err := json.Unmarshal(raw, &m); err != nil {
						t.Errorf("reader %d/%d: bad message %s", s, r, raw)
					}
					received[s][r] = append(received[s][r], m)
				}
			}()
		}
	}

	deadline := time.Now().Add(duration)
	var writers sync.WaitGroup
	for s := range streams {
		for w := range writersPerStream {
			writers.Add(1)
			go func() {
				defer writers.Done()
				id := s*100 + w
				for n := 0; time.Now().Before(deadline); n++ {
					body := fmt.Sprintf(`[{"W":%d,"N":%d}]`, id, n)
					req, _ := http.NewRequest("POST", fmt.Sprintf("%s/v1/stream/load-%d", ts.URL, s), strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					res, err := client.Do(req)
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					res.Body.Close()
					if res.StatusCode != 204 {
						t.Errorf("append: status %d", res.StatusCode)
						return
					}
					appends.Add(1)
					ackMu.Lock()
					acked[s] = append(acked[s], msg{id, n})
					ackMu.Unlock()
				}
			}()
		}
	}
	writers.Wait()
	for s := range streams {
		req, _ := http.NewRequest("POST", fmt.Sprintf("%s/v1/stream/load-%d", ts.URL, s), nil)
		req.Header.Set("Stream-Closed", "true")
		res, err := client.Do(req)
		if err != nil || res.StatusCode != 204 {
			t.Fatalf("close: %v %v", err, res)
		}
		res.Body.Close()
	}
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("readers did not finish after the streams closed")
	}

	delivered := 0
	for s := range streams {
		want := map[msg]bool{}
		for _, m := range acked[s] {
			want[m] = true
		}
		for r := range readersPerStream {
			got := received[s][r]
			delivered += len(got)
			if len(got) != len(acked[s]) {
				t.Errorf("stream %d reader %d: got %d messages, want %d", s, r, len(got), len(acked[s]))
			}
			seen := map[msg]bool{}
			last := map[int]int{}
			for _, m := range got {
				if seen[m] {
					t.Errorf("stream %d reader %d: %v delivered twice", s, r, m)
				}
				seen[m] = true
				if !want[m] {
					t.Errorf("stream %d reader %d: %v was never acknowledged", s, r, m)
				}
				if prev, ok := last[m.W]; ok && m.N != prev+1 {
					t.Errorf("stream %d reader %d: writer %d out of order: %d after %d", s, r, m.W, m.N, prev)
				}
				last[m.W] = m.N
			}
		}
	}
	t.Logf("load: %d appends in %v (%.0f appends/s) by %d writers; %d messages delivered to %d SSE readers",
		appends.Load(), duration, float64(appends.Load())/duration.Seconds(), streams*writersPerStream, delivered, streams*readersPerStream)
}

// readSSEUntilClosed reads a JSON stream over SSE from the start, reconnecting from the last
// streamNextOffset whenever the server ends the connection, until a streamClosed control event.
func readSSEUntilClosed(ctx context.Context, client *http.Client, url string) ([]json.RawMessage, error) {
	var out []json.RawMessage
	offset := "-1"
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"?offset="+offset+"&live=sse", nil)
		res, err := client.Do(req)
		if err != nil {
			return out, err
		}
		if res.StatusCode != 200 {
			res.Body.Close()
			return out, fmt.Errorf("sse status %d", res.StatusCode)
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		var event string
		var data []string
		var pending []json.RawMessage
		closed := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(line, "data:"))
			case line == "":
				payload := strings.Join(data, "\n")
				data = nil
				switch event {
				case "data":
					var batch []json.RawMessage
					if err := json.Unmarshal([]byte(payload), &batch); err != nil {
						res.Body.Close()
						return out, fmt.Errorf("data event: %w", err)
					}
					pending = append(pending, batch...)
				case "control":
					var c struct {
						StreamNextOffset string `json:"streamNextOffset"`
						StreamClosed     bool   `json:"streamClosed"`
					}
					if err := json.Unmarshal([]byte(payload), &c); err != nil {
						res.Body.Close()
						return out, fmt.Errorf("control event: %w", err)
					}
					// Data counts once its control event moved the offset.
					out = append(out, pending...)
					pending = nil
					offset = c.StreamNextOffset
					closed = c.StreamClosed
				}
			}
		}
		res.Body.Close()
		if closed {
			return out, nil
		}
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
	}
}
