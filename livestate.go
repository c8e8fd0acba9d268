package foldstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// MaxPatchChars is the live-state patch ceiling (docs/engine.md#live-state): a patch whose JSON is
// longer (in UTF-16 code units) travels as null, meaning "rev moved, re-seed".
const MaxPatchChars = 1048576

// LiveStateSink receives delta events; every [Stream] is one.
type LiveStateSink interface {
	Append(ctx context.Context, events ...EventInput) ([]Event, error)
}

// LiveStateConfig configures [NewLiveState].
type LiveStateConfig struct {
	// Clock seeds the revision epoch. Defaults to foldtype.SystemClock.
	Clock Clock
	// Reporter receives failed delta appends. Defaults to SlogReporter(nil).
	Reporter Reporter
	// Epoch overrides the revision epoch (tests); zero means nowMs*4096 + rand[0, 4095].
	Epoch int64
	// VerifyInterval bounds how often [LiveState.SetChanged] checks a declaration against a full
	// encoding of the value (docs/engine.md#declared-changes): at most one of its calls per
	// interval, on the Clock, pays for that check. Defaults to LiveStateVerifyIntervalDefault; a
	// negative value checks every call (tests).
	VerifyInterval time.Duration
}

// LiveStateVerifyIntervalDefault is the default [LiveStateConfig.VerifyInterval]: one SetChanged
// call a second is checked against a full encoding.
const LiveStateVerifyIntervalDefault = time.Second

// LiveState holds one live value and publishes its changes as RFC 6902 deltas
// (docs/engine.md#live-state). It is safe for concurrent use.
//
// The held value is kept beside its JSON text (the diff base) and, for an object, an index of the
// base's top-level members. A Set encodes the new value against the base (rawjson.Reencode: what
// did not change is compared in place, not encoded again), finds the window where the two texts
// differ (common prefix and suffix), and diffs only the members overlapping it; inside them the
// diff skips byte-identical subtrees without decoding them. A one-field change in a large value
// therefore costs a walk of the value and a memory comparison, not a marshal and a whole-document
// diff. A caller who knows which members changed names them to [LiveState.SetChanged], which
// encodes only those and does not walk the rest.
type LiveState struct {
	sink     LiveStateSink
	key      string
	reporter Reporter
	clock    Clock
	verify   time.Duration // < 0: every SetChanged

	mu       sync.Mutex
	held     any
	heldJSON []byte       // JSON of held, nil when held did not serialize
	base     []byte       // the last value that serialized; nil = absent
	baseType reflect.Type // that value's type
	baseIdx  []rawjson.MemberSpan
	indexed  bool // base is an object and baseIdx indexes its members
	rev      int64
	// writes counts the Set and SetChanged calls that replaced the held value: the engine publishes
	// through SetChanged only when no other call wrote since its own last one.
	writes uint64
	tail   chan struct{} // closes when the last queued delta append settled
	// stopped is set once the holder's engine stopped taking work before a hand-over: deltas not
	// yet appended are dropped (the next owner's live state starts a new revision chain, which
	// its readers re-seed from), so a closing engine waits for no more appends.
	stopped  atomic.Bool
	verified time.Time // when SetChanged last checked a declaration
	// SetChanged writes the next text into spare, an earlier base nothing refers to any more,
	// instead of allocating (and clearing) a buffer the size of the value. encoding counts the Sets
	// reading base outside the lock: while one is, a replaced base is not reused.
	spare    []byte
	encoding int
}

// NewLiveState returns a holder with key and initial value (docs/engine.md#live-state). The
// revision starts at the epoch nowMs*4096 + rand[0, 4095], so a reborn holder never continues an
// old chain.
func NewLiveState(sink LiveStateSink, key string, initial any, opts LiveStateConfig) *LiveState {
	clock := opts.Clock
	if clock == nil {
		clock = foldtype.SystemClock{}
	}
	rep := opts.Reporter
	if rep == nil {
		rep = SlogReporter(nil)
	}
	rev := opts.Epoch
	if rev == 0 {
		rev = revisionEpoch(clock)
	}
	verify := opts.VerifyInterval
	if verify == 0 {
		verify = LiveStateVerifyIntervalDefault
	}
	l := &LiveState{sink: sink, key: key, reporter: rep, clock: clock, verify: verify, held: initial, rev: rev, tail: closedChan()}
	if b, err := marshalLive(initial); err == nil {
		l.base, l.heldJSON, l.baseType = b, b, reflect.TypeOf(initial)
		l.baseIdx, l.indexed = rawjson.IndexObject(b)
	}
	return l
}

// revisionEpoch returns clock's nowMs*4096 + a random integer in [0, 4095].
func revisionEpoch(clock Clock) int64 {
	return clock.Now().UnixMilli()*4096 + rand.Int64N(4096)
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// encodeLive is marshalLive given the encoding of an earlier value: the parts of v whose encoding
// did not change are compared with prev rather than encoded again (rawjson.Reencode), so a
// one-field change in a large value costs a walk of the value, not a whole marshal.
func encodeLive(v any, prev []byte, prevType reflect.Type) (b []byte, err error) {
	r, err := encodeLiveTo(nil, v, prev, prevType)
	return r.Text, err
}

// encodeLiveTo is encodeLive writing into buf when it is large enough (rawjson.ReencodeTo).
func encodeLiveTo(buf []byte, v any, prev []byte, prevType reflect.Type) (r rawjson.Reencoded, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = rawjson.Reencoded{}, fmt.Errorf("marshal panicked: %v", p)
		}
	}()
	return rawjson.ReencodeTo(buf, v, prev, prevType)
}

func marshalLive(v any) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("marshal panicked: %v", p)
		}
	}()
	return marshalJSON(v)
}

// Key returns the holder's key.
func (l *LiveState) Key() string { return l.key }

// Get returns the held value.
func (l *LiveState) Get() any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Snapshot returns the revision and the held value, read together (the value need not
// serialize).
func (l *LiveState) Snapshot() foldtype.LiveSnapshot[any] {
	l.mu.Lock()
	defer l.mu.Unlock()
	return foldtype.LiveSnapshot[any]{Rev: l.rev, State: l.held}
}

// SnapshotJSON returns the revision and the held value's JSON, read together, the shape a client
// seeds from; it fails when the held value did not serialize.
func (l *LiveState) SnapshotJSON() (foldtype.LiveSnapshot[json.RawMessage], error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldJSON == nil {
		return foldtype.LiveSnapshot[json.RawMessage]{Rev: l.rev}, fmt.Errorf("live state %q: the held value does not serialize to JSON", l.key)
	}
	return foldtype.LiveSnapshot[json.RawMessage]{Rev: l.rev, State: append(json.RawMessage(nil), l.heldJSON...)}, nil
}

// Set publishes next (docs/engine.md#live-state): an equal value changes nothing; a value that
// cannot be serialized is adopted, moves rev by one and emits nothing (clients re-seed on the
// gap); otherwise rev moves by one and an ephemeral delta is appended on the holder's one append
// chain (delta N+1 is issued only after delta N's append settled). Set never fails and never
// blocks on the sink.
func (l *LiveState) Set(next any) { l.set(next) }

// set is Set; it returns the write count its own write made.
func (l *LiveState) set(next any) uint64 {
	l.mu.Lock()
	base, baseType, spare := l.base, l.baseType, l.spare
	l.spare = nil
	l.encoding++
	l.mu.Unlock()
	r, err := encodeLiveTo(spare, next, base, baseType)
	b := r.Text
	l.mu.Lock()
	defer l.mu.Unlock()
	l.encoding--
	l.writes++
	if l.spare == nil && cap(spare) > 0 && !sameBuffer(b, spare) {
		l.spare = spare // not used: the encoding was the old text, or a whole marshal
	}
	if err != nil {
		l.held, l.heldJSON = next, nil
		l.rev++
		return l.writes
	}
	var ops []PatchOp
	idx, indexed := l.baseIdx, l.indexed
	switch {
	case l.base == nil:
		ops = []PatchOp{{Op: "replace", Path: "", Value: b}}
		idx, indexed = rawjson.IndexObject(b)
	case bytes.Equal(l.base, b):
	default:
		var ok bool
		if l.indexed {
			prefix, suffix := r.Prefix, r.Suffix
			if r.Same || !sameBuffer(l.base, base) { // another call replaced the text r was made against
				prefix, suffix = -1, -1
			}
			ops, idx, ok = rawjson.DiffIndexedWindow(l.base, l.baseIdx, b, prefix, suffix)
		}
		if !ok {
			ops, err = rawjson.Diff(l.base, b)
			if err != nil { // cannot happen for encoding/json output; treat as unserializable
				l.held, l.heldJSON = next, nil
				l.rev++
				return l.writes
			}
			idx, indexed = rawjson.IndexObject(b)
		}
	}
	l.recycle(b)
	l.held, l.heldJSON, l.base, l.baseType = next, b, b, reflect.TypeOf(next)
	l.baseIdx, l.indexed = idx, indexed
	l.publish(ops)
	return l.writes
}

// recycle keeps the base being replaced by next as the spare buffer, when nothing reads it any more:
// no Set is encoding against it outside the lock, it is not next itself, and the ops of this call
// refer to next only. The caller holds l.mu.
func (l *LiveState) recycle(next []byte) {
	old := l.base
	if l.encoding == 0 && l.spare == nil && cap(old) > 0 && !sameBuffer(old, next) {
		l.spare = old[:0]
	}
}

// sameBuffer reports whether a and b start at the same byte.
func sameBuffer(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// publish moves rev by one and queues the delta of ops on the append chain; no ops, no delta. The
// caller holds l.mu.
func (l *LiveState) publish(ops []PatchOp) {
	if len(ops) == 0 {
		return
	}
	delta := foldtype.LiveStateDelta{Key: l.key, From: l.rev, To: l.rev + 1, Patch: ops}
	l.rev++
	payload, err := marshalJSON(delta)
	if err == nil {
		if pj, _ := marshalJSON(ops); foldtype.UTF16Len(string(pj)) > MaxPatchChars {
			delta.Patch = nil
			payload, err = marshalJSON(delta)
		}
	}
	if err != nil {
		report(l.reporter, SiteLiveStateAppend, err, slog.String("key", l.key))
		return
	}
	ev := EventInput{Type: foldtype.LiveStateChangedType, Ephemeral: true, Payload: payload}
	prev, done := l.tail, make(chan struct{})
	l.tail = done
	chainWorkers.run(func() { // a warm stack (chainworkers.go)
		defer close(done)
		<-prev
		if l.stopped.Load() {
			return
		}
		err := callGuarded(func() error {
			_, err := l.sink.Append(context.Background(), ev)
			return err
		})
		if err != nil {
			report(l.reporter, SiteLiveStateAppend, err, slog.String("key", l.key))
		}
	})
}

// SetChanged publishes next like [LiveState.Set], given changed: the JSON Pointers (RFC 6901, as
// in a patch: "/items/3/name") of every member whose JSON may differ from the held value's. Only
// those members are encoded; each is spliced into the held JSON in place of its old text (or
// added, or removed), and the patch is made from them alone, so the cost follows the size of the
// change, not of the value (docs/engine.md#declared-changes). Declaring a member that did not
// change is harmless; a pointer that cannot be followed exactly in next (no such field, an index
// out of range, a type with its own MarshalJSON on the way) widens to its parent, and one that
// widens to the whole value, or a held value that did not serialize, makes the call a Set.
//
// A member that changed but was not declared keeps its old JSON. SetChanged finds that by checking
// one call per [LiveStateConfig.VerifyInterval] against a full encoding of next (every call when
// the interval is negative); a difference is corrected in that call's delta, so clients hold the
// right value from it on, and reported under [SiteLiveStateUndeclared] with code
// UNDECLARED_CHANGE. Like Set, SetChanged never fails and never blocks on the sink; the holder
// keeps next, which the caller may change in place before its next Set or SetChanged.
func (l *LiveState) SetChanged(next any, changed ...string) {
	l.mu.Lock()
	if l.setChangedLocked(next, changed) {
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.Set(next)
}

// setChangedSince is SetChanged when no other call replaced the held value since the write count
// was gen, and Set otherwise (the held value is then not the one the declarations are relative
// to); it returns the write count its own write made.
func (l *LiveState) setChangedSince(gen uint64, next any, changed []string) uint64 {
	l.mu.Lock()
	if l.writes == gen && l.setChangedLocked(next, changed) {
		defer l.mu.Unlock()
		return l.writes
	}
	l.mu.Unlock()
	return l.set(next)
}

// setChangedLocked is SetChanged with l.mu held. It returns false, having changed nothing, when
// the call must be a Set instead.
func (l *LiveState) setChangedLocked(next any, changed []string) bool {
	if l.heldJSON == nil {
		return false
	}
	spare := l.spare
	l.spare = nil
	res, ok := rawjson.EncodeChanged(next, l.base, l.baseType, l.baseIdx, l.indexed, changed, spare)
	if !ok {
		l.spare = spare // only this call wrote to it, if anything did
		return false
	}
	l.writes++
	ops := res.Ops
	if now := l.clock.Now(); l.verify < 0 || now.Sub(l.verified) >= l.verify {
		l.verified = now
		truth, err := encodeLive(next, res.Text, l.baseType)
		if err != nil { // an undeclared member no longer serializes: Set's rule for such a value
			l.held, l.heldJSON = next, nil
			l.rev++
			return true
		}
		if !bytes.Equal(truth, res.Text) {
			fix, idx, ok := []PatchOp(nil), []rawjson.MemberSpan(nil), false
			if res.Indexed {
				fix, idx, ok = rawjson.DiffIndexed(res.Text, res.Index, truth)
			}
			if !ok {
				fix, _ = rawjson.Diff(res.Text, truth)
				idx, ok = rawjson.IndexObject(truth)
			}
			if len(fix) > 0 { // else only the text differed (-0 for 0): nothing for clients to correct
				l.reportUndeclared(fix, changed)
			}
			ops = append(ops, fix...)
			res.Text, res.Index, res.Indexed = truth, idx, ok
		}
	}
	l.recycle(res.Text)
	l.held, l.heldJSON, l.base, l.baseType = next, res.Text, res.Text, reflect.TypeOf(next)
	l.baseIdx, l.indexed = res.Index, res.Indexed
	l.publish(ops)
	return true
}

// reportUndeclared reports the members a SetChanged check found changed without a declaration.
func (l *LiveState) reportUndeclared(fix []PatchOp, declared []string) {
	paths := make([]string, 0, min(len(fix), 8))
	for _, op := range fix[:min(len(fix), 8)] {
		paths = append(paths, op.Path)
	}
	err := foldtype.NewError(foldtype.CodeUndeclaredChange,
		map[string]any{"key": l.key, "paths": paths, "declared": declared},
		"live state %q changed at %v without SetChanged declaring it (corrected in the next delta); declare every changed member or call Set", l.key, paths)
	report(l.reporter, SiteLiveStateUndeclared, err, slog.String("key", l.key))
}

// Wait blocks until every delta queued so far has settled, or ctx ends.
func (l *LiveState) Wait(ctx context.Context) error {
	l.mu.Lock()
	t := l.tail
	l.mu.Unlock()
	select {
	case <-t:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopPublishing drops the deltas not yet appended and every later one (see stopped).
func (l *LiveState) stopPublishing() { l.stopped.Store(true) }

func (l *LiveState) idle() bool {
	l.mu.Lock()
	t := l.tail
	l.mu.Unlock()
	select {
	case <-t:
		return true
	default:
		return false
	}
}

// PatchOp is one RFC 6902 operation of a live-state patch: add, replace or remove.
type PatchOp = foldtype.PatchOp

// ErrPatchNull is returned by [ApplyPatch] for a null patch: the client must re-seed.
var ErrPatchNull = rawjson.ErrNullPatch

// ApplyPatch applies a live-state patch (a JSON array of add/replace/remove operations, or null) to
// doc and returns the new document; doc is not modified. A Go client following a processor's live
// state uses it: seed from a live snapshot, apply each delta whose From equals the revision held,
// and re-seed on any mismatch or on [ErrPatchNull] (docs/engine.md#applying-a-delta). Each op
// resolves its parent by JSON Pointer; a "__proto__" segment is refused; an array add at "-"
// appends and at an index inserts; remove at the root, a missing path or a non-container parent is
// an error. Numbers keep their text.
func ApplyPatch(doc, patch json.RawMessage) (json.RawMessage, error) {
	return rawjson.Apply(doc, patch)
}
