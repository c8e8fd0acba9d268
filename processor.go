package foldstream

import (
	"context"

	"github.com/foldstream/foldstream/foldtype"
)

// Processor is the author's side of a stream processor (docs/engine.md#processors): a contract and
// four behaviours. A processor is a plain value that needs no stream or storage, so it can be
// unit-tested bare; embed [Base] for the defaults and override what you need.
type Processor[S any] interface {
	// Contract returns the processor's contract.
	Contract() *Contract[S]
	// Reduce folds one consumed event into the state. It must be pure and must not mutate
	// args.State (copy slices and maps before changing them). It returns the next state and
	// changed=true, or changed=false to keep the current state. An error (or a panic) is reported
	// as "processor.reduce" and the prior state is kept; the event still counts as valid.
	Reduce(args ReduceArgs[S]) (next S, changed bool, err error)
	// ProcessEvent is the side-effect hook. It registers asynchronous work through
	// args.BlockProcessorWhile and args.RunInBackground and returns. An error (or a panic) fails
	// the whole batch, which persists nothing and is retried whole.
	ProcessEvent(args *ProcessEventArgs[S]) error
	// ProjectLiveState returns the live view clients see (may redact, may add runtime fields). An
	// error (or panic) is reported as "processor.live-state" and only that notification is lost.
	ProjectLiveState(state S) (any, error)
}

// ReduceArgs is the input to [Processor.Reduce].
type ReduceArgs[S any] struct {
	// Event is the consumed event with its payload normalized (docs/engine.md#payload-schemas).
	Event Event
	// Payload is the typed payload decoded by the event's definition: the P of
	// DefineEvent[P] (a value, not a pointer), map[string]any (numbers as json.Number) for a
	// hand-written schema, nil when the contract has no definition for the type.
	Payload any
	// State is the current state. Do not mutate it.
	State S

	decl *liveDecl
}

// liveDecl collects one reduce's [ReduceArgs.DeclareLiveChange] calls.
type liveDecl struct {
	declared bool
	pointers []string
}

// DeclareLiveChange names, as JSON Pointers ("/count", "/items/a1b2"), the members of the live view
// whose JSON this reduce may have changed; the live view is what ProjectLiveState returns, for
// [Base] the state itself. When every reduce that changed the state since the last publish declared
// its changes, the engine publishes only the declared members ([LiveState.SetChanged]), so a
// publish costs the size of the change instead of the size of the view
// (docs/engine.md#declared-changes). A reduce that changes the state without declaring makes the
// next publish compare the whole view, as without declarations. A projection that adds fields of
// its own (a clock, a count kept outside the state) must not be combined with declarations: those
// fields would change undeclared. Outside an engine (a processor tested bare) it does nothing.
func (a ReduceArgs[S]) DeclareLiveChange(pointers ...string) {
	if a.decl == nil {
		return
	}
	a.decl.declared = true
	a.decl.pointers = append(a.decl.pointers, pointers...)
}

// Delivery describes how an event is delivered to ProcessEvent.
type Delivery struct {
	// CaughtUp is true only on the at-head pass (docs/engine.md#engine-rules).
	CaughtUp bool
}

// ProcessEventArgs is the input to [Processor.ProcessEvent] (docs/engine.md#processors).
type ProcessEventArgs[S any] struct {
	// Event is the consumed, normalized event, or nil for the eventless at-head pass.
	Event *Event
	// Payload is the typed payload (see [ReduceArgs.Payload]); nil in the eventless pass.
	Payload any
	// State is the state after this event's reduce.
	State S
	// PreviousState is the state before this event's reduce (equal to State when eventless).
	PreviousState S
	// Delivery carries CaughtUp.
	Delivery Delivery

	run *eventRun
}

// Context returns the context of the chain unit delivering this event.
func (a *ProcessEventArgs[S]) Context() context.Context {
	if a.run == nil {
		return context.Background()
	}
	return a.run.ctx
}

// Append emits events onto the processor's own stream (docs/engine.md#emitting-events). Every
// event's type must be in the contract's Emits, or the whole call fails with code UNDECLARED_EMIT
// and the message `processor "<slug>" emits "<type>" without declaring it` before anything is appended. Each
// event's Source is replaced by {processor: {slug, version, whileProcessing}}. Give emitted events
// an idempotency key (Base.IdempotencyKey) so that a retried batch dedupes on the stream; the
// engine stores it under [foldtype.ProcessorKeyPrefix], a namespace HTTP writers cannot use, so the
// returned events carry the prefixed key (docs/engine.md#emitted-idempotency-keys).
//
// Append is safe inside a blocker: the stream's push back to this engine is fire-and-forget and
// queues behind the current unit.
func (a *ProcessEventArgs[S]) Append(ctx context.Context, events ...EventInput) ([]Event, error) {
	if a.run == nil || a.run.stream == nil {
		return nil, foldtype.NewError(foldtype.CodeClosed, nil, "processor: Append needs an engine")
	}
	return a.run.append(ctx, events)
}

// BlockProcessorWhile holds this event, and the cursor, until work returns
// (docs/engine.md#blockers): the blockers of one event run one after another in registration order
// after ProcessEvent returns, and the engine waits until no further blocker was registered (a
// blocker may register another). A failing blocker fails the batch. Work registered after the
// event settled runs as background work instead.
func (a *ProcessEventArgs[S]) BlockProcessorWhile(work func(ctx context.Context) error) {
	if a.run == nil {
		return
	}
	a.run.block(work)
}

// RunInBackground starts work as a droppable attempt that is not awaited
// (docs/engine.md#background-work-and-claims): it may overtake later events, its failure is only
// reported ("processor.background"), and while any attempt is in flight the engine holds a claim
// on its host's alarm. Its outcome must be recoverable from state at a later at-head pass. Work
// gets a context that outlives the batch.
func (a *ProcessEventArgs[S]) RunInBackground(work func(ctx context.Context) error) {
	if a.run == nil || a.run.background == nil {
		return
	}
	a.run.background(a.run.ctx, work)
}

// Base provides the default hooks (docs/engine.md#processors): Reduce keeps the state,
// ProcessEvent does nothing, ProjectLiveState returns the state itself. Embed it and set it with
// [NewBase]:
//
//	type Counter struct{ foldstream.Base[CounterState] }
//	p := &Counter{Base: foldstream.NewBase(contract)}
type Base[S any] struct {
	contract *Contract[S]
}

// NewBase returns a Base serving contract c.
func NewBase[S any](c *Contract[S]) Base[S] { return Base[S]{contract: c} }

// Contract returns the contract given to NewBase.
func (b Base[S]) Contract() *Contract[S] { return b.contract }

// Reduce keeps the current state.
func (b Base[S]) Reduce(args ReduceArgs[S]) (S, bool, error) { return args.State, false, nil }

// ProcessEvent does nothing.
func (b Base[S]) ProcessEvent(*ProcessEventArgs[S]) error { return nil }

// ProjectLiveState returns the state itself.
func (b Base[S]) ProjectLiveState(state S) (any, error) { return state, nil }

// IdempotencyKey returns "<slug>/<key>", or "<slug>/<key>@<offset>" when ev is non-nil: the key
// of an event the processor appends to its own stream ([Contract.IdempotencyKey]). It is unique
// within one stream only; a service outside the store gets [Base.EffectKey].
func (b Base[S]) IdempotencyKey(key string, ev *Event) string {
	return b.contract.IdempotencyKey(key, ev)
}

// EffectKey returns "<stream path>#<slug>/<name>@<offset>@<createdAt>", the key of effect name
// of ev for a service outside the store, unique across streams and across a stream created again
// at the same path ([Contract.EffectKey], docs/engine.md#effect-keys).
func (b Base[S]) EffectKey(name string, ev *Event) string {
	return b.contract.EffectKey(name, ev)
}
