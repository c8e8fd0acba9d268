package feeds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// Subscriptions push each commit to subscribers (docs/store.md#subscriptions). The rules, kept in this file:
//
//   - A subscriber sees only the events it consumes ([foldtype.ConsumesEvent]); a commit with none
//     is skipped, and its span rides inside the next delivered range, so the ranges a subscriber
//     receives chain contiguously: each After equals the previous Through (the first After is the
//     first delivered commit's after).
//   - The writer never waits for a subscriber: its after-commit hook only enqueues. Each
//     subscriber has one delivery goroutine, so its pushes never overlap and arrive in commit order.
//   - Pushes queued while one is in flight are folded into one (events concatenated, range widened).
//   - The pending queue is bounded ([SubscribeOptions.MaxPendingEvents]). On overflow the oldest
//     pending events are dropped and the pending range's After moves up to the last dropped offset:
//     the receiver sees a gap (After above its cursor) and heals the durable part from the log
//     (the engine's gap repair, docs/engine.md#pushes-and-gap-repair); dropped ephemerals are gone, as ephemerals may be.

// DefaultMaxPendingEvents is the default bound on events queued for one subscriber.
const DefaultMaxPendingEvents = 10000

// DeliverFunc receives one push: the consumed events of one or more commits and the range they
// prove contiguous. An error is logged; the next push still chains from this range, so a receiver
// that failed must heal from the log (an engine does: it retries from its cursor). A panic is
// recovered, logged with its stack and handled exactly like a returned error: it never takes the
// process down.
type DeliverFunc func(ctx context.Context, events []foldtype.Event, r foldtype.ScannedRange) error

// SubscribeOptions configures a subscription.
type SubscribeOptions struct {
	// Consumes filters the pushed events with [foldtype.ConsumesEvent]: nil means every durable
	// event, "*" every durable event, a type names it (the only way to receive ephemerals); an
	// empty non-nil list consumes nothing.
	Consumes []string
	// MaxPendingEvents bounds the events queued while a delivery is in flight. Defaults to
	// DefaultMaxPendingEvents.
	MaxPendingEvents int
	// Name labels the subscription in logs.
	Name string
	// Logger receives the subscription's warnings (overflow, failed pushes). Defaults to the
	// store's logger. A host passes one that folds repeats into a count per interval.
	Logger *slog.Logger
}

// Subscription is one subscriber's push chain on one stream path.
type Subscription struct {
	h        *Hub
	path     string
	opts     SubscribeOptions
	consumes []string
	deliver  DeliverFunc
	ctx      context.Context
	cancel   context.CancelFunc

	seen atomic.Int64 // through of the last commit offered, consumed or not
	// base is the after of the first commit offered (-1 before any): the subscription knows
	// nothing of the offsets up to it, which were committed before it began.
	base atomic.Int64
	// seenDurable is seen over the commits holding a durable event only.
	seenDurable atomic.Int64

	mu          sync.Mutex
	lastThrough int64 // through of the last enqueued push; -1 before the first
	// consumedThrough is the through of the last commit offered that held an event this
	// subscriber consumes, enqueued or not (a closed subscription drops it).
	consumedThrough int64
	pending         *pendingPush
	enqueued        uint64 // pushes enqueued (folded ones count once each)
	settled         uint64 // pushes settled
	settledCh       chan struct{}
	dropped         int64
	closed          bool
	endErr          error // why the subscription ended: ErrSubscriptionClosed or a STREAM_DELETED error
	kick            chan struct{}
	done            chan struct{}
}

type pendingPush struct {
	r      foldtype.ScannedRange
	events []foldtype.Event
}

// Subscribe starts pushing every later commit on the stream at path to deliver, filtered by
// opts.Consumes. The stream need not exist yet. Close the subscription to stop it; closing the
// store stops every subscription.
func (h *Hub) Subscribe(path string, deliver DeliverFunc, opts SubscribeOptions) (*Subscription, error) {
	if h.k.Closed() {
		return nil, kernel.ErrStoreClosed
	}
	if deliver == nil {
		return nil, errors.New("subscribe: deliver is nil")
	}
	if opts.MaxPendingEvents <= 0 {
		opts.MaxPendingEvents = DefaultMaxPendingEvents
	}
	if opts.Logger == nil {
		opts.Logger = h.log
	}
	if !h.exclusive {
		if _, err := h.ensureFeed(context.Background(), path); err != nil {
			return nil, err
		}
	}
	ctx, cancel := h.k.UntilClose() // a closing store cancels in-flight deliveries
	sub := &Subscription{
		h: h, path: path, opts: opts, deliver: deliver, ctx: ctx, cancel: cancel,
		lastThrough: -1, settledCh: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{}),
	}
	sub.base.Store(-1)
	if opts.Consumes != nil {
		sub.consumes = slices.Clone(opts.Consumes)
	}
	h.subsMu.Lock()
	if h.closing {
		h.subsMu.Unlock()
		cancel()
		return nil, kernel.ErrStoreClosed
	}
	h.subs[path] = append(h.subs[path], sub)
	h.k.Background().Add(1) // under subsMu before closing is set, so Close waits for this goroutine
	h.subsMu.Unlock()
	go sub.run()
	return sub, nil
}

// Listening reports whether anyone in this process subscribes to the stream at path, so a
// protocol append decodes its messages into events only then (catalog.Hooks.Listening).
func (h *Hub) Listening(path string) bool {
	h.subsMu.RLock()
	defer h.subsMu.RUnlock()
	return len(h.subs[path]) > 0
}

// Publish hands a landed commit's events over (after, through] to every subscriber of path
// (docs/store.md#subscriptions). Every write path
// that commits events or event-shaped messages calls it from an AfterCommit hook. It runs on the
// writer goroutine and never blocks.
func (h *Hub) Publish(path string, events []foldtype.Event, after, through int64) {
	if !h.exclusive {
		h.publishShared(path, events, after, through)
	} else {
		h.publishLocal(path, events, after, through)
	}
	// Watchers hear of every local commit, whether or not this node has a listener on the path.
	if slices.ContainsFunc(events, func(ev foldtype.Event) bool { return !ev.Ephemeral }) {
		h.k.Landed().Notify(path)
	}
}

// publishLocal hands events over (after, through] to subscribers, as they are.
func (h *Hub) publishLocal(path string, events []foldtype.Event, after, through int64) {
	h.subsMu.RLock()
	subs := h.subs[path]
	h.subsMu.RUnlock()
	for _, sub := range subs {
		sub.offer(events, after, through)
	}
}

func (sub *Subscription) offer(events []foldtype.Event, after, through int64) {
	// Before the commit is seen: a SeenRange that finds it seen finds the base set too.
	if sub.base.Load() < 0 {
		sub.base.CompareAndSwap(-1, after)
	}
	var consumed []foldtype.Event
	durable := false
	for _, ev := range events {
		if foldtype.ConsumesEvent(sub.consumes, ev) {
			consumed = append(consumed, ev)
		}
		durable = durable || !ev.Ephemeral
	}
	if len(consumed) == 0 {
		sub.see(through, durable)
		return // the span rides inside the next delivered range
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	// Seen only once its push is queued: a reader that takes SeenThrough and then WaitDelivered
	// finds every consumed event up to it delivered.
	defer sub.see(through, durable)
	sub.consumedThrough = max(sub.consumedThrough, through)
	if sub.closed {
		return
	}
	from := sub.lastThrough
	if from < 0 {
		from = after
	}
	if sub.pending == nil {
		sub.pending = &pendingPush{r: foldtype.ScannedRange{After: from, Through: through}, events: consumed}
	} else {
		sub.pending.events = append(sub.pending.events, consumed...)
		sub.pending.r.Through = through
	}
	sub.lastThrough = through
	sub.enqueued++
	if over := len(sub.pending.events) - sub.opts.MaxPendingEvents; over > 0 {
		sub.pending.r.After = max(sub.pending.r.After, sub.pending.events[over-1].Offset)
		sub.pending.events = slices.Clone(sub.pending.events[over:])
		sub.dropped += int64(over)
		sub.opts.Logger.Warn("stream subscription overflowed; dropped the oldest pending events",
			"path", sub.path, "subscription", sub.opts.Name, "dropped", over)
	}
	select {
	case sub.kick <- struct{}{}:
	default:
	}
}

func (sub *Subscription) run() {
	defer sub.h.k.Background().Done()
	defer close(sub.done)
	for {
		select {
		case <-sub.kick:
		case <-sub.ctx.Done():
			return
		case <-sub.h.k.Stopping():
			sub.close()
			return
		}
		sub.mu.Lock()
		p := sub.pending
		sub.pending = nil
		n := sub.enqueued
		sub.mu.Unlock()
		if p != nil {
			if err := sub.deliverSafely(p); err != nil && sub.ctx.Err() == nil {
				sub.opts.Logger.Warn("stream subscription push failed", "path", sub.path, "subscription", sub.opts.Name,
					"after", p.r.After, "through", p.r.Through, "err", err)
			}
		}
		sub.mu.Lock()
		if n > sub.settled {
			sub.settled = n
			close(sub.settledCh)
			sub.settledCh = make(chan struct{})
		}
		sub.mu.Unlock()
	}
}

// deliverSafely runs one delivery, turning a panic in the DeliverFunc into an error (logged with
// its stack): the push settles, the subscription keeps running and the next push chains on, as
// after any failed delivery — the receiver heals the missed range from the log.
func (sub *Subscription) deliverSafely(p *pendingPush) (err error) {
	defer func() {
		if v := recover(); v != nil {
			sub.h.log.Error("stream subscription delivery panicked", "path", sub.path, "subscription", sub.opts.Name,
				"after", p.r.After, "through", p.r.Through, "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("stream subscription delivery panicked: %v", v)
		}
	}()
	return sub.deliver(sub.ctx, p.events, p.r)
}

// WaitDelivered waits until every push enqueued for this subscriber before the call has settled
// (its delivery returned). Because an append's pushes are enqueued before the append returns, a
// caller that waits here after its append reads its own write from the subscriber
// (read-your-writes; docs/store.md#subscriptions). Do not call it from inside the subscriber's own
// delivery. On a subscription whose stream was deleted it returns that STREAM_DELETED error.
func (sub *Subscription) WaitDelivered(ctx context.Context) error {
	sub.mu.Lock()
	if sub.closed && sub.endErr != ErrSubscriptionClosed {
		// Its stream was deleted: nothing owed will ever be delivered.
		err := sub.endErr
		sub.mu.Unlock()
		return err
	}
	target := sub.enqueued
	for sub.settled < target {
		if sub.closed {
			err := sub.endErr
			sub.mu.Unlock()
			return err
		}
		ch := sub.settledCh
		sub.mu.Unlock()
		select {
		case <-ch:
		case <-sub.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		sub.mu.Lock()
	}
	sub.mu.Unlock()
	return nil
}

// SeenThrough returns the offset through which the subscription has seen the stream's commits,
// whether or not it consumed them: every append that returned before the call is covered, and the
// push of every consumed event up to it is queued. After a WaitDelivered that began after
// SeenThrough returned n, every consumed event up to n was delivered, so a subscriber whose cursor
// is below n may move it to n without reading the log (the default host does, for read-your-writes
// by offset).
func (sub *Subscription) SeenThrough() int64 { return sub.seen.Load() }

// SeenRange returns SeenThrough as Through and, as After, the through of the last commit seen
// that held an event the subscription consumes, or the offset the subscription began at when that
// is higher (0 before any commit): the commits in (After, Through] hold none. A subscriber whose
// cursor is below After did not process a consumed event it was pushed (its delivery failed, or
// was skipped), or has not read the events committed before the subscription began (its opening
// catch-up failed), so it must read the log up to After before it moves its cursor to Through.
func (sub *Subscription) SeenRange() foldtype.ScannedRange {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	// A consumed commit raises both under mu, and commits are offered in order: any consumed
	// commit up to the seen offset read here is counted in consumedThrough. The base is set
	// before the first commit is seen, so it is read after the seen offset.
	through := sub.seen.Load()
	after := sub.consumedThrough
	if through > 0 {
		after = max(after, sub.base.Load())
	}
	return foldtype.ScannedRange{After: after, Through: through}
}

// SeenDurableThrough is SeenThrough over the commits that hold a durable event: a commit of
// ephemerals only (a live-state delta) does not raise it. A subscriber whose durable cursor
// reached it has processed every durable event the subscription saw (after a WaitDelivered, as
// for SeenThrough).
func (sub *Subscription) SeenDurableThrough() int64 { return sub.seenDurable.Load() }

// see raises SeenThrough to through, and SeenDurableThrough with it when the commit held a
// durable event.
func (sub *Subscription) see(through int64, durable bool) {
	raise(&sub.seen, through)
	if durable {
		raise(&sub.seenDurable, through)
	}
}

// raise raises v to through.
func raise(v *atomic.Int64, through int64) {
	for {
		old := v.Load()
		if through <= old || v.CompareAndSwap(old, through) {
			return
		}
	}
}

// Dropped returns how many events overflowed the pending bound so far.
func (sub *Subscription) Dropped() int64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.dropped
}

// Path returns the stream path the subscription listens to.
func (sub *Subscription) Path() string { return sub.path }

// Done returns a channel closed once the subscription has ended (closed, its store closed, or its
// stream deleted) and its delivery goroutine returned; Err then says why.
func (sub *Subscription) Done() <-chan struct{} { return sub.done }

// Err returns nil while the subscription runs, and why it ended after: an error with code
// STREAM_DELETED when its stream was deleted (match with errors.Is(err,
// foldtype.ErrStreamDeleted); resubscribe to follow a stream created at the path again), or
// ErrSubscriptionClosed when it or its store was closed.
func (sub *Subscription) Err() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.endErr
}

// EndSubscriptions ends every subscription on path with err: pending pushes are dropped and an
// in-flight delivery's context is cancelled. It never blocks, so the writer's after-commit hooks
// may call it.
func (h *Hub) EndSubscriptions(path string, err error) {
	h.subsMu.RLock()
	subs := slices.Clone(h.subs[path])
	h.subsMu.RUnlock()
	for _, sub := range subs {
		sub.end(err)
		sub.cancel()
	}
}

// ErrSubscriptionClosed is returned by WaitDelivered on a closed subscription.
var ErrSubscriptionClosed = &foldtype.Error{Code: foldtype.CodeClosed, Message: "stream subscription is closed"}

// Close stops intake, drops any pending push, cancels the context of an in-flight delivery and
// waits for it to return. Do not call it from inside the subscriber's own delivery. Use Drain to
// deliver what is pending first.
func (sub *Subscription) Close() {
	sub.close()
	sub.cancel()
	<-sub.done
}

// Drain waits until every enqueued push settled, then closes the subscription. If ctx ends first
// it closes anyway and returns ctx's error.
func (sub *Subscription) Drain(ctx context.Context) error {
	err := sub.WaitDelivered(ctx)
	if err != nil && err == sub.Err() {
		err = nil
	}
	sub.Close()
	return err
}

func (sub *Subscription) close() { sub.end(ErrSubscriptionClosed) }

// end stops intake and drops pending pushes, recording err as the reason (the first reason
// wins).
func (sub *Subscription) end(err error) {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return
	}
	sub.closed = true
	sub.endErr = err
	sub.pending = nil
	sub.mu.Unlock()
	h := sub.h
	h.subsMu.Lock()
	list := h.subs[sub.path]
	if i := slices.Index(list, sub); i >= 0 {
		list = slices.Delete(slices.Clone(list), i, i+1)
	}
	if len(list) == 0 {
		delete(h.subs, sub.path)
	} else {
		h.subs[sub.path] = list
	}
	h.subsMu.Unlock()
}
