package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// stalledRenewals is a SQLite driver whose lease renewals can be held back: a renewal asked
// while stalled waits until the stall ends or its caller gives up, as one whose round trip the
// machine's load stretched past the lease.
type stalledRenewals struct {
	*sqlitedriver.Driver
	mu      sync.Mutex
	stalled chan struct{} // nil: renewals answer at once
}

func (d *stalledRenewals) RenewLeases(ctx context.Context, holder string, held []driver.Lease, ttl time.Duration) ([]driver.Lease, error) {
	d.mu.Lock()
	stalled := d.stalled
	d.mu.Unlock()
	if stalled != nil {
		select {
		case <-stalled:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return d.Driver.RenewLeases(ctx, holder, held, ttl)
}

func (d *stalledRenewals) stall() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stalled = make(chan struct{})
}

func (d *stalledRenewals) resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stalled != nil {
		close(d.stalled)
		d.stalled = nil
	}
}

type fxState struct {
	Ticks int `json:"ticks"`
}

// effectful calls an external effect for each "tick" (counted per offset), waits for the test to
// let it go on, then emits one "done" event keyed by the tick; it records what that append
// answered.
type effectful struct {
	foldstream.Base[fxState]
	mu      sync.Mutex
	runs    map[int64]int
	emitErr []error
	started chan int64
	proceed chan struct{}
}

func (p *effectful) Reduce(a foldstream.ReduceArgs[fxState]) (fxState, bool, error) {
	if a.Event.Type != "tick" {
		return a.State, false, nil
	}
	return fxState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *effectful) ProcessEvent(a *foldstream.ProcessEventArgs[fxState]) error {
	if a.Event == nil || a.Event.Type != "tick" {
		return nil
	}
	p.mu.Lock()
	p.runs[a.Event.Offset]++
	p.mu.Unlock()
	p.started <- a.Event.Offset
	<-p.proceed
	_, err := a.Append(context.Background(), foldtype.EventInput{Type: "done", Payload: foldtype.JSON(a.Event.Offset),
		IdempotencyKey: p.IdempotencyKey("done", a.Event)})
	p.mu.Lock()
	p.emitErr = append(p.emitErr, err)
	p.mu.Unlock()
	return err
}

func (p *effectful) runsOf(off int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[off]
}

func (p *effectful) emitErrors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.emitErr...)
}

// TestAnEffectThatRanIsRecordedWhenItsLeaseCannotBeConfirmedInTime: a tick's effect runs while
// the node's renewals stall past the lease's local deadline (a loaded machine) and nobody takes
// the lease over. The event the effect emits and the checkpoint after it are fenced in the
// database, so they commit without waiting for a renewal: the effect runs once, and the engine
// goes on once renewals answer again. Before, the emit waited for a confirmation that did not
// come, the node gave its engine up, took the lease again under a new generation and ran the
// effect a second time. When another holder did take the lease over meanwhile, the emit is
// refused with LEASE_LOST and writes nothing.
func TestAnEffectThatRanIsRecordedWhenItsLeaseCannotBeConfirmedInTime(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	s, h, drv, p, letGo := effectfulHost(t, ttl)
	sd := drv.Driver
	defer letGo() // before the host's shutdown, which waits for a ProcessEvent in progress
	defer drv.resume()
	for _, path := range []string{"/s/kept", "/s/taken"} {
		if _, err := Register(ctx, h, path, foldstream.Processor[fxState](p)); err != nil {
			t.Fatal(err)
		}
	}
	tick := func(path string) int64 {
		t.Helper()
		evs, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick", Payload: foldtype.JSON(1)})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Offset
	}
	checkpointAt := func(path string) int64 {
		t.Helper()
		cps, err := s.Events().Checkpoints(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		cp, _, err := cps.ReadCheckpoint(ctx, "fx")
		if err != nil {
			t.Fatal(err)
		}
		return cp.ReducedThroughOffset
	}

	// The lease stays this node's: the effect's emit and checkpoint commit unconfirmed.
	off := tick("/s/kept")
	if got := <-p.started; got != off {
		t.Fatalf("effect started for offset %d, want %d", got, off)
	}
	kept := procKey{"/s/kept", "fx"}
	l, ok := h.leases.heldLease(kept)
	if !ok {
		t.Fatal("the engine runs without its lease")
	}
	drv.stall()
	pastDeadline(t, h.leases, kept, l.Generation) // nobody takes the lease
	p.proceed <- struct{}{}
	emitted(t, p, 1)
	if errs := p.emitErrors(); errs[0] != nil {
		t.Fatalf("the emit under an unconfirmed lease nobody took answered %v, want it committed", errs)
	}
	if !wait.For(5*ttl, func() bool { return checkpointAt("/s/kept") >= off }) {
		t.Fatalf("checkpoint at %d after the effect of %d ran, want it recorded without a renewal", checkpointAt("/s/kept"), off)
	}
	drv.resume()
	// Renewals answer again: the engine goes on under the same lease (had it been given up, a
	// new engine under a new generation would run the effect again).
	if !wait.For(10*ttl, func() bool { _, ok, _ := h.leases.workable(kept, l.Generation); return ok }) {
		t.Fatal("the lease was not confirmed once renewals answered again")
	}
	if now, ok := h.leases.heldLease(kept); !ok || now.Generation != l.Generation {
		t.Fatalf("lease %+v after the stall, want generation %d still held", now, l.Generation)
	}
	if n := p.runsOf(off); n != 1 {
		t.Fatalf("the effect of offset %d ran %d times, want once", off, n)
	}

	// Another holder takes the lease over while this node cannot renew: the emit is refused.
	off = tick("/s/taken")
	if got := <-p.started; got != off {
		t.Fatalf("effect started for offset %d, want %d", got, off)
	}
	taken := procKey{"/s/taken", "fx"}
	l, ok = h.leases.heldLease(taken)
	if !ok {
		t.Fatal("the engine runs without its lease")
	}
	drv.stall()
	pastDeadline(t, h.leases, taken, l.Generation)
	key := leaseKey(taken)
	// The other holder takes it once it ran out in the database too.
	if !wait.For(10*ttl, func() bool {
		_, ok, err := sd.AcquireLease(ctx, key, "other", "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}) {
		t.Fatal("the other holder could not take the lease over")
	}
	p.proceed <- struct{}{}
	emitted(t, p, 2)
	errs := p.emitErrors()
	if !errors.Is(errs[1], foldtype.ErrLeaseLost) {
		t.Fatalf("the emit after a takeover answered %v, want LEASE_LOST", errs)
	}
	page, err := s.Events().Stream("/s/taken").Read(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range page.Events {
		if ev.Type == "done" {
			t.Fatalf("the refused emit was written: %+v", ev)
		}
	}
	if at := checkpointAt("/s/taken"); at >= off {
		t.Fatalf("checkpoint at %d after the lease was taken over, want it short of %d", at, off)
	}
	drv.resume()
	letGo() // the ticks' effects may run again now, for nothing waits
}

// effectfulHost opens a host with lease ttl on a SQLite store whose renewals the test can stall,
// and an effectful processor (not registered) whose ProcessEvents wait for the test; letGo lets
// every one of them go on from then on.
func effectfulHost(t *testing.T, ttl time.Duration) (*stream.Store, *Host, *stalledRenewals, *effectful, func()) {
	t.Helper()
	var drv *stalledRenewals
	s, h := sqliteHost(t, nil, Config{LeaseTTL: ttl, NodeID: "me"}, func(d *sqlitedriver.Driver) driver.Driver {
		drv = &stalledRenewals{Driver: d}
		return drv
	})
	c, err := foldstream.DefineContract(foldstream.ContractConfig[fxState]{Slug: "fx", Version: "1",
		Consumes: []string{"tick"}, Emits: []string{"done"}})
	if err != nil {
		t.Fatal(err)
	}
	p := &effectful{Base: foldstream.NewBase(c), runs: map[int64]int{}, started: make(chan int64, 8), proceed: make(chan struct{})}
	var release sync.Once
	return s, h, drv, p, func() { release.Do(func() { close(p.proceed) }) }
}

// pastDeadline waits until this node's lease of key at generation is past its local deadline
// (less the margin): no work may start under it unconfirmed.
func pastDeadline(t *testing.T, ls *leaseSet, key procKey, generation int64) {
	t.Helper()
	if !wait.For(10*ls.ttl, func() bool { held, ok, _ := ls.workable(key, generation); return held && !ok }) {
		t.Fatalf("the lease of %v never passed its local deadline while renewals stalled", key)
	}
}

// emitted waits until the processor's emits answered n times.
func emitted(t *testing.T, p *effectful, n int) {
	t.Helper()
	if !wait.For(time.Minute, func() bool { return len(p.emitErrors()) >= n }) {
		t.Fatalf("the emit did not answer (%d answers, want %d)", len(p.emitErrors()), n)
	}
}

// sqliteHost opens a host on a store in a fresh SQLite file (the store's clock, when set), its
// driver wrapped by wrap when set, both closed at the test's end, with logs discarded.
func sqliteHost(t *testing.T, clock foldtype.Clock, cfg Config, wrap func(*sqlitedriver.Driver) driver.Driver) (*stream.Store, *Host) {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sd, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: filepath.Join(t.TempDir(), "host.db")})
	if err != nil {
		t.Fatal(err)
	}
	var d driver.Driver = sd
	if wrap != nil {
		d = wrap(sd)
	}
	s, err := stream.OpenDriver(ctx, d, stream.Config{Logger: quiet, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	cfg.Logger = quiet
	h, err := New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Shutdown(context.Background()) })
	return s, h
}

// TestAUnitInFlightWhenItsLeaseCannotBeConfirmedFinishesAndIsRecorded: the node's renewals stall
// past the lease (a loaded machine) while a tick's effect is in flight, and the renewal that
// fails gives the lease up as unconfirmed. Nobody took it over, so the unit finishes: its emit
// and checkpoint commit through the database's fence, the engine closes and releases the lease,
// and the next engine, once renewals answer again, starts after the tick — its effect ran once.
// Before, the failed renewal stopped the engine at once, the emit was refused, the checkpoint
// never written, and the next engine ran the tick's effect again.
func TestAUnitInFlightWhenItsLeaseCannotBeConfirmedFinishesAndIsRecorded(t *testing.T) {
	const ttl = time.Second
	ctx := context.Background()
	s, h, drv, p, letGo := effectfulHost(t, ttl)
	defer letGo()
	defer drv.resume()
	if _, err := Register(ctx, h, "/s/slow", foldstream.Processor[fxState](p)); err != nil {
		t.Fatal(err)
	}
	tick := func() int64 {
		t.Helper()
		evs, err := s.Events().Stream("/s/slow").Append(ctx, foldtype.EventInput{Type: "tick", Payload: foldtype.JSON(1)})
		if err != nil {
			t.Fatal(err)
		}
		return evs[0].Offset
	}
	off := tick()
	if got := <-p.started; got != off {
		t.Fatalf("effect started for offset %d, want %d", got, off)
	}
	key := procKey{"/s/slow", "fx"}
	drv.stall()
	// A renewal fails past the lease's local deadline: the node gives the engine up.
	if !wait.For(20*ttl, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		sl := h.slots[key]
		return sl == nil || sl.state != slotOpen
	}) {
		t.Fatal("the engine stayed open under a lease renewals could not confirm")
	}
	p.proceed <- struct{}{}
	emitted(t, p, 1)
	if errs := p.emitErrors(); errs[0] != nil {
		t.Fatalf("the emit of the unit in flight answered %v, want it committed under the fence", errs)
	}
	cps, err := s.Events().Checkpoints(ctx, "/s/slow")
	if err != nil {
		t.Fatal(err)
	}
	if !wait.For(10*ttl, func() bool {
		cp, _, err := cps.ReadCheckpoint(ctx, "fx")
		return err == nil && cp.ReducedThroughOffset >= off
	}) {
		t.Fatalf("no checkpoint through %d after its effect ran", off)
	}
	drv.resume()
	next := tick()
	if got := <-p.started; got != next {
		t.Fatalf("the next engine ran the effect of offset %d, want %d (the tick whose effect ran is %d)", got, next, off)
	}
	letGo()
	if n := p.runsOf(off); n != 1 {
		t.Fatalf("the effect of offset %d ran %d times, want once", off, n)
	}
}
