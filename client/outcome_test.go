package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
)

// TestAPlainAppendIsNotResentWhenItsCommitOutcomeIsUnknownButAProducersBatchIs: a 503 with code
// COMMIT_OUTCOME_UNKNOWN says the append may be written already. A plain append (which the
// server cannot tell from a new one) must not be resent — the caller gets the code — while an
// IdempotentProducer resends its batch (same epoch and seq), which the server settles.
func TestAPlainAppendIsNotResentWhenItsCommitOutcomeIsUnknownButAProducersBatchIs(t *testing.T) {
	var posts atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusOK)
			return
		}
		if posts.Add(1) == 1 {
			w.Header().Set(client.HeaderErrorCode, string(client.CodeCommitOutcomeUnknown))
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the database did not confirm the write's commit in time", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Stream-Next-Offset", "0000000000000001_0000000000000001")
		w.WriteHeader(http.StatusOK)
	}))
	defer ts.Close()
	cfg := client.Config{Retry: client.RetryPolicy{InitialDelay: time.Millisecond, MaxDelay: time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s, err := client.NewStream(ts.URL+"/v1/stream/x", cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Append(ctx, []byte("a"))
	if !errors.Is(err, client.ErrCommitOutcomeUnknown) {
		t.Fatalf("plain append answered COMMIT_OUTCOME_UNKNOWN: %v, want that code", err)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("plain append sent %d times, want 1 (not resent on COMMIT_OUTCOME_UNKNOWN)", n)
	}

	posts.Store(0)
	p, err := client.NewIdempotentProducer(s, "p", client.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("producer batch answered COMMIT_OUTCOME_UNKNOWN once: %v, want it resent and acknowledged", err)
	}
	if n := posts.Load(); n != 2 {
		t.Fatalf("producer sent its batch %d times, want 2 (resent once)", n)
	}
}
