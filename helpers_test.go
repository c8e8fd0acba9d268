// Helpers and fixture processors shared by the package's tests.
package foldstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/testsupport"
)

// attempts is the Attempts fixture: each event starts a background attempt that ends only when the
// test ends it; the eventless pass traces "at-head".
type attempts struct {
	*fn[emptyState]
	trace rec[string]
	mu    sync.Mutex
	ends  map[int64]chan struct{}
}

func newAttempts(t *testing.T) *attempts {
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "attempts", Version: "1", Consumes: []string{"e"}}))
	a := &attempts{ends: map[int64]chan struct{}{}}
	a.fn = &fn[emptyState]{Base: foldstream.NewBase(c), process: func(args *foldstream.ProcessEventArgs[emptyState]) error {
		if args.Event == nil {
			a.trace.add("at-head")
			return nil
		}
		off := args.Event.Offset
		end := a.end(off)
		started := make(chan struct{})
		args.RunInBackground(func(context.Context) error {
			a.trace.add(fmt.Sprintf("attempt %d started", off))
			close(started)
			<-end
			return nil
		})
		<-started // keep the fixture's trace in event order
		return nil
	}}
	return a
}

func (a *attempts) end(off int64) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ends[off] == nil {
		a.ends[off] = make(chan struct{})
	}
	return a.ends[off]
}

// waitUntil waits until cond holds, re-checking it whenever one of the watched sources changes
// (an engine's or a stream's Changed, a recording's changed): no polling, no sleeps.
func waitUntil(t *testing.T, what string, cond func() bool, watch ...func() <-chan struct{}) {
	t.Helper()
	ctx := ctxFor(t)
	for {
		chans := make([]<-chan struct{}, len(watch))
		for i, w := range watch {
			chans[i] = w()
		}
		if cond() {
			return
		}
		cases := make([]reflect.SelectCase, 0, len(chans)+1)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		for _, c := range chans {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func setupAttempts(t *testing.T) (*attempts, *testsupport.MemoryStream, *foldstream.Engine[emptyState], *rec[string]) {
	a := newAttempts(t)
	mem := testsupport.NewMemoryStream()
	claimTrace := &rec[string]{}
	mem.SetClaimFunc(func(_ context.Context, at time.Time) error {
		if at.IsZero() {
			claimTrace.add("released")
		} else {
			claimTrace.add(fmt.Sprintf("claimed %d", at.Sub(testsupport.T).Milliseconds()))
		}
		return nil
	})
	eng := newEngine[emptyState](t, a, mem, testsupport.MemoryCheckpoints(), func(c *foldstream.EngineConfig) {
		c.Clock = testsupport.NewFakeClock()
	})
	mem.Register(eng)
	return a, mem, eng, claimTrace
}

func setupCounter(t *testing.T) (*counter, *testsupport.MemoryStream, *testsupport.Checkpoints, *foldstream.Engine[counterState]) {
	t.Helper()
	c := newCounter(t)
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[counterState](t, c, mem, cps)
	return c, mem, cps, eng
}

func newEph(t *testing.T, slug string, consumes ...string) *fn[seenState] {
	return &fn[seenState]{Base: foldstream.NewBase(seenContract(t, slug, consumes...)), reduce: appendSeen, project: projectNull[seenState]}
}

type tallyState struct {
	Count  int    `json:"count"`
	Secret string `json:"secret"`
}

func newTally(t *testing.T) *fn[tallyState] {
	c := must[*foldstream.Contract[tallyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[tallyState]{
		Slug: "tally", Version: "1", Consumes: []string{"tick"},
		Initial: func() (tallyState, error) { return tallyState{Secret: "hidden"}, nil }}))
	return &fn[tallyState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[tallyState]) (tallyState, bool, error) {
			s := a.State
			s.Count++
			return s, true, nil
		},
		project: func(s tallyState) (any, error) { return map[string]int{"count": s.Count}, nil }}
}

func setupTally(t *testing.T) (*testsupport.MemoryStream, *foldstream.Engine[tallyState]) {
	mem := testsupport.NewMemoryStream()
	eng := newEngine[tallyState](t, newTally(t), mem, testsupport.MemoryCheckpoints())
	mem.Register(eng)
	return mem, eng
}

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
	ch    chan struct{} // closed and replaced at every add
}

func (r *rec[T]) add(v T) {
	r.mu.Lock()
	r.items = append(r.items, v)
	if r.ch != nil {
		close(r.ch)
	}
	r.ch = make(chan struct{})
	r.mu.Unlock()
}

// changed returns a channel closed at the next add.
func (r *rec[T]) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
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

func drain(t *testing.T, r foldtype.Runner) {
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

func deltas(mem *testsupport.MemoryStream) []foldtype.LiveStateDelta {
	var out []foldtype.LiveStateDelta
	for _, e := range mem.EventsOfType(foldtype.LiveStateChangedType) {
		var d foldtype.LiveStateDelta
		if err := json.Unmarshal(e.Payload, &d); err != nil {
			panic(err)
		}
		out = append(out, d)
	}
	return out
}

func deltasFor(mem *testsupport.MemoryStream, key string) []foldtype.LiveStateDelta {
	var out []foldtype.LiveStateDelta
	for _, d := range deltas(mem) {
		if d.Key == key {
			out = append(out, d)
		}
	}
	return out
}

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

// recSink records the delta payloads appended to it; hold makes each append wait for a release.
type recSink struct {
	mu       sync.Mutex
	issued   []foldtype.LiveStateDelta
	hold     bool
	release  chan struct{}
	fail     error
	panics   bool
	inflight int  // appends issued and not yet returned
	overlap  bool // an append was issued while another was in flight
	notify   chan struct{}
}

func (s *recSink) Append(ctx context.Context, evs ...foldstream.EventInput) ([]foldstream.Event, error) {
	for _, e := range evs {
		var d foldtype.LiveStateDelta
		if err := json.Unmarshal(e.Payload, &d); err != nil {
			return nil, err
		}
		if e.Type != foldtype.LiveStateChangedType || !e.Ephemeral {
			return nil, errors.New("not an ephemeral delta")
		}
		s.mu.Lock()
		s.issued = append(s.issued, d)
		s.mu.Unlock()
	}
	s.mu.Lock()
	if s.inflight > 0 {
		s.overlap = true
	}
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if s.notify != nil {
		s.notify <- struct{}{}
	}
	if s.panics {
		panic("sink exploded")
	}
	if s.hold {
		<-s.release
	}
	return nil, s.fail
}

func (s *recSink) frames() []foldtype.LiveStateDelta {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]foldtype.LiveStateDelta(nil), s.issued...)
}

func newLive(sink foldstream.LiveStateSink, initial any) (*foldstream.LiveState, int64) {
	l := foldstream.NewLiveState(sink, "k", initial, foldstream.LiveStateConfig{Clock: testsupport.NewFakeClock(), Reporter: &siteLog{}})
	return l, l.Snapshot().Rev
}

func waitLive(t *testing.T, l *foldstream.LiveState) {
	t.Helper()
	mustDo(t, l.Wait(ctxFor(t)))
}

func pushT(t *testing.T, r foldtype.Runner, evs []foldstream.Event, after, through int64) {
	t.Helper()
	mustDo(t, r.ProcessEventBatch(ctxFor(t), evs, foldstream.ScannedRange{After: after, Through: through}))
}

// ephWindow consumes tick and chunk; the state counts them; seen records what ProcessEvent saw.
func newEphWindow(t *testing.T, failFirst bool) (*fn[nState], *rec[string]) {
	seen := &rec[string]{}
	var failed atomic.Bool
	return &fn[nState]{Base: foldstream.NewBase(nContract(t, "eph-window", "1", "tick", "chunk")), reduce: incN, project: projectNull[nState],
		process: func(a *foldstream.ProcessEventArgs[nState]) error {
			if a.Event == nil {
				return nil
			}
			seen.add(fmt.Sprintf("%s@%d", a.Event.Type, a.Event.Offset))
			if failFirst {
				a.BlockProcessorWhile(func(context.Context) error {
					if failed.CompareAndSwap(false, true) {
						return errors.New("first attempt fails")
					}
					return nil
				})
			}
			return nil
		}}, seen
}

type tally2State struct {
	Count  int    `json:"count"`
	Secret string `json:"secret"`
}

func tally2Contract(t *testing.T, version string) *foldstream.Contract[tally2State] {
	return must[*foldstream.Contract[tally2State]](t)(foldstream.DefineContract(foldstream.ContractConfig[tally2State]{
		Slug: "tally", Version: version, Consumes: []string{"tick"},
		Initial: func() (tally2State, error) { return tally2State{Secret: "hidden"}, nil }}))
}

func newTally2(t *testing.T, version string, step int) *fn[tally2State] {
	return &fn[tally2State]{Base: foldstream.NewBase(tally2Contract(t, version)),
		reduce: func(a foldstream.ReduceArgs[tally2State]) (tally2State, bool, error) {
			s := a.State
			s.Count += step
			return s, true, nil
		},
		project: func(s tally2State) (any, error) { return map[string]int{"count": s.Count}, nil }}
}

type explosiveState struct{}

func (explosiveState) MarshalJSON() ([]byte, error) { panic("state marshal exploded") }
