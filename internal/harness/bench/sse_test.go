package bench_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
)

// liveStream is a fake one-stream server: POST appends a JSON message, GET live=sse sends an
// initial control event and then one data event per POST. Every third POST is delivered twice,
// and a control event follows every data event, as real servers interleave them.
type liveStream struct {
	mu    sync.Mutex
	subs  []chan []byte
	posts int
}

func (l *liveStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPut:
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		l.mu.Lock()
		l.posts++
		n := 1
		if l.posts%3 == 0 {
			n = 2
		}
		for _, s := range l.subs {
			for i := 0; i < n; i++ {
				s <- body
			}
		}
		l.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Query().Get("live") == "sse":
		ch := make(chan []byte, 16)
		l.mu.Lock()
		l.subs = append(l.subs, ch)
		l.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "event: control\ndata:{\"streamNextOffset\":\"0_0\",\"upToDate\":true}\n\n")
		fl.Flush()
		for {
			select {
			case b := <-ch:
				fmt.Fprintf(w, "event: data\ndata:[%s]\n\nevent: control\ndata:{\"upToDate\":true}\n\n", b)
				fl.Flush()
			case <-r.Context().Done():
				return
			}
		}
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

func TestSSELatencyMatchesEachPostToItsEvent(t *testing.T) {
	t.Parallel()
	c := setup(t, &liveStream{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lat, err := bench.SSELatency(ctx, c, "s", 20, bench.MessageSizeDefault)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 20 {
		t.Fatalf("got %d latencies, want 20", len(lat))
	}
	for i, d := range lat {
		if d <= 0 || d > 5*time.Second {
			t.Errorf("latency %d = %v, want a small positive duration", i, d)
		}
	}
}

// A server that never delivers the event must fail the measurement, not hang it.
func TestSSELatencyFailsWhenEventsNeverArrive(t *testing.T) {
	t.Parallel()
	mute := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Query().Get("live") == "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: control\ndata:{}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	c := setup(t, mute)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := bench.SSELatency(ctx, c, "s", 3, bench.MessageSizeDefault); err == nil {
		t.Fatal("err = nil, want an error when no data event arrives")
	}
}
