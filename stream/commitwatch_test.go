package stream

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// heardPaths records the paths a store's commit watchers heard.
type heardPaths struct {
	mu    sync.Mutex
	paths map[string]int
	kick  chan struct{}
}

func watchHeard(t *testing.T, s *Store) *heardPaths {
	h := &heardPaths{paths: map[string]int{}, kick: make(chan struct{}, 1)}
	stop := s.Events().WatchCommits(func(path string) {
		h.mu.Lock()
		h.paths[path]++
		h.mu.Unlock()
		select {
		case h.kick <- struct{}{}:
		default:
		}
	})
	t.Cleanup(stop)
	return h
}

func (h *heardPaths) count(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.paths[path]
}

func (h *heardPaths) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.paths)
}

// waitHeard waits until h heard path, failing after a deadline generous for a loaded machine.
func waitHeard(t *testing.T, h *heardPaths, path, who string) {
	t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for h.count(path) == 0 {
		select {
		case <-h.kick:
		case <-deadline.C:
			t.Fatalf("the commit watchers of %s never heard of the commit on %s", who, path)
		}
	}
}

// A commit that lands messages reaches the commit watchers (the host, which opens the engines of
// pattern processors) however it was written over the protocol, with nobody subscribed to the
// stream: plain appends, producers' appends, huge records written in slices, closes and creates
// with a body, forks. On PostgreSQL another node's watchers hear of it too.
func TestCommitWatchersHearEveryProtocolWriteWithNobodySubscribed(t *testing.T) {
	const ct = "application/json"
	tick := []byte(`{"type":"ticked","payload":{"by":1}}`)
	huge, _ := hugeJSON(6_000) // ~1.2 MB: past slicedRecordBytes
	create := func(ctx context.Context, s *Store, path string, body []byte) error {
		_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: path, ContentType: ct, Body: body})
		return err
	}
	appendReq := func(ctx context.Context, s *Store, req AppendRequest) error {
		req.ContentType = ct
		_, err := s.Protocol().AppendRecord(ctx, req)
		return err
	}
	cases := []struct {
		name    string
		prepare func(ctx context.Context, s *Store, path string) error
		write   func(ctx context.Context, s *Store, path string) error
		sliced  bool // on SQLite the write is a huge record written in slices
	}{
		{name: "post", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: tick})
			}},
		{name: "post-messages-not-event-shaped", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: []byte(`[1,"two",{"three":3}]`)})
			}},
		{name: "post-producer-first", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 0}})
			}},
		{name: "post-producer-next", prepare: func(ctx context.Context, s *Store, path string) error {
			if err := create(ctx, s, path, nil); err != nil {
				return err
			}
			return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 0}})
		}, write: func(ctx context.Context, s *Store, path string) error {
			return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 1}})
		}},
		{name: "post-idempotency-key", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: []byte(`{"type":"ticked","idempotencyKey":"k1"}`)})
			}},
		{name: "post-expected-tail", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, tick) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, HasExpectedTail: true, ExpectedTail: 1})
			}},
		{name: "post-stream-seq", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, StreamSeq: "a"})
			}},
		{name: "huge-record", sliced: true, prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: huge})
			}},
		{name: "huge-record-producer", sliced: true, prepare: func(ctx context.Context, s *Store, path string) error {
			if err := create(ctx, s, path, nil); err != nil {
				return err
			}
			return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 0}})
		}, write: func(ctx context.Context, s *Store, path string) error {
			return appendReq(ctx, s, AppendRequest{Path: path, Body: huge, Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 1}})
		}},
		{name: "close-with-body", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, nil) },
			write: func(ctx context.Context, s *Store, path string) error {
				return appendReq(ctx, s, AppendRequest{Path: path, Body: tick, Close: true})
			}},
		{name: "put-with-body",
			write: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path, tick) }},
		{name: "put-closed-with-body",
			write: func(ctx context.Context, s *Store, path string) error {
				_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: path, ContentType: ct, Body: tick, Closed: true})
				return err
			}},
		{name: "fork", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path+"-src", tick) },
			write: func(ctx context.Context, s *Store, path string) error {
				_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: path, ForkedFrom: path + "-src"})
				return err
			}},
		{name: "fork-inside-a-record", prepare: func(ctx context.Context, s *Store, path string) error {
			return create(ctx, s, path+"-src", []byte(`[{"type":"ticked"},{"type":"ticked"},{"type":"ticked"}]`))
		}, write: func(ctx context.Context, s *Store, path string) error {
			_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: path, ForkedFrom: path + "-src",
				HasForkOffset: true, ForkOffset: 0, ForkSubOffset: 2})
			return err
		}},
		{name: "fork-with-body", prepare: func(ctx context.Context, s *Store, path string) error { return create(ctx, s, path+"-src", tick) },
			write: func(ctx context.Context, s *Store, path string) error {
				_, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: path, ForkedFrom: path + "-src", Body: tick})
				return err
			}},
	}
	drivers := []struct {
		name string
		open func(t *testing.T) (writer, other *Store)
	}{
		{"sqlite", func(t *testing.T) (*Store, *Store) {
			s, err := openStore(filepath.Join(t.TempDir(), "s.db"), Config{Logger: quietLog})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			return s, nil
		}},
		{"postgres", func(t *testing.T) (*Store, *Store) {
			url := pgtest.URL(t)
			open := func() *Store {
				ctx := context.Background()
				d, err := pgdriver.Open(ctx, pgdriver.Config{URL: url, Logger: quietLog})
				if err != nil {
					t.Fatal(err)
				}
				s, err := OpenDriver(ctx, d, Config{Logger: quietLog})
				if err != nil {
					d.Close()
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close(context.Background()) })
				return s
			}
			return open(), open()
		}},
	}
	for _, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			s, other := d.open(t)
			local := watchHeard(t, s)
			var remote *heardPaths
			if other != nil {
				remote = watchHeard(t, other)
			}
			ctx := context.Background()
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					path := "/w/" + c.name
					if c.prepare != nil {
						if err := c.prepare(ctx, s, path); err != nil {
							t.Fatalf("prepare: %v", err)
						}
					}
					if remote != nil {
						// Every notification of the preparation reaches the other node before
						// this one (one listener, in commit order): then nothing it heard of
						// path is left from the preparation.
						sentinel := fmt.Sprintf("/sentinel/%d", i)
						if err := create(ctx, s, sentinel, tick); err != nil {
							t.Fatal(err)
						}
						waitHeard(t, remote, sentinel, "the other node")
						remote.reset()
					}
					local.reset()
					before, _ := s.Protocol().HeadStream(ctx, path)
					commits := s.k.Commits()
					if err := c.write(ctx, s, path); err != nil {
						t.Fatalf("write: %v", err)
					}
					after, err := s.Protocol().HeadStream(ctx, path)
					if err != nil || after.Tail <= before.Tail {
						t.Fatalf("the write landed nothing: tail %d → %d, %v", before.Tail, after.Tail, err)
					}
					if c.sliced && s.exclusive {
						if n := s.k.Commits() - commits; n < 3 {
							t.Fatalf("the huge record took %d commits; want it written in slices", n)
						}
					}
					// The writer runs the hooks before it answers: the watchers heard of it already.
					if local.count(path) == 0 {
						t.Fatalf("the writing store's commit watchers did not hear of the commit on %s", path)
					}
					if remote != nil {
						waitHeard(t, remote, path, "the other node")
					}
				})
			}
		})
	}
}
