package testsupport

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
)

// EpochCreatedAt is the createdAt the memory stream stamps on every event (Unix time 0).
const EpochCreatedAt = "1970-01-01T00:00:00.000Z"

// MemoryStream is an in-memory [foldtype.Stream] (docs/engine.md#test-support memoryStream).
// Create it with [NewMemoryStream]; it is safe for concurrent use.
//
// Append checks every input with [foldtype.PrepareEventInput], as the durable store does (same
// refusals, same codes; payload and metadata are stored compacted), then idempotency
// (docs/engine.md#idempotency: a hit with the same body is echoed and consumes no offset; a
// conflict refuses the whole call with IDEMPOTENCY_CONFLICT) and offset preconditions
// (docs/engine.md#the-offset-precondition); fresh events get consecutive offsets, createdAt
// [EpochCreatedAt] and the stream's path; durables go to the log. If any offset was assigned, the
// fresh events are pushed fire-and-forget to every registered engine over (previous head, new
// head] — without filtering by consumes, unlike a real subscription — and handed to commit hooks.
// Append itself returns without waiting for pushes.
//
// The stream folds its control events as the store does (docs/store.md#pausing-a-stream): after a
// pause, a call holding any fresh event other than a control event or an ephemeral is refused
// whole with STREAM_PAUSED ("stream paused: <reason>") before any offset is taken; idempotent
// replays are still echoed, and a resume always lands.
//
// Read returns durables after `after`; its proof (ScannedThroughOffset) is the in-memory head, so
// it covers ephemerals — a deliberate difference from the real stream that lets stale-push and
// ephemeral-window rules be tested directly.
type MemoryStream struct {
	path string

	mu          sync.Mutex
	log         []foldtype.Event
	pushed      []foldtype.Event
	maxAssigned int64
	keys        map[string]foldtype.Event
	engines     []foldtype.Runner
	hooks       map[int]func([]foldtype.Event, foldtype.ScannedRange)
	hookSeq     int
	drainables  map[foldtype.Runner]int
	claims      []time.Time
	claimFunc   func(ctx context.Context, at time.Time) error
	reads       int
	paused      bool
	pauseReason string
	changed     chan struct{} // closed and replaced at every commit and landed claim

	track    sync.Mutex
	inflight int
	gen      int64
	idle     chan struct{}
}

var _ foldtype.Stream = (*MemoryStream)(nil)

// NewMemoryStream returns an empty stream at path "/".
func NewMemoryStream() *MemoryStream { return NewMemoryStreamAt("/") }

// NewMemoryStreamAt returns an empty stream at path.
func NewMemoryStreamAt(path string) *MemoryStream {
	return &MemoryStream{
		path: path, keys: map[string]foldtype.Event{},
		hooks: map[int]func([]foldtype.Event, foldtype.ScannedRange){}, drainables: map[foldtype.Runner]int{},
		idle: make(chan struct{}), changed: make(chan struct{}),
	}
}

// Changed returns a channel that is closed at the stream's next commit or landed claim. Take it
// before checking a condition, then wait on it, and no change can slip between the check and the
// wait.
func (m *MemoryStream) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// signalLocked wakes Changed waiters; m.mu must be held.
func (m *MemoryStream) signalLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Paused reports whether the stream is paused, and the reason appends are refused with.
func (m *MemoryStream) Paused() (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused, m.pauseReason
}

// Path returns the stream's path.
func (m *MemoryStream) Path() string { return m.path }

// Append commits events atomically and returns them in input order.
func (m *MemoryStream) Append(ctx context.Context, inputs ...foldtype.EventInput) ([]foldtype.Event, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	inputs = slices.Clone(foldtype.StampOrigin(m.path, inputs))
	for i := range inputs {
		// The store's own check, so the stand-in refuses exactly what production refuses.
		in, _, err := foldtype.PrepareEventInput(i, inputs[i])
		if err != nil {
			return nil, err
		}
		inputs[i] = in
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]foldtype.Event, len(inputs))
	next := m.maxAssigned
	batchKeys := map[string]foldtype.Event{}
	var fresh []foldtype.Event
	for i, in := range inputs {
		keyed := in.IdempotencyKey != "" && !in.Ephemeral
		if keyed {
			ex, ok := batchKeys[in.IdempotencyKey]
			if !ok {
				ex, ok = m.keys[in.IdempotencyKey]
			}
			if ok {
				if !foldtype.SameIdempotentEvent(ex, in) {
					return nil, foldtype.IdempotencyConflictError(in.IdempotencyKey, ex.Offset)
				}
				out[i] = ex
				continue
			}
		}
		if m.paused && !in.Ephemeral {
			if kind, _ := foldtype.ParseControl(in.Type, in.Payload, false); kind == foldtype.ControlNone {
				return nil, foldtype.StreamPausedError(m.pauseReason)
			}
		}
		next++
		if in.Offset != 0 && in.Offset != next {
			return nil, foldtype.OffsetConflictError(in.Offset, next)
		}
		ev := foldtype.Event{
			Type: in.Type, Payload: in.Payload, Metadata: in.Metadata, Source: in.Source,
			IdempotencyKey: in.IdempotencyKey, Ephemeral: in.Ephemeral,
			Offset: next, CreatedAt: EpochCreatedAt, Path: m.path,
		}
		if keyed {
			batchKeys[in.IdempotencyKey] = ev
		}
		out[i] = ev
		fresh = append(fresh, ev)
	}
	if len(fresh) == 0 {
		return out, nil
	}
	r := foldtype.ScannedRange{After: m.maxAssigned, Through: next}
	m.maxAssigned = next
	m.signalLocked()
	for _, ev := range fresh {
		m.pushed = append(m.pushed, ev)
		if !ev.Ephemeral {
			m.log = append(m.log, ev)
			if ev.IdempotencyKey != "" {
				m.keys[ev.IdempotencyKey] = ev
			}
			m.paused, m.pauseReason = foldtype.FoldPause(m.paused, m.pauseReason, ev.Type, ev.Payload, false)
		}
	}
	for _, eng := range m.engines {
		m.push(eng, fresh, r)
	}
	for _, id := range slices.Sorted(mapsKeys(m.hooks)) {
		m.hooks[id](slices.Clone(fresh), r)
	}
	return out, nil
}

func mapsKeys[V any](mp map[int]V) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range mp {
			if !yield(k) {
				return
			}
		}
	}
}

// batchQueuer is a runner that queues a push before it returns (*foldstream.Engine's
// QueueEventBatch), so a fire-and-forget push keeps its place in commit order.
type batchQueuer interface {
	QueueEventBatch(ctx context.Context, events []foldtype.Event, r foldtype.ScannedRange) (wait func(ctx context.Context) error)
}

// push queues a fire-and-forget push in commit order.
func (m *MemoryStream) push(eng foldtype.Runner, events []foldtype.Event, r foldtype.ScannedRange) {
	m.begin()
	events = slices.Clone(events)
	if q, ok := eng.(batchQueuer); ok {
		wait := q.QueueEventBatch(context.Background(), events, r)
		go func() {
			defer m.end()
			_ = wait(context.Background())
		}()
		return
	}
	go func() {
		defer m.end()
		_ = eng.ProcessEventBatch(context.Background(), events, r)
	}()
}

func (m *MemoryStream) begin() {
	m.track.Lock()
	m.inflight++
	m.gen++
	m.track.Unlock()
}

func (m *MemoryStream) end() {
	m.track.Lock()
	m.inflight--
	if m.inflight == 0 {
		close(m.idle)
		m.idle = make(chan struct{})
	}
	m.track.Unlock()
}

// Read returns durable events with offset > after, at most limit (default 500), and the stand-in's
// proof: ScannedThroughOffset is the last row's offset when the page is full, else
// max(after, head); AtHead is true when the page is short or its last row is the newest durable.
// Every call counts toward [MemoryStream.Reads].
func (m *MemoryStream) Read(ctx context.Context, after int64, limit int) (foldtype.ReadPage, error) {
	if limit <= 0 {
		limit = foldstream.EnginePageSize
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	start := sort.Search(len(m.log), func(i int) bool { return m.log[i].Offset > after })
	page := slices.Clone(m.log[start:min(len(m.log), start+limit)])
	if len(page) == 0 {
		page = nil
	}
	full := len(page) == limit
	p := foldtype.ReadPage{Events: page}
	if full {
		last := page[len(page)-1].Offset
		p.ScannedThroughOffset = last
		p.AtHead = last == m.log[len(m.log)-1].Offset
	} else {
		p.ScannedThroughOffset = max(after, m.maxAssigned)
		p.AtHead = true
	}
	return p, nil
}

// Claim records at (the zero time for a release) in [MemoryStream.Claims] once it landed: after
// the claim function set by [MemoryStream.SetClaimFunc], if any, returned. A failing claim
// function fails the claim and records nothing.
func (m *MemoryStream) Claim(ctx context.Context, at time.Time) error {
	m.mu.Lock()
	f := m.claimFunc
	m.mu.Unlock()
	if f != nil {
		if err := f(ctx, at); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.claims = append(m.claims, at)
	m.signalLocked()
	m.mu.Unlock()
	return nil
}

// SetClaimFunc makes every claim call f first (to delay or fail claims in tests).
func (m *MemoryStream) SetClaimFunc(f func(ctx context.Context, at time.Time) error) {
	m.mu.Lock()
	m.claimFunc = f
	m.mu.Unlock()
}

// Register adds an engine to the push list; the returned function removes it.
func (m *MemoryStream) Register(eng foldtype.Runner) (unregister func()) {
	m.mu.Lock()
	m.engines = append(m.engines, eng)
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if i := slices.Index(m.engines, eng); i >= 0 {
			m.engines = slices.Delete(m.engines, i, i+1)
		}
	}
}

// ClearEngines removes every registered engine.
func (m *MemoryStream) ClearEngines() {
	m.mu.Lock()
	m.engines = nil
	m.mu.Unlock()
}

// Engines returns the registered engines.
func (m *MemoryStream) Engines() []foldtype.Runner {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.engines)
}

// OnCommit calls hook synchronously, in commit order, with every commit's fresh events and range
// (after the registered engines were pushed). The returned function removes the hook.
func (m *MemoryStream) OnCommit(hook func(events []foldtype.Event, r foldtype.ScannedRange)) (remove func()) {
	m.mu.Lock()
	m.hookSeq++
	id := m.hookSeq
	m.hooks[id] = hook
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.hooks, id)
		m.mu.Unlock()
	}
}

// Events returns the durable log.
func (m *MemoryStream) Events() []foldtype.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

// PushedEvents returns every committed event, ephemerals included, in offset order.
func (m *MemoryStream) PushedEvents() []foldtype.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.pushed)
}

// EventsOfType returns the committed events (ephemerals included) of type typ.
func (m *MemoryStream) EventsOfType(typ string) []foldtype.Event {
	var out []foldtype.Event
	for _, ev := range m.PushedEvents() {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// Head returns the highest assigned offset (ephemerals included).
func (m *MemoryStream) Head() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxAssigned
}

// Claims returns the landed claims in landing order; the zero time is a release.
func (m *MemoryStream) Claims() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.claims)
}

// Reads returns how many Read calls were made.
func (m *MemoryStream) Reads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

// WaitIdle waits until every fire-and-forget push (to registered engines and by rows) has finished
// and every engine involved has drained (its chain idle, background attempts and live-state deltas
// settled), repeating until nothing new started; or until ctx ends. It replaces fixed
// sleeps. Background work that never ends keeps WaitIdle waiting: pass a ctx with a deadline.
func (m *MemoryStream) WaitIdle(ctx context.Context) error {
	for {
		m.track.Lock()
		n, idle, gen := m.inflight, m.idle, m.gen
		m.track.Unlock()
		if n > 0 {
			select {
			case <-idle:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		m.mu.Lock()
		runners := slices.Clone(m.engines)
		for r := range m.drainables {
			runners = append(runners, r)
		}
		m.mu.Unlock()
		for _, r := range runners {
			if err := r.Drain(ctx); err != nil {
				return err
			}
		}
		m.track.Lock()
		quiet := m.inflight == 0 && m.gen == gen
		m.track.Unlock()
		if quiet {
			return nil
		}
	}
}

// WaitFor also drains eng (an engine that is neither registered nor row-pushed) in WaitIdle.
func (m *MemoryStream) WaitFor(eng foldtype.Runner) (stop func()) {
	m.mu.Lock()
	m.drainables[eng]++
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.drainables[eng]--; m.drainables[eng] <= 0 {
			delete(m.drainables, eng)
		}
		m.mu.Unlock()
	}
}
