package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/client/internal/faultproxy"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

type numbered struct {
	N int    `json:"n"`
	P string `json:"p,omitempty"`
}

// readNumbers reads a JSON stream of numbered messages directly from the server.
func readNumbers(t *testing.T, ctx context.Context, s *client.Stream) []int {
	t.Helper()
	var got []int
	for m, err := range client.ReadJSON[numbered](ctx, s, client.ReadOptions{}) {
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		got = append(got, m.N)
	}
	// A catch-up read ends quietly when ctx ends; say so, or a deadline would pass for a loss.
	if err := ctx.Err(); err != nil {
		t.Fatalf("read back stopped after %d messages: %v", len(got), err)
	}
	return got
}

// checkExactlyOnce reports the first message that is missing, duplicated or out of order.
func checkExactlyOnce(t *testing.T, got []int, from, n int) {
	t.Helper()
	if len(got) != n {
		t.Errorf("message count: got %d, want %d", len(got), n)
	}
	for i, v := range got {
		if v != from+i {
			t.Fatalf("message %d: got n=%d, want %d (duplicate, loss or reorder)", i, v, from+i)
		}
	}
}

// TestProducerExactlyOnceThroughFaultProxy sends 100k messages (10k with -short) through a proxy
// that delays and reorders, fails with 503, drops responses after the server applied the request,
// and duplicates requests; every message must arrive exactly once and in order.
func TestProducerExactlyOnceThroughFaultProxy(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		n := exactlyOnceMessages()
		proxy, err := faultproxy.Start(base, faultproxy.Config{
			Delay: 0.3, MaxDelay: 3 * time.Millisecond,
			Unavailable: 0.05, DropResponse: 0.1, Duplicate: 0.1,
			Methods: []string{http.MethodPost}, Seed: 42,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		// No deadline of our own: -race on a loaded 2-core machine takes from ~40 s to minutes, and a
		// hang is caught by go test's -timeout, which also dumps every goroutine.
		ctx := t.Context()

		direct := newStream(t, base)
		if _, err := direct.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		viaProxy, err := client.NewStream(proxy.URL+mustPath(t, direct.URL()), client.Config{
			Retry: client.RetryPolicy{MaxAttempts: 100, InitialDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		viaProxy.SetContentType("application/json")
		var onErr, acked, unsentDuplicates atomic.Int64
		p, err := client.NewIdempotentProducer(viaProxy, "exactly-once", client.ProducerConfig{
			MaxBatchBytes: 2 << 10, MaxInFlight: 5, Linger: time.Millisecond,
			OnError: func(error) { onErr.Add(1) },
			OnBatch: func(b client.BatchOutcome) {
				acked.Add(int64(b.Messages))
				if b.Duplicate && !b.Resent {
					unsentDuplicates.Add(1)
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := p.Append([]byte(`{"n":` + strconv.Itoa(i) + `}`)); err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		}
		// Close the stream through the proxy too: its retries are deduplicated like appends.
		res, err := p.CloseStream(ctx, []byte(`{"n":`+strconv.Itoa(n)+`}`))
		if err != nil {
			t.Fatalf("close stream: %v", err)
		}
		if !res.Closed {
			t.Errorf("close stream: got %+v, want Closed", res)
		}
		if onErr.Load() != 0 {
			t.Errorf("OnError calls: got %d, want 0", onErr.Load())
		}
		st := proxy.Stats()
		// A duplicate of a batch the producer sent once can only come from the proxy repeating
		// the request here: no other writer uses this id.
		if acked.Load() != int64(n) || unsentDuplicates.Load() > int64(st.Duplicated) {
			t.Errorf("OnBatch: %d messages acknowledged, %d duplicates never resent (proxy repeated %d requests); want %d, at most that many",
				acked.Load(), unsentDuplicates.Load(), st.Duplicated, n)
		}
		t.Logf("%d messages in %d batches; proxy: %+v", n, p.NextSeq(), st)
		if st.Dropped == 0 || st.Duplicated == 0 || st.Unavailable == 0 || st.Delayed == 0 {
			t.Errorf("proxy injected too few faults to prove anything: %+v", st)
		}
		checkExactlyOnce(t, readNumbers(t, ctx, direct), 0, n+1)
	})
}

func mustPath(t *testing.T, u string) string {
	t.Helper()
	for i := len("http://"); i < len(u); i++ {
		if u[i] == '/' {
			return u[i:]
		}
	}
	t.Fatalf("no path in %q", u)
	return ""
}

func newJSONStream(t *testing.T, ctx context.Context, base string) *client.Stream {
	t.Helper()
	s := newStream(t, base)
	if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	return s
}

func appendRange(t *testing.T, p *client.IdempotentProducer, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := p.AppendJSON(numbered{N: i}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

func TestProducerZombieIsFenced(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		s := newJSONStream(t, ctx, base)

		zombie, err := client.NewIdempotentProducer(s, "svc", client.ProducerConfig{Epoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		appendRange(t, zombie, 0, 10)
		if err := zombie.Flush(ctx); err != nil {
			t.Fatalf("zombie flush: %v", err)
		}
		successor, err := client.NewIdempotentProducer(s, "svc", client.ProducerConfig{Epoch: 2})
		if err != nil {
			t.Fatal(err)
		}
		appendRange(t, successor, 10, 20)
		if err := successor.Flush(ctx); err != nil {
			t.Fatalf("successor flush: %v", err)
		}
		var reported atomic.Value
		zombie2, _ := client.NewIdempotentProducer(s, "svc", client.ProducerConfig{Epoch: 1, OnError: func(err error) { reported.Store(err) }})
		for _, z := range []*client.IdempotentProducer{zombie, zombie2} {
			appendRange(t, z, 100, 105)
			err := z.Flush(ctx)
			var stale *client.StaleEpochError
			if !errors.As(err, &stale) || stale.CurrentEpoch != 2 {
				t.Fatalf("zombie flush: got %v, want *StaleEpochError{CurrentEpoch: 2}", err)
			}
			if !errors.Is(err, client.ErrStaleEpoch) {
				t.Errorf("errors.Is(%v, ErrStaleEpoch) = false", err)
			}
			if err := z.Append([]byte(`{"n":999}`)); !errors.Is(err, client.ErrProducerFailed) {
				t.Errorf("append after fencing: got %v, want ErrProducerFailed", err)
			}
			if err := z.Close(ctx); !errors.Is(err, client.ErrStaleEpoch) {
				t.Errorf("close of a fenced producer: got %v, want the stale-epoch error", err)
			}
		}
		// OnError runs on the producer's background goroutine after the failed batch's waiters are
		// released (ProducerConfig.OnError), so Flush may return before it has run: wait for it.
		deadline := time.Now().Add(10 * time.Second)
		for reported.Load() == nil && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		if err, _ := reported.Load().(error); !errors.Is(err, client.ErrStaleEpoch) {
			t.Errorf("OnError: got %v, want the stale-epoch error", err)
		}
		checkExactlyOnce(t, readNumbers(t, ctx, s), 0, 20)
	})
}

func TestProducerAutoClaimFromFreshProducer(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		s := newJSONStream(t, ctx, base)

		// A previous process left the server at epoch 3.
		old, _ := client.NewIdempotentProducer(s, "svc", client.ProducerConfig{Epoch: 3})
		appendRange(t, old, 0, 5)
		if err := old.Close(ctx); err != nil {
			t.Fatalf("old close: %v", err)
		}
		// A process that starts at a lower epoch with auto-claim takes over, pipelining at once.
		fresh, _ := client.NewIdempotentProducer(s, "svc", client.ProducerConfig{Epoch: 1, AutoClaim: true, MaxBatchBytes: 64, Linger: -1})
		appendRange(t, fresh, 5, 200)
		if err := fresh.Flush(ctx); err != nil {
			t.Fatalf("fresh flush: %v", err)
		}
		if got := fresh.Epoch(); got != 4 {
			t.Errorf("claimed epoch: got %d, want 4", got)
		}
		res, err := fresh.CloseStream(ctx, []byte(`{"n":200}`))
		if err != nil {
			t.Fatalf("close stream: %v", err)
		}
		if !res.Closed {
			t.Errorf("close stream result: got %+v, want Closed", res)
		}
		again, err := fresh.CloseStream(ctx, nil)
		if err != nil || again.NextOffset != res.NextOffset {
			t.Errorf("repeated close: got %+v, %v; want the first result %+v", again, err, res)
		}
		if err := fresh.Append([]byte(`{"n":1}`)); !errors.Is(err, client.ErrProducerClosed) {
			t.Errorf("append after close: got %v, want ErrProducerClosed", err)
		}
		checkExactlyOnce(t, readNumbers(t, ctx, s), 0, 201)
		m, err := s.Head(ctx)
		if err != nil || !m.Closed {
			t.Errorf("head after close: got %+v, %v; want closed", m, err)
		}
	})
}

func TestProducerByteStreamConcatenatesAndRestarts(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		s := newStream(t, base)
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
		p, _ := client.NewIdempotentProducer(s, "bytes", client.ProducerConfig{})
		first := p.Epoch()
		for _, w := range []string{"a", "b", "c"} {
			if err := p.Append([]byte(w)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		if p.Epoch() != first+1 || p.NextSeq() != 0 {
			t.Errorf("after restart: epoch %d seq %d, want %d and 0", p.Epoch(), p.NextSeq(), first+1)
		}
		p.Append([]byte("d"))
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for c, err := range s.Read(ctx, client.ReadOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, c.Data...)
		}
		if string(got) != "abcd" {
			t.Errorf("stream content: got %q, want %q", got, "abcd")
		}
	})
}

// gate is a fake server whose producer POSTs block until released, for back-pressure and
// in-flight accounting.
type gate struct {
	arrived chan string
	release chan struct{}
	status  int
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	g.arrived <- string(body)
	select {
	case <-g.release:
	case <-r.Context().Done():
		return
	}
	w.Header().Set(client.HeaderStreamNextOffset, fmt.Sprintf("%016d_%016d", 0, len(body)))
	w.WriteHeader(g.status)
}

func TestProducerBackPressureAndInFlight(t *testing.T) {
	t.Parallel()
	g := &gate{arrived: make(chan string, 16), release: make(chan struct{}), status: http.StatusOK}
	srv := httptest.NewServer(g)
	defer srv.Close()
	ctx := ctxT(t)
	s, _ := client.NewStream(srv.URL+"/v1/stream/bp", client.Config{})
	s.SetContentType("application/octet-stream")
	p, _ := client.NewIdempotentProducer(s, "bp", client.ProducerConfig{MaxBatchBytes: 4, MaxBufferedBytes: 8, MaxInFlight: 1, Linger: -1})
	if err := p.Append([]byte("1234")); err != nil { // a full batch: sent at once
		t.Fatal(err)
	}
	if got := <-g.arrived; got != "1234" {
		t.Fatalf("first batch: got %q", got)
	}
	if got := p.InFlightCount(); got != 1 {
		t.Errorf("InFlightCount with one request on the wire: got %d, want 1", got)
	}
	if err := p.Append([]byte("5678")); err != nil { // buffered, waits for the slot
		t.Fatal(err)
	}
	if got := p.PendingCount(); got != 1 {
		t.Errorf("PendingCount: got %d, want 1", got)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.AppendContext(short, []byte("9")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append over MaxBufferedBytes: got %v, want context.DeadlineExceeded", err)
	}
	close(g.release)
	if err := p.AppendContext(ctx, []byte("9")); err != nil {
		t.Fatalf("append after space freed: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	if got := p.InFlightCount(); got != 0 {
		t.Errorf("InFlightCount after close: got %d, want 0", got)
	}
}

func TestProducerCloseReportsDeliveryError(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "bad producer headers", http.StatusBadRequest)
	}))
	defer srv.Close()
	ctx := ctxT(t)
	s, _ := client.NewStream(srv.URL+"/x", client.Config{})
	var reported atomic.Int64
	p, _ := client.NewIdempotentProducer(s, "e", client.ProducerConfig{OnError: func(error) { reported.Add(1) }})
	p.Append([]byte("x"))
	err := p.Close(ctx)
	if !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("close: got %v, want ErrBadRequest", err)
	}
	if calls.Load() != 1 {
		t.Errorf("requests: got %d, want 1 (400 is not retried)", calls.Load())
	}
	if reported.Load() != 1 {
		t.Errorf("OnError calls: got %d, want 1", reported.Load())
	}
}

func TestProducerRetriesServerErrorsWithSameSeq(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	var fails atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.Header.Get(client.HeaderProducerEpoch)+"/"+r.Header.Get(client.HeaderProducerSeq))
		if fails.Add(1) <= 2 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ctx := ctxT(t)
	s, _ := client.NewStream(srv.URL+"/x", client.Config{Retry: client.RetryPolicy{InitialDelay: time.Millisecond}})
	p, _ := client.NewIdempotentProducer(s, "r", client.ProducerConfig{MaxInFlight: 1})
	p.Append([]byte("x"))
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	e := strconv.FormatInt(p.Epoch(), 10)
	want := []string{e + "/0", e + "/0", e + "/0"}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("attempts: got %v, want %v", seen, want)
	}
}

func TestProducerValidatesOptions(t *testing.T) {
	t.Parallel()
	s, _ := client.NewStream("http://127.0.0.1:1/x", client.Config{})
	for name, tc := range map[string]struct {
		id string
		o  client.ProducerConfig
	}{
		"empty id":       {"", client.ProducerConfig{}},
		"negative epoch": {"p", client.ProducerConfig{Epoch: -1}},
		"negative batch": {"p", client.ProducerConfig{MaxBatchBytes: -1}},
		"negative slots": {"p", client.ProducerConfig{MaxInFlight: -1}},
	} {
		if _, err := client.NewIdempotentProducer(s, tc.id, tc.o); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
	s.SetContentType("application/json")
	p, _ := client.NewIdempotentProducer(s, "p", client.ProducerConfig{})
	if err := p.Append([]byte("{not json")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("invalid JSON message: got %v, want ErrInvalidArgument", err)
	}
}

func TestProducerConcurrentAppendersKeepTheirOrder(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		s := newJSONStream(t, ctx, base)
		p, _ := client.NewIdempotentProducer(s, "concurrent", client.ProducerConfig{MaxBatchBytes: 512})
		const writers, each = 4, 2000
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if err := p.AppendJSON(numbered{N: w*each + i}); err != nil {
						t.Errorf("writer %d append %d: %v", w, i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		got := readNumbers(t, ctx, s)
		if len(got) != writers*each {
			t.Fatalf("messages: got %d, want %d", len(got), writers*each)
		}
		next := make([]int, writers)
		for _, v := range got {
			w := v / each
			if v%each != next[w] {
				t.Fatalf("writer %d: got message %d, want %d (order within a goroutine must hold)", w, v%each, next[w])
			}
			next[w]++
		}
	})
}

func TestProducerCloseWithExpiredContextCancelsCleanly(t *testing.T) {
	t.Parallel()
	g := &gate{arrived: make(chan string, 16), release: make(chan struct{}), status: http.StatusOK}
	srv := httptest.NewServer(g)
	defer srv.Close()
	defer close(g.release)
	s, _ := client.NewStream(srv.URL+"/v1/stream/cancel", client.Config{})
	var reported atomic.Int64
	p, _ := client.NewIdempotentProducer(s, "cancel", client.ProducerConfig{Linger: -1, OnError: func(error) { reported.Add(1) }})
	if err := p.Append([]byte("stuck")); err != nil {
		t.Fatal(err)
	}
	<-g.arrived // the request is on the wire and the server holds it
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: got %v, want context.DeadlineExceeded", err)
	}
	// Close returned only after the cancelled request finished: nothing is left running.
	if got := p.InFlightCount(); got != 0 {
		t.Errorf("InFlightCount after close: got %d, want 0", got)
	}
	if err := p.Err(); !errors.Is(err, client.ErrProducerClosed) {
		t.Errorf("Err: got %v, want the abort recorded as ErrProducerClosed (the batch was not acknowledged)", err)
	}
	if err := p.Append([]byte("late")); !errors.Is(err, client.ErrProducerClosed) {
		t.Errorf("append after close: got %v, want ErrProducerClosed", err)
	}
}

// seqServer is a scripted producer endpoint: it applies seqs in order, answers 409 with
// Producer-Expected-Seq to a seq that arrives early, and holds seq 0 until seq 1 has been refused
// once, so the out-of-order path is taken deterministically.
type seqServer struct {
	mu        sync.Mutex
	next      int64
	accepted  []int64
	refused   []int64
	seq1Early chan struct{}
}

func (s *seqServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.ReadAll(r.Body)
	seq, _ := strconv.ParseInt(r.Header.Get(client.HeaderProducerSeq), 10, 64)
	if seq == 0 {
		<-s.seq1Early // seq 0 "arrives" after seq 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case seq < s.next:
		w.WriteHeader(http.StatusNoContent)
	case seq > s.next:
		s.refused = append(s.refused, seq)
		if seq == 1 && len(s.refused) == 1 {
			close(s.seq1Early)
		}
		w.Header().Set(client.HeaderProducerExpectedSeq, strconv.FormatInt(s.next, 10))
		w.Header().Set(client.HeaderProducerReceivedSeq, strconv.FormatInt(seq, 10))
		w.WriteHeader(http.StatusConflict)
	default:
		s.accepted = append(s.accepted, seq)
		s.next++
		w.WriteHeader(http.StatusOK)
	}
}

func TestProducerResolvesOutOfOrderConflicts(t *testing.T) {
	t.Parallel()
	ss := &seqServer{seq1Early: make(chan struct{})}
	srv := httptest.NewServer(ss)
	defer srv.Close()
	s, _ := client.NewStream(srv.URL+"/s", client.Config{})
	// An explicit epoch pipelines from the first batch.
	p, _ := client.NewIdempotentProducer(s, "ooo", client.ProducerConfig{Epoch: 1, MaxBatchBytes: 1, Linger: -1})
	p.Append([]byte("a")) // seq 0
	p.Append([]byte("b")) // seq 1, pipelined
	if err := p.Close(ctxT(t)); err != nil {
		t.Fatalf("close: %v", err)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if fmt.Sprint(ss.accepted) != "[0 1]" || fmt.Sprint(ss.refused) != "[1]" {
		t.Errorf("accepted %v, refused %v; want [0 1] after refusing the early seq 1 once", ss.accepted, ss.refused)
	}
}

func TestProducerUnresolvableGapIsSequenceGapError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(client.HeaderProducerExpectedSeq, "5")
		w.Header().Set(client.HeaderProducerReceivedSeq, "0")
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	s, _ := client.NewStream(srv.URL+"/s", client.Config{})
	p, _ := client.NewIdempotentProducer(s, "gap", client.ProducerConfig{})
	p.Append([]byte("x"))
	err := p.Flush(ctxT(t))
	var gap *client.SequenceGapError
	if !errors.As(err, &gap) || gap.ExpectedSeq != 5 || gap.ReceivedSeq != 0 || !errors.Is(err, client.ErrSequenceGap) {
		t.Fatalf("flush: got %v, want *SequenceGapError{5, 0}", err)
	}
}

// A second producer that resumes the first one's session (same id and epoch), whose batch the
// server already holds from the first, learns from OnBatch that its messages were not stored.
func TestProducerReportsDuplicateOfAnotherWritersBatch(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s := newStream(t, base)
	if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	outcomes := make(chan client.BatchOutcome, 2)
	for _, msg := range []string{`{"run":1}`, `{"run":2}`} {
		p, err := client.NewIdempotentProducer(s, "shared", client.ProducerConfig{
			Epoch: 7, Resume: true, OnBatch: func(b client.BatchOutcome) { outcomes <- b },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Append([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	first, second := <-outcomes, <-outcomes
	if first.Duplicate || first.Messages != 1 {
		t.Errorf("first producer: %+v, want a stored batch of 1", first)
	}
	if !second.Duplicate || second.Resent || second.Seq != 0 || second.Messages != 1 {
		t.Errorf("second producer: %+v, want a duplicate of seq 0 that was never resent", second)
	}
}

// A producer restarted with the same id and the default options, after the server restarted
// too, stores its new batch: it starts a fresh session instead of the earlier run's, whose
// sequence numbers the server would answer as duplicates.
func TestRestartedProducerWithTheDefaultEpochStoresNewData(t *testing.T) {
	db := t.TempDir() + "/restart.db"
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	run := func(msg string) (client.BatchOutcome, *client.Stream) {
		t.Helper()
		base, stop, err := testserver.Serve(db)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		s, err := client.NewStream(base+"/v1/stream/orders", client.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		var out client.BatchOutcome
		p, err := client.NewIdempotentProducer(s, "order-service", client.ProducerConfig{OnBatch: func(b client.BatchOutcome) { out = b }})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Append([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		var got []string
		for m, err := range s.Messages(ctx, client.ReadOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, string(m))
		}
		if msg == `{"run":2}` && strings.Join(got, ",") != `{"run":1},{"run":2}` {
			t.Errorf("after the second run the stream holds %v, want both runs' messages", got)
		}
		return out, s
	}
	first, _ := run(`{"run":1}`)
	second, _ := run(`{"run":2}`)
	if first.Duplicate || second.Duplicate {
		t.Errorf("outcomes %+v and %+v: the restarted producer's new batch was taken for a duplicate", first, second)
	}
	if second.Epoch <= first.Epoch {
		t.Errorf("the restarted producer is at epoch %d, not above the first run's %d", second.Epoch, first.Epoch)
	}
}
