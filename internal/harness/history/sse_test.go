package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/foldstream/foldstream/internal/harness/history"
)

// fakeLog is a one-node JSON stream server just big enough for the workload: appends, catch-up
// reads and SSE sessions. With skipInSSE, its SSE data events leave out every message at an
// offset divisible by 5 — a server bug the checker must find from the SSE sessions alone.
type fakeLog struct {
	mu        sync.Mutex
	streams   map[string][]string
	skipInSSE bool
}

func fakeOff(n int) string { return fmt.Sprintf("%016d_%016d", 0, n) }

func parseOff(s string) int {
	if s == "-1" {
		return 0
	}
	_, n, _ := strings.Cut(s, "_")
	v, _ := strconv.Atoi(n)
	return v
}

func (f *fakeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Path
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPut:
		f.streams[name] = []string{}
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodPost:
		var m string
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &m)
		f.streams[name] = append(f.streams[name], m)
		w.Header().Set("Stream-Next-Offset", fakeOff(len(f.streams[name])))
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Query().Get("live") == "sse":
		from := parseOff(r.URL.Query().Get("offset"))
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for {
			msgs := f.streams[name][from:]
			var out []string
			for i, m := range msgs {
				if f.skipInSSE && (from+i+1)%5 == 0 {
					continue
				}
				out = append(out, m)
			}
			if len(msgs) > 0 {
				b, _ := json.Marshal(out)
				fmt.Fprintf(w, "event: data\ndata:%s\n\n", b)
			}
			from += len(msgs)
			fmt.Fprintf(w, "event: control\ndata:{\"streamNextOffset\":%q,\"upToDate\":true}\n\n", fakeOff(from))
			fl.Flush()
			f.mu.Unlock()
			select {
			case <-r.Context().Done():
				f.mu.Lock()
				return
			case <-time.After(50 * time.Millisecond): // the fake's poll of its own log
			}
			f.mu.Lock()
		}
	default:
		from := parseOff(r.URL.Query().Get("offset"))
		b, _ := json.Marshal(f.streams[name][from:])
		w.Header().Set("Stream-Next-Offset", fakeOff(len(f.streams[name])))
		w.Header().Set("Stream-Up-To-Date", "true")
		w.Write(b)
	}
}

// runSSEWorkload runs a workload whose readers only catch up and follow SSE against f until it
// has recorded at least 20 SSE reads that carried messages, and returns the checker's verdict.
func runSSEWorkload(t *testing.T, f *fakeLog) history.Result {
	t.Helper()
	ts := httptest.NewServer(f)
	defer ts.Close()
	w := &history.Workload{Targets: []string{ts.URL}, Prefix: "s", Streams: 1, Writers: 2, Readers: 2, NoLongPoll: true, Timeout: 3 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.Create(ctx); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(lctx) }()
	sseWithData := func() int {
		n := 0
		for _, op := range w.Rec.Operations() {
			if in, out := op.Input.(history.Input), op.Output.(history.Output); in.Live == "sse" && len(out.Msgs) > 0 {
				n++
			}
		}
		return n
	}
	for sseWithData() < 20 {
		select {
		case <-ctx.Done():
			t.Fatalf("the readers recorded %d SSE reads with messages in 60 s", sseWithData())
		case <-time.After(20 * time.Millisecond): // polling the recorder
		}
	}
	stop()
	<-done
	if err := w.FinalReads(ctx); err != nil {
		t.Fatal(err)
	}
	return history.Check(w.Rec.Operations(), 30*time.Second, t.TempDir())
}

// TestCheckerJudgesSSESessions: SSE sessions are recorded as reads (one per control event), so a
// history whose SSE sessions saw every message passes, and one whose SSE sessions skipped
// messages that catch-up reads show is rejected.
func TestCheckerJudgesSSESessions(t *testing.T) {
	if r := runSSEWorkload(t, &fakeLog{streams: map[string][]string{}}); r.Verdict != porcupine.Ok {
		t.Errorf("a correct SSE server: %v\n%s", r.Verdict, r.Explanation)
	}
	if r := runSSEWorkload(t, &fakeLog{streams: map[string][]string{}, skipInSSE: true}); r.Verdict != porcupine.Illegal {
		t.Errorf("positive control: SSE sessions that skip messages: verdict %v, want Illegal", r.Verdict)
	}
}
