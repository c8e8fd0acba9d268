package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
	"github.com/foldstream/foldstream/testsupport"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// testT is the fake clock's start (testsupport.T).
var testT = testsupport.T

// ---- the ticker fixture: counts "tick" events ---------------------------------------------

type countState struct {
	Ticks   int     `json:"ticks"`
	Offsets []int64 `json:"offsets,omitempty"`
}

// ticker counts "tick" events, records each offset in its state and its effects, and emits a
// "milestone" every third tick (idempotently).
type ticker struct {
	foldstream.Base[countState]
	mu      sync.Mutex
	effects []int64
}

func newTicker(t testing.TB, slug string) *ticker {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{
		Slug: slug, Version: "1", Consumes: []string{"tick"}, Emits: []string{"milestone"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &ticker{Base: foldstream.NewBase(c)}
}

func (p *ticker) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1, Offsets: append(slices.Clone(a.State.Offsets), a.Event.Offset)}, true, nil
}

func (p *ticker) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil
	}
	p.mu.Lock()
	p.effects = append(p.effects, a.Event.Offset)
	p.mu.Unlock()
	if n := a.State.Ticks; n%3 == 0 {
		a.BlockProcessorWhile(func(ctx context.Context) error {
			_, err := a.Append(ctx, foldtype.EventInput{Type: "milestone", Payload: foldtype.JSON(map[string]int{"at": n}),
				IdempotencyKey: p.IdempotencyKey(fmt.Sprintf("milestone-%d", n), nil)})
			return err
		})
	}
	return nil
}

func (p *ticker) gotEffects() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.effects)
}

func openStore(t testing.TB, path string, clk foldtype.Clock) *stream.Store {
	t.Helper()
	s, err := storeopen.Open(context.Background(), path, storeopen.Config{Store: stream.Config{Clock: clk, Logger: quietLog}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sqliteDriver opens the SQLite driver of a new file, for a test that wraps it.
func sqliteDriver(t testing.TB) *sqlitedriver.Driver {
	t.Helper()
	d, err := sqlitedriver.Open(context.Background(), sqlitedriver.Config{Path: filepath.Join(t.TempDir(), "s.db")})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// pgDriver opens the PostgreSQL driver on a private schema, for a test that wraps it.
func pgDriver(t testing.TB) *pgdriver.Driver {
	t.Helper()
	d, err := pgdriver.Open(context.Background(), pgdriver.Config{URL: pgtest.URL(t), Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// storeOver opens a store over d, a test's wrapper of the driver under (closed when the store
// cannot open; the store closes it otherwise), and closes the store when the test ends.
func storeOver(t testing.TB, under interface{ Close() error }, d driver.Driver, clk foldtype.Clock) *stream.Store {
	t.Helper()
	s, err := stream.OpenDriver(context.Background(), d, stream.Config{Logger: quietLog, Clock: clk})
	if err != nil {
		under.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newHost(t testing.TB, s *stream.Store) *host.Host {
	t.Helper()
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func state(t testing.TB, raw json.RawMessage) countState {
	t.Helper()
	var st countState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("state %s: %v", raw, err)
	}
	return st
}

// ---- the seer fixture: records what it reduced ---------------------------------------------

type seenState struct {
	Seen []string `json:"seen"`
}

type seer struct{ foldstream.Base[seenState] }

func newSeer(t testing.TB, slug string, consumes ...string) *seer {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[seenState]{Slug: slug, Version: "1", Consumes: consumes})
	if err != nil {
		t.Fatal(err)
	}
	return &seer{Base: foldstream.NewBase(c)}
}

func (p *seer) Reduce(a foldstream.ReduceArgs[seenState]) (seenState, bool, error) {
	return seenState{Seen: append(slices.Clone(a.State.Seen), fmt.Sprintf("%s@%d", a.Event.Type, a.Event.Offset))}, true, nil
}

func (p *seer) ProjectLiveState(seenState) (any, error) { return nil, nil }

// heldTicker holds its first event's batch until released, so pushes pile up behind it.
type heldTicker struct {
	*ticker
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (p *heldTicker) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event != nil {
		p.once.Do(func() {
			a.BlockProcessorWhile(func(ctx context.Context) error {
				close(p.entered)
				<-p.release
				return nil
			})
		})
	}
	return nil
}

// A push chain that overflows drops its oldest pending events; the engine heals the durable part
// from the log (gap repair), so no durable event is lost.

// ---- the carts fixture ----------------------------------------------------------------------

type cart struct {
	Items int `json:"items"`
}

type itemAdded struct {
	N int `json:"n"`
}

func item(n int) foldtype.EventInput {
	return foldtype.EventInput{Type: "item", Payload: foldtype.JSON(itemAdded{N: n})}
}

// carts sums the items of a stream and records one effect per item event, by stream. One value
// serves the engines of every stream a pattern covers, so it is safe for concurrent use.
type carts struct {
	foldstream.Base[cart]
	mu      sync.Mutex
	effects map[string][]int64
	waits   map[string]cartWait
	heads   chan struct{} // when set, gets one send per eventless at-head pass
	// onEffect, when set before the first event, is called after each effect is recorded.
	onEffect func()
}

type cartWait struct {
	n    int
	done chan struct{}
}

func newCarts(t testing.TB, slug string) *carts {
	c, err := foldstream.DefineContract(foldstream.ContractConfig[cart]{
		Slug: slug, Version: "1", Consumes: []string{"item"},
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[itemAdded]("item", "an item was added")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &carts{Base: foldstream.NewBase(c), effects: map[string][]int64{}, waits: map[string]cartWait{}}
}

func (p *carts) Reduce(a foldstream.ReduceArgs[cart]) (cart, bool, error) {
	return cart{Items: a.State.Items + a.Payload.(itemAdded).N}, true, nil
}

func (p *carts) ProcessEvent(a *foldstream.ProcessEventArgs[cart]) error {
	if a.Event == nil {
		if p.heads != nil {
			select {
			case p.heads <- struct{}{}:
			default:
			}
		}
		return nil
	}
	if p.onEffect != nil {
		defer p.onEffect()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	path := a.Event.Path
	p.effects[path] = append(p.effects[path], a.Event.Offset)
	if w, ok := p.waits[path]; ok && len(p.effects[path]) >= w.n {
		close(w.done)
		delete(p.waits, path)
	}
	return nil
}

// expect returns a channel closed once n effects ran on path.
func (p *carts) expect(path string, n int) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	done := make(chan struct{})
	if len(p.effects[path]) >= n {
		close(done)
	} else {
		p.waits[path] = cartWait{n, done}
	}
	return done
}

func (p *carts) effectsOn(path string) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.effects[path])
}

func cartState(t testing.TB, raw []byte) cart {
	t.Helper()
	var c cart
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("cart state %s: %v", raw, err)
	}
	return c
}

func cartItems(t testing.TB, h *host.Host, path string) int {
	t.Helper()
	snap, err := h.Snapshot(context.Background(), path, "carts")
	if err != nil {
		t.Fatalf("snapshot of %s: %v", path, err)
	}
	return cartState(t, snap.State).Items
}

// itemOffsets returns the offsets of the "item" events in the stream at path, in order: the
// events a carts processor runs one effect for each.
func itemOffsets(t testing.TB, s *stream.Store, path string) []int64 {
	t.Helper()
	var out []int64
	for after := int64(0); ; {
		page, err := s.Events().Stream(path).Read(context.Background(), after, 1000)
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		for _, e := range page.Events {
			if e.Type == "item" {
				out = append(out, e.Offset)
			}
		}
		if page.AtHead {
			return out
		}
		after = page.ScannedThroughOffset
	}
}

// wantEachOnce fails unless got (the offsets effects ran for, in any order) holds every offset of
// want exactly once and nothing else: a repeat, a miss or a stray all show, wherever they fall.
func wantEachOnce(t testing.TB, what string, got, want []int64) {
	t.Helper()
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	if !slices.Equal(g, w) {
		t.Fatalf("%s: effects ran for offsets %v (sorted %v), want each of %v once", what, got, g, w)
	}
}
