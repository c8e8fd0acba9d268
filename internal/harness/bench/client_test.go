package bench_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/bench"
)

// chunkedLog is a fake server holding messages in one JSON stream and answering catch-up reads
// with at most perRead messages per response, with offsets "0000000000000000_<index>".
type chunkedLog struct {
	msgs     [][]byte
	perRead  int
	stuck    bool // never advance and never report up to date
	noOffset bool // omit Stream-Next-Offset
	requests int
}

func offsetOf(i int) string { return fmt.Sprintf("0000000000000000_%016d", i) }

func (l *chunkedLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.requests++
	from := 0
	if o := r.URL.Query().Get("offset"); o != "-1" {
		_, idx, _ := strings.Cut(o, "_")
		from, _ = strconv.Atoi(idx)
	}
	to := min(from+l.perRead, len(l.msgs))
	if l.stuck {
		to = from
	}
	if !l.noOffset {
		w.Header().Set("Stream-Next-Offset", offsetOf(to))
	}
	if to == len(l.msgs) && !l.stuck {
		w.Header().Set("Stream-Up-To-Date", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte("[" + string(bytes.Join(l.msgs[from:to], []byte(","))) + "]"))
}

func newLog(n, perRead int) *chunkedLog {
	l := &chunkedLog{perRead: perRead}
	for i := 0; i < n; i++ {
		l.msgs = append(l.msgs, bench.Message(int64(i), bench.MessageSizeDefault))
	}
	return l
}

func setup(t *testing.T, h http.Handler) *bench.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bench.Client{Base: srv.URL, HTTP: bench.NewHTTPClient()}
}

func TestCatchUpFollowsNextOffsetAcrossChunks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		n, perRead   int
		wantRequests int
	}{
		{"one response like the reference", 250, 1000, 1},
		{"capped responses", 250, 100, 3},
		{"exact multiple", 200, 100, 2},
		{"empty stream", 0, 100, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := newLog(tt.n, tt.perRead)
			c := setup(t, l)
			res, err := c.CatchUp(context.Background(), "s")
			if err != nil {
				t.Fatal(err)
			}
			if res.Messages != tt.n {
				t.Errorf("Messages = %d, want %d", res.Messages, tt.n)
			}
			if res.Requests != tt.wantRequests {
				t.Errorf("Requests = %d, want %d", res.Requests, tt.wantRequests)
			}
			if want := offsetOf(tt.n); res.NextOffset != want {
				t.Errorf("NextOffset = %q, want %q", res.NextOffset, want)
			}
			wantBytes := tt.n*bench.MessageSizeDefault + max(tt.n-1, 0)
			if res.Bytes < int64(wantBytes) {
				t.Errorf("Bytes = %d, want at least %d", res.Bytes, wantBytes)
			}
		})
	}
}

func TestCatchUpRefusesAServerThatMakesNoProgress(t *testing.T) {
	t.Parallel()
	l := newLog(10, 5)
	l.stuck = true
	c := setup(t, l)
	_, err := c.CatchUp(context.Background(), "s")
	if err == nil || !strings.Contains(err.Error(), "no progress") {
		t.Fatalf("err = %v, want a no-progress error", err)
	}
	// -1 to the first real offset is progress; the second response repeating it is not.
	if l.requests != 2 {
		t.Errorf("requests = %d, want 2", l.requests)
	}
}

func TestCatchUpRefusesAResponseWithoutNextOffset(t *testing.T) {
	t.Parallel()
	l := newLog(10, 5)
	l.noOffset = true
	c := setup(t, l)
	if _, err := c.CatchUp(context.Background(), "s"); err == nil {
		t.Fatal("err = nil, want an error for a missing Stream-Next-Offset")
	}
}

func TestSSEReaderParsesEvents(t *testing.T) {
	t.Parallel()
	wire := "event: control\ndata:{\"streamNextOffset\":\"0_0\",\"upToDate\":true}\n\n" +
		": a comment\n" +
		"event: data\ndata:[{\"a\":1},\ndata:{\"b\":2}]\n\n" +
		"event: data\r\ndata: spaced\r\n\r\n"
	resp := &http.Response{Body: io.NopCloser(strings.NewReader(wire))}
	r := bench.NewSSEReader(resp)
	want := []bench.SSEEvent{
		{Type: "control", Data: []byte(`{"streamNextOffset":"0_0","upToDate":true}`)},
		{Type: "data", Data: []byte("[{\"a\":1},\n{\"b\":2}]")},
		{Type: "data", Data: []byte("spaced")},
	}
	for i, w := range want {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
			t.Errorf("event %d = {%s %q}, want {%s %q}", i, got.Type, got.Data, w.Type, w.Data)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last event err = %v, want io.EOF", err)
	}
}

// sequencer is a fake producer endpoint that accepts seq n only after n-1 (docs/server.md#idempotent-producers), and
// holds back seq 0 so that later requests overtake it and get 409 gaps.
type sequencer struct {
	mu      sync.Mutex
	next    int64
	gaps    int
	release chan struct{}
}

func (s *sequencer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	seq, _ := strconv.ParseInt(r.Header.Get("Producer-Seq"), 10, 64)
	if seq == 0 {
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case seq < s.next:
		w.WriteHeader(http.StatusNoContent)
	case seq == s.next:
		s.next++
		w.WriteHeader(http.StatusOK)
	default:
		s.gaps++
		if s.gaps == 3 {
			close(s.release) // enough requests overtook seq 0: let it through
		}
		w.Header().Set("Producer-Expected-Seq", strconv.FormatInt(s.next, 10))
		w.WriteHeader(http.StatusConflict)
	}
}

func TestProduceResendsBatchesThatOvertookAnEarlierOne(t *testing.T) {
	t.Parallel()
	s := &sequencer{release: make(chan struct{})}
	c := setup(t, s)
	bodies := make([][]byte, 20)
	for i := range bodies {
		bodies[i] = bench.Batch(int64(i*10), 10, 50)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := bench.Produce(ctx, c, "s", "p", bodies, 5, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Acked != len(bodies) {
		t.Errorf("Acked = %d, want %d", st.Acked, len(bodies))
	}
	if st.Retries < 3 {
		t.Errorf("Retries = %d, want at least 3", st.Retries)
	}
	if s.next != int64(len(bodies)) {
		t.Errorf("server accepted through seq %d, want %d", s.next-1, len(bodies)-1)
	}
}
