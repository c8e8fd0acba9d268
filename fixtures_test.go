package foldstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/testsupport"
)

// fn is a processor made of function fields; nil fields fall back to Base's defaults.
type fn[S any] struct {
	foldstream.Base[S]
	reduce  func(foldstream.ReduceArgs[S]) (S, bool, error)
	process func(*foldstream.ProcessEventArgs[S]) error
	project func(S) (any, error)
}

func (p *fn[S]) Reduce(a foldstream.ReduceArgs[S]) (S, bool, error) {
	if p.reduce == nil {
		return p.Base.Reduce(a)
	}
	return p.reduce(a)
}

func (p *fn[S]) ProcessEvent(a *foldstream.ProcessEventArgs[S]) error {
	if p.process == nil {
		return nil
	}
	return p.process(a)
}

func (p *fn[S]) ProjectLiveState(s S) (any, error) {
	if p.project == nil {
		return p.Base.ProjectLiveState(s)
	}
	return p.project(s)
}

func projectNull[S any](S) (any, error) { return nil, nil }

// rec is a concurrency-safe recording of strings (a trace) or any values.
type rec[T any] struct {
	mu    sync.Mutex
	items []T
}

func (r *rec[T]) add(v T) {
	r.mu.Lock()
	r.items = append(r.items, v)
	r.mu.Unlock()
}

func (r *rec[T]) get() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// quietReporter keeps expected contained failures out of the test log and records their sites.
type siteLog struct{ rec[string] }

func (s *siteLog) Report(_ context.Context, site string, _ error, _ ...slog.Attr) { s.add(site) }

func newEngine[S any](t *testing.T, p foldstream.Processor[S], st foldstream.Stream, cps foldstream.CheckpointStorage, mod ...func(*foldstream.EngineConfig)) *foldstream.Engine[S] {
	t.Helper()
	cfg := foldstream.EngineConfig{Stream: st, Checkpoints: cps, Reporter: &siteLog{}}
	for _, m := range mod {
		m(&cfg)
	}
	e, err := foldstream.NewEngine(p, cfg)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	return e
}

func fed(c *foldstream.EngineConfig) { c.FedByPushes = true }

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func appendT(t *testing.T, mem foldstream.Stream, inputs ...foldstream.EventInput) []foldstream.Event {
	t.Helper()
	evs, err := mem.Append(context.Background(), inputs...)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return evs
}

func ev(typ string) foldstream.EventInput { return foldstream.EventInput{Type: typ} }

func eph(typ string) foldstream.EventInput { return foldstream.EventInput{Type: typ, Ephemeral: true} }

func settle(t *testing.T, mem *testsupport.MemoryStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := mem.WaitIdle(ctx); err != nil {
		t.Fatalf("WaitIdle: %v", err)
	}
}

func drain(t *testing.T, r foldstream.Runner) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %#v, want %#v", what, got, want)
	}
}

func jsonEq(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	if !json.Valid(got) {
		t.Fatalf("%s: got invalid JSON %q", what, got)
	}
	if !rawjson.Equal(got, []byte(want)) {
		t.Errorf("%s: got %s, want %s", what, got, want)
	}
}

func deltas(mem *testsupport.MemoryStream) []foldstream.LiveStateDelta {
	var out []foldstream.LiveStateDelta
	for _, e := range mem.EventsOfType(foldstream.LiveStateChangedType) {
		var d foldstream.LiveStateDelta
		if err := json.Unmarshal(e.Payload, &d); err != nil {
			panic(err)
		}
		out = append(out, d)
	}
	return out
}

func deltasFor(mem *testsupport.MemoryStream, key string) []foldstream.LiveStateDelta {
	var out []foldstream.LiveStateDelta
	for _, d := range deltas(mem) {
		if d.Key == key {
			out = append(out, d)
		}
	}
	return out
}

// ---- Counter ----------------------------------------------------------------------------------

const (
	tickType      = "events.iterate.com/counter/ticked"
	milestoneType = "events.iterate.com/counter/milestone-reached"
)

type counterState struct {
	Ticks int `json:"ticks"`
}

type counter struct {
	foldstream.Base[counterState]
	trace rec[string]
}

func newCounter(t *testing.T) *counter {
	c := must[*foldstream.Contract[counterState]](t)(foldstream.DefineContract(foldstream.ContractConfig[counterState]{
		Slug: "counter", Version: "1.0.0", Description: "counts ticks",
		Consumes: []string{tickType}, Emits: []string{milestoneType},
	}))
	return &counter{Base: foldstream.NewBase(c)}
}

func (c *counter) Reduce(a foldstream.ReduceArgs[counterState]) (counterState, bool, error) {
	if a.Event.Type != tickType {
		return a.State, false, nil
	}
	return counterState{Ticks: a.State.Ticks + 1}, true, nil
}

func (c *counter) ProcessEvent(a *foldstream.ProcessEventArgs[counterState]) error {
	if a.Event == nil {
		c.trace.add(fmt.Sprintf("at-head ticks=%d", a.State.Ticks))
		return nil
	}
	off := a.Event.Offset
	c.trace.add(fmt.Sprintf("start %d", off))
	a.BlockProcessorWhile(func(ctx context.Context) error {
		time.Sleep(5 * time.Millisecond)
		c.trace.add(fmt.Sprintf("blocked-done %d", off))
		return nil
	})
	if ticks := a.State.Ticks; ticks%3 == 0 {
		a.BlockProcessorWhile(func(ctx context.Context) error {
			_, err := a.Append(ctx, foldstream.EventInput{
				Type: milestoneType, Payload: foldstream.JSON(map[string]int{"at": ticks}),
				IdempotencyKey: c.IdempotencyKey(fmt.Sprintf("milestone-%d", ticks), nil),
			})
			return err
		})
	}
	return nil
}

func (c *counter) starts() []string {
	var out []string
	for _, s := range c.trace.get() {
		if len(s) > 6 && s[:6] == "start " {
			out = append(out, s)
		}
	}
	return out
}

// ---- simple {n} / {seen} fixtures -----------------------------------------------------------

type nState struct {
	N int `json:"n"`
}

func nContract(t *testing.T, slug, version string, consumes ...string) *foldstream.Contract[nState] {
	return must[*foldstream.Contract[nState]](t)(foldstream.DefineContract(foldstream.ContractConfig[nState]{
		Slug: slug, Version: version, Consumes: consumes,
	}))
}

func incN(a foldstream.ReduceArgs[nState]) (nState, bool, error) {
	return nState{N: a.State.N + 1}, true, nil
}

type seenState struct {
	Seen []string `json:"seen"`
}

func seenContract(t *testing.T, slug string, consumes ...string) *foldstream.Contract[seenState] {
	return must[*foldstream.Contract[seenState]](t)(foldstream.DefineContract(foldstream.ContractConfig[seenState]{
		Slug: slug, Version: "1", Consumes: consumes,
		Initial: func() (seenState, error) { return seenState{Seen: []string{}}, nil },
	}))
}

func appendSeen(a foldstream.ReduceArgs[seenState]) (seenState, bool, error) {
	return seenState{Seen: append(slices.Clone(a.State.Seen), fmt.Sprintf("%s@%d", a.Event.Type, a.Event.Offset))}, true, nil
}

// ---- Ledger -----------------------------------------------------------------------------------

type ledgerState struct {
	Counted []int64 `json:"counted"`
}

func newLedger(t *testing.T, slow ...int64) *fn[ledgerState] {
	c := must[*foldstream.Contract[ledgerState]](t)(foldstream.DefineContract(foldstream.ContractConfig[ledgerState]{
		Slug: "ledger", Version: "1", Consumes: []string{"counted"},
		Initial: func() (ledgerState, error) { return ledgerState{Counted: []int64{}}, nil },
	}))
	return &fn[ledgerState]{
		Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[ledgerState]) (ledgerState, bool, error) {
			return ledgerState{Counted: append(slices.Clone(a.State.Counted), a.Event.Offset)}, true, nil
		},
		process: func(a *foldstream.ProcessEventArgs[ledgerState]) error {
			if a.Event != nil && slices.Contains(slow, a.Event.Offset) {
				a.BlockProcessorWhile(func(context.Context) error { time.Sleep(20 * time.Millisecond); return nil })
			}
			return nil
		},
	}
}

// ---- CaughtUpProbe and its stub stream --------------------------------------------------------

type stubStream struct {
	mu      sync.Mutex
	read    func(after int64, limit int) (foldstream.ReadPage, error)
	reads   int
	appends []foldstream.EventInput
	claims  []time.Time
}

func (s *stubStream) Append(_ context.Context, events ...foldstream.EventInput) ([]foldstream.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appends = append(s.appends, events...)
	return nil, nil
}

func (s *stubStream) Read(_ context.Context, after int64, limit int) (foldstream.ReadPage, error) {
	s.mu.Lock()
	s.reads++
	f := s.read
	s.mu.Unlock()
	if f == nil {
		return foldstream.ReadPage{AtHead: true}, nil
	}
	return f(after, limit)
}

func (s *stubStream) Claim(_ context.Context, at time.Time) error {
	s.mu.Lock()
	s.claims = append(s.claims, at)
	s.mu.Unlock()
	return nil
}

type probe struct {
	*fn[nState]
	mu        sync.Mutex
	caughtUps int
}

func newProbe(t *testing.T) *probe {
	p := &probe{}
	p.fn = &fn[nState]{Base: foldstream.NewBase(nContract(t, "caughtup-probe", "1", "*")), reduce: incN,
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Delivery.CaughtUp {
				p.mu.Lock()
				p.caughtUps++
				p.mu.Unlock()
			}
			return nil
		}}
	return p
}

func (p *probe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.caughtUps
}

func committed(offset int64, typ string) foldstream.Event {
	return foldstream.Event{Type: typ, Offset: offset, CreatedAt: testsupport.EpochCreatedAt, Path: "/"}
}

// ---- Recorder ---------------------------------------------------------------------------------

type delivery struct {
	Offset   *int64
	CaughtUp bool
}

func (d delivery) String() string {
	if d.Offset == nil {
		return fmt.Sprintf("{null %v}", d.CaughtUp)
	}
	return fmt.Sprintf("{%d %v}", *d.Offset, d.CaughtUp)
}

func newRecorder(t *testing.T, slug string, consumes ...string) (*fn[nState], *rec[string]) {
	r := &rec[string]{}
	return &fn[nState]{Base: foldstream.NewBase(nContract(t, slug, "1", consumes...)), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			d := delivery{CaughtUp: a.Delivery.CaughtUp}
			if a.Event != nil {
				off := a.Event.Offset
				d.Offset = &off
			}
			r.add(d.String())
			return nil
		}}, r
}

// ---- Count / EffectOnly / Versioned -----------------------------------------------------------

type ticksState struct {
	Ticks int `json:"ticks"`
}

func newCount(t *testing.T, version string) (*fn[ticksState], *rec[int64]) {
	c := must[*foldstream.Contract[ticksState]](t)(foldstream.DefineContract(foldstream.ContractConfig[ticksState]{
		Slug: "count", Version: version, Consumes: []string{"tick"},
	}))
	effects := &rec[int64]{}
	return &fn[ticksState]{Base: foldstream.NewBase(c), project: projectNull[ticksState],
		reduce: func(a foldstream.ReduceArgs[ticksState]) (ticksState, bool, error) {
			return ticksState{Ticks: a.State.Ticks + 1}, true, nil
		},
		process: func(a *foldstream.ProcessEventArgs[ticksState]) error {
			if a.Event != nil {
				effects.add(a.Event.Offset)
			}
			return nil
		}}, effects
}

type emptyState struct{}

func newEffectOnly(t *testing.T) (*fn[emptyState], *rec[int64]) {
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "eff", Version: "1", Consumes: []string{"*"},
	}))
	effects := &rec[int64]{}
	return &fn[emptyState]{Base: foldstream.NewBase(c),
		process: func(a *foldstream.ProcessEventArgs[emptyState]) error {
			if a.Event != nil {
				effects.add(a.Event.Offset)
			}
			return nil
		}}, effects
}

func newVersioned(t *testing.T, version string, failOn ...int64) (*fn[nState], *rec[string]) {
	effects := &rec[string]{}
	return &fn[nState]{Base: foldstream.NewBase(nContract(t, "vbump", version, "e")), project: projectNull[nState],
		reduce: func(a foldstream.ReduceArgs[nState]) (nState, bool, error) {
			if slices.Contains(failOn, a.Event.Offset) {
				return a.State, false, fmt.Errorf("v%s cannot reduce offset %d", version, a.Event.Offset)
			}
			return nState{N: a.State.N + 1}, true, nil
		},
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event != nil {
				effects.add(fmt.Sprintf("effect %d", a.Event.Offset))
			}
			return nil
		}}, effects
}
