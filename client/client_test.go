package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
)

var streamCounter atomic.Int64

// setup starts (once per test) a server and returns a handle to a fresh stream URL on it.
func newStream(t *testing.T, base string) *client.Stream {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano(), streamCounter.Add(1))
	s, err := client.NewStream(base+"/v1/stream/"+name, client.Config{Retry: client.RetryPolicy{InitialDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		s := newStream(t, base)

		m, err := s.Create(ctx, client.CreateOptions{ContentType: "text/plain", TTL: time.Hour, Data: []byte("hello ")})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if m.Status != http.StatusCreated {
			t.Errorf("create status: got %d, want 201", m.Status)
		}
		if _, err := s.Append(ctx, []byte("world"), client.WithSeq("001")); err != nil {
			t.Fatalf("append: %v", err)
		}
		_, err = s.Append(ctx, []byte("again"), client.WithSeq("001"))
		if !errors.Is(err, client.ErrConflict) {
			t.Fatalf("append with a repeated Stream-Seq: got %v, want ErrConflict", err)
		}
		h, err := s.Head(ctx)
		if err != nil {
			t.Fatalf("head: %v", err)
		}
		if h.ContentType != "text/plain" || h.TTL != time.Hour || h.Closed {
			t.Errorf("head: got %+v, want text/plain, 1h TTL, open", h)
		}
		var got strings.Builder
		for c, err := range s.Read(ctx, client.ReadOptions{}) {
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			got.Write(c.Data)
		}
		if got.String() != "hello world" {
			t.Errorf("read: got %q, want %q", got.String(), "hello world")
		}
		res, err := s.Close(ctx, []byte("!"))
		if err != nil {
			t.Fatalf("close: %v", err)
		}
		_, err = s.Append(ctx, []byte("late"))
		var closed *client.StreamClosedError
		if !errors.As(err, &closed) || closed.FinalOffset != res.NextOffset {
			t.Fatalf("append after close: got %v, want *StreamClosedError{FinalOffset: %q}", err, res.NextOffset)
		}
		if !errors.Is(err, client.ErrStreamClosed) {
			t.Errorf("errors.Is(%v, ErrStreamClosed) = false", err)
		}
		if err := s.Delete(ctx); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if _, err := s.Head(ctx); !errors.Is(err, client.ErrStreamNotFound) {
			t.Fatalf("head after delete: got %v, want ErrStreamNotFound", err)
		}
		if err := s.Delete(ctx); !errors.Is(err, client.ErrStreamNotFound) {
			t.Fatalf("second delete: got %v, want ErrStreamNotFound", err)
		}
	})
}

func TestLiveModes(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		for _, mode := range []client.LiveMode{client.LiveLongPoll, client.LiveSSE, client.LiveAuto} {
			for _, ct := range []string{"application/json", "application/octet-stream", "text/plain"} {
				t.Run(string(mode)+"/"+ct, func(t *testing.T) {
					t.Parallel()
					ctx := ctxT(t)
					s := newStream(t, base)
					if _, err := s.Create(ctx, client.CreateOptions{ContentType: ct}); err != nil {
						t.Fatal(err)
					}
					var want []string
					for i := range 3 {
						msg := fmt.Sprintf(`{"n":%d,"s":"line\r\nbreak"}`, i)
						want = append(want, msg)
						if _, err := s.Append(ctx, []byte(msg)); err != nil {
							t.Fatal(err)
						}
					}
					reader := client.ReadOptions{Live: mode}
					upToDate := make(chan struct{})
					done := make(chan error, 1)
					var got []byte
					var gotMsgs []string
					go func() {
						once := false
						for c, err := range s.Read(ctx, reader) {
							if err != nil {
								done <- err
								return
							}
							if client.IsJSON(ct) {
								msgs, err := client.SplitJSON(c.Data)
								if err != nil {
									done <- err
									return
								}
								for _, m := range msgs {
									gotMsgs = append(gotMsgs, string(m))
								}
							} else {
								got = append(got, c.Data...)
							}
							if c.UpToDate && !once {
								once = true
								close(upToDate)
							}
						}
						done <- nil
					}()
					<-upToDate
					msg := `{"n":3,"s":"line\r\nbreak"}`
					want = append(want, msg)
					if _, err := s.Close(ctx, []byte(msg)); err != nil {
						t.Fatal(err)
					}
					if err := <-done; err != nil {
						t.Fatalf("read: %v", err)
					}
					if client.IsJSON(ct) {
						for i := range want {
							var v map[string]any
							json.Unmarshal([]byte(want[i]), &v)
							b, _ := json.Marshal(v)
							want[i] = string(b)
						}
						if strings.Join(gotMsgs, "|") != strings.Join(want, "|") {
							t.Errorf("messages: got %q, want %q", gotMsgs, want)
						}
					} else if string(got) != strings.Join(want, "") {
						t.Errorf("bytes: got %q, want %q", got, strings.Join(want, ""))
					}
				})
			}
		}
	})
}

func TestCreateOptions(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)

		closed := newStream(t, base)
		m, err := closed.Create(ctx, client.CreateOptions{ContentType: "text/plain", Closed: true, Data: []byte("all of it")})
		if err != nil || !m.Closed || m.Status != http.StatusCreated {
			t.Fatalf("create closed: got %+v, %v; want 201 and closed", m, err)
		}
		again, err := closed.Create(ctx, client.CreateOptions{ContentType: "text/plain", Closed: true})
		if err != nil || again.Status != http.StatusOK {
			t.Errorf("idempotent re-create: got %+v, %v; want 200", again, err)
		}
		if _, err := closed.Create(ctx, client.CreateOptions{ContentType: "application/json"}); !errors.Is(err, client.ErrConflict) {
			t.Errorf("re-create with another config: got %v, want ErrConflict", err)
		}
		var chunks []client.Chunk
		for c, err := range closed.Read(ctx, client.ReadOptions{Live: client.LiveLongPoll}) {
			if err != nil {
				t.Fatal(err)
			}
			chunks = append(chunks, c)
		}
		if len(chunks) != 1 || string(chunks[0].Data) != "all of it" || !chunks[0].Closed {
			t.Errorf("read of a stream created closed: got %+v, want one closed chunk with the data", chunks)
		}

		expiring := newStream(t, base)
		at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		if _, err := expiring.Create(ctx, client.CreateOptions{ExpiresAt: at}); err != nil {
			t.Fatalf("create with ExpiresAt: %v", err)
		}
		h, err := expiring.Head(ctx)
		if err != nil || !h.ExpiresAt.Equal(at) || h.ContentType != client.DefaultContentType {
			t.Errorf("head: got %+v, %v; want ExpiresAt %v and the default content type", h, err, at)
		}
		if _, err := newStream(t, base).Create(ctx, client.CreateOptions{TTL: time.Second, ExpiresAt: at}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("TTL with ExpiresAt: got %v, want ErrInvalidArgument", err)
		}
	})
}

func TestFork(t *testing.T) {
	t.Parallel()
	eachServer(t, func(t *testing.T, base string) {
		ctx := ctxT(t)
		src := newStream(t, base)
		created, err := src.Create(ctx, client.CreateOptions{ContentType: "text/plain", Data: []byte("shared ")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Append(ctx, []byte("source-only")); err != nil {
			t.Fatal(err)
		}
		// Fork where the initial data ends: the fork inherits "shared " but not "source-only".
		fork := newStream(t, base)
		if _, err := fork.Create(ctx, client.CreateOptions{ForkOf: src.URL(), ForkOffset: created.NextOffset, Data: []byte("fork-only")}); err != nil {
			t.Fatalf("create fork: %v", err)
		}
		var got []byte
		for c, err := range fork.Read(ctx, client.ReadOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, c.Data...)
		}
		if string(got) != "shared fork-only" {
			t.Errorf("fork content: got %q, want %q", got, "shared fork-only")
		}
		if m, err := fork.Head(ctx); err != nil || m.ContentType != "text/plain" {
			t.Errorf("fork head: got %+v, %v; want the inherited text/plain", m, err)
		}
		missing := newStream(t, base)
		if _, err := newStream(t, base).Create(ctx, client.CreateOptions{ForkOf: missing.URL()}); !errors.Is(err, client.ErrStreamNotFound) {
			t.Errorf("fork of a missing stream: got %v, want ErrStreamNotFound", err)
		}
	})
}
