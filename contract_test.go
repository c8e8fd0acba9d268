package foldstream_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
	invopop "github.com/invopop/jsonschema"
)

// Acceptance case P-01 (docs/engine.md#acceptance-cases).
func TestStateSchemaMustParseEmptyObject(t *testing.T) {
	t.Parallel()
	type st struct {
		Name string `json:"name"`
	}
	_, err := foldstream.DefineContract(foldstream.ContractConfig[st]{
		Slug: "strict", Version: "1",
		StateSchema: json.RawMessage(`{"type":"object","required":["name"]}`),
	})
	if err == nil || !strings.Contains(err.Error(), `contract "strict": stateSchema must parse {} (default every field)`) {
		t.Fatalf("got %v, want the parse {} refusal", err)
	}
	if !errors.Is(err, foldtype.ErrInvalidContract) {
		t.Errorf("got code %q, want INVALID_CONTRACT", foldtype.CodeOf(err))
	}
	// The Go way to say "the initial state cannot be built": Initial fails (or panics).
	_, err = foldstream.DefineContract(foldstream.ContractConfig[st]{Slug: "strict", Version: "1",
		Initial: func() (st, error) { return st{}, errors.New("name is required") }})
	if err == nil || !strings.Contains(err.Error(), "parse {}") {
		t.Errorf("failing Initial: got %v, want the parse {} refusal", err)
	}
	_, err = foldstream.DefineContract(foldstream.ContractConfig[st]{Slug: "strict", Version: "1",
		Initial: func() (st, error) { panic("boom") }})
	if err == nil || !strings.Contains(err.Error(), "parse {}") {
		t.Errorf("panicking Initial: got %v, want the parse {} refusal", err)
	}
	// A schema that defaults every field is accepted.
	c, err := foldstream.DefineContract(foldstream.ContractConfig[st]{Slug: "lenient", Version: "1",
		StateSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","default":""}}}`)})
	if err != nil {
		t.Fatalf("lenient schema refused: %v", err)
	}
	eq(t, "initial", c.InitialState(), st{})
}

type sharedPayload struct {
	V int `json:"v"`
}

func depContract(t *testing.T, slug string, defs ...foldstream.EventDefinition) *foldstream.Contract[emptyState] {
	return must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: slug, Version: "1", Events: defs}))
}

// Acceptance case P-02 (docs/engine.md#acceptance-cases).
func TestEventDeclaredByTwoDeps(t *testing.T) {
	t.Parallel()
	a := depContract(t, "a", foldstream.DefineEvent[sharedPayload]("demo/shared", "shared"))
	b := depContract(t, "b", foldstream.DefineEvent[sharedPayload]("demo/shared", "shared"))
	_, err := foldstream.DefineContract(foldstream.ContractConfig[emptyState]{Slug: "both", Version: "1",
		Deps: []foldstream.ContractDep{a, b}})
	if err == nil || err.Error() != `contract "both": event "demo/shared" is declared by two deps` {
		t.Fatalf("got %v", err)
	}
	// docs/engine.md#contracts: a local declaration of a dep's type is refused too.
	_, err = foldstream.DefineContract(foldstream.ContractConfig[emptyState]{Slug: "owner", Version: "1",
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[sharedPayload]("demo/shared", "mine")},
		Deps:   []foldstream.ContractDep{a}})
	if err == nil || err.Error() != `contract "owner": event "demo/shared" is already owned by a dep` {
		t.Fatalf("got %v", err)
	}
	if !errors.Is(err, foldtype.ErrInvalidContract) {
		t.Errorf("code %q", foldtype.CodeOf(err))
	}
	// A dep's schema is found through payloadSchemaFor (rule 3).
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "user", Version: "1", Deps: []foldstream.ContractDep{a}}))
	if c.PayloadSchemaFor("demo/shared") == nil {
		t.Error("dep schema not found")
	}
	if c.PayloadSchemaFor("unknown") != nil {
		t.Error("unknown type has a schema")
	}
}

type consumesCase struct {
	name     string
	consumes []string
	ev       foldstream.Event
	want     bool
}

func durableEv(typ string) foldstream.Event { return foldstream.Event{Type: typ} }

func ephemeralEv(typ string) foldstream.Event { return foldstream.Event{Type: typ, Ephemeral: true} }

func checkConsumes(t *testing.T, cases []consumesCase) {
	t.Helper()
	for _, c := range cases {
		if got := foldtype.ConsumesEvent(c.consumes, c.ev); got != c.want {
			t.Errorf("%s: ConsumesEvent(%#v, %+v) = %v, want %v", c.name, c.consumes, c.ev, got, c.want)
		}
	}
}

// Acceptance case P-03 (docs/engine.md#acceptance-cases).
func TestStarSweepsDurablesNotEphemerals(t *testing.T) {
	t.Parallel()
	checkConsumes(t, []consumesCase{
		{"durable a", []string{"*"}, durableEv("a"), true},
		{"durable b", []string{"*"}, durableEv("b"), true},
		{"ephemeral", []string{"*"}, ephemeralEv("a"), false},
	})
}

// Acceptance case P-04 (docs/engine.md#acceptance-cases).
func TestNilConsumesEveryDurable(t *testing.T) {
	t.Parallel()
	checkConsumes(t, []consumesCase{
		{"durable", nil, durableEv("a"), true},
		{"ephemeral", nil, ephemeralEv("a"), false},
		{"empty non-nil list, durable", []string{}, durableEv("a"), false},
		{"empty non-nil list, ephemeral", []string{}, ephemeralEv("a"), false},
	})
}

// Acceptance case P-05 (docs/engine.md#acceptance-cases).
func TestWakeRecordIsAnOrdinaryDurable(t *testing.T) {
	t.Parallel()
	checkConsumes(t, []consumesCase{
		{"nil", nil, durableEv(foldtype.WokenType), true},
		{"star", []string{"*"}, durableEv(foldtype.WokenType), true},
		{"named", []string{foldtype.WokenType}, durableEv(foldtype.WokenType), true},
	})
}

// Acceptance case P-06 (docs/engine.md#acceptance-cases).
func TestANamedTypeConsumesExactlyThatType(t *testing.T) {
	t.Parallel()
	checkConsumes(t, []consumesCase{
		{"named ephemeral", []string{"eph"}, ephemeralEv("eph"), true},
		{"other ephemeral", []string{"eph"}, ephemeralEv("other"), false},
		{"named durable", []string{"a"}, durableEv("a"), true},
		{"unnamed durable", []string{"a"}, durableEv("b"), false},
	})
}

// Acceptance case P-07 (docs/engine.md#acceptance-cases).
func TestLiveStateDeltaOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	delta := ephemeralEv(foldtype.LiveStateChangedType)
	checkConsumes(t, []consumesCase{
		{"nil", nil, delta, false},
		{"star", []string{"*"}, delta, false},
		{"named", []string{foldtype.LiveStateChangedType}, delta, true},
	})
	// The engine's loop guard: never reduced, even when named.
	if foldstream.ReducesEvent([]string{foldtype.LiveStateChangedType}, delta) {
		t.Error("ReducesEvent accepted a live-state delta")
	}
}

// Acceptance case P-37 (docs/engine.md#acceptance-cases).
func TestBareContractReducesAndKeysItsEffects(t *testing.T) {
	t.Parallel()
	c := newCounter(t)
	next, changed, err := c.Reduce(foldstream.ReduceArgs[counterState]{Event: foldstream.Event{Type: tickType, Offset: 1}, State: counterState{}})
	if err != nil || !changed || next.Ticks != 1 {
		t.Errorf("tick: got %+v changed=%v err=%v, want {1} changed", next, changed, err)
	}
	_, changed, _ = c.Reduce(foldstream.ReduceArgs[counterState]{Event: foldstream.Event{Type: "other"}, State: counterState{}})
	if changed {
		t.Error("unrelated event changed the state")
	}
	eq(t, "key", c.IdempotencyKey("k", nil), "counter/k")
	tick := foldstream.Event{Type: tickType, Offset: 1}
	eq(t, "key@offset", c.IdempotencyKey("k", &tick), "counter/k@1")
	// testsupport.ReduceProcessor folds the same way.
	eq(t, "fold", testsupport.ReduceProcessor[counterState](c, []foldstream.EventInput{ev(tickType), ev("x"), ev(tickType)}), counterState{Ticks: 2})
}

// An effect key names the stream, the contract, the effect, the offset and the commit time, so
// two streams, or one stream created again at its path, never share one (docs/engine.md#effect-keys).
func TestEffectKeysNameTheStreamAndTheEventsCommitTime(t *testing.T) {
	t.Parallel()
	c := newCounter(t)
	c1 := foldstream.Event{Type: tickType, Offset: 3, Path: "/carts/c1", CreatedAt: "2026-12-04T20:13:18.123Z"}
	eq(t, "effect key", c.EffectKey("charge", &c1), "/carts/c1#counter/charge@3@2026-12-04T20:13:18.123Z")
	c2 := c1
	c2.Path = "/carts/c2"
	again := c1
	again.CreatedAt = "2026-12-04T20:13:19.001Z"
	keys := map[string]bool{c.EffectKey("charge", &c1): true, c.EffectKey("charge", &c2): true, c.EffectKey("charge", &again): true}
	if len(keys) != 3 {
		t.Errorf("effect keys %v: two of three events share one", keys)
	}
	eq(t, "no event", c.EffectKey("charge", nil), "")
	eq(t, "contract", c.Contract().EffectKey("charge", &c1), c.EffectKey("charge", &c1))
}

// Acceptance case P-47 (docs/engine.md#acceptance-cases).
func TestSamePayloadInAnotherKeyOrder(t *testing.T) {
	t.Parallel()
	base := foldstream.Event{Type: "t", Payload: json.RawMessage(`{"a":1,"b":{"c":2,"d":3}}`)}
	if !foldtype.SameIdempotentEvent(base, foldstream.EventInput{Type: "t", Payload: json.RawMessage(`{"b":{"d":3,"c":2},"a":1}`)}) {
		t.Error("reordered payload judged different")
	}
	if foldtype.SameIdempotentEvent(base, foldstream.EventInput{Type: "t", Payload: json.RawMessage(`{"a":1,"b":{"c":2,"d":4}}`)}) {
		t.Error("different payload judged same")
	}
}

// Acceptance case P-48 (docs/engine.md#acceptance-cases).
func TestDifferentMetadataMakesDifferentEvents(t *testing.T) {
	t.Parallel()
	m := foldstream.Event{Type: "t", Metadata: json.RawMessage(`{"trace":"a"}`)}
	if foldtype.SameIdempotentEvent(m, foldstream.EventInput{Type: "t", Metadata: json.RawMessage(`{"trace":"b"}`)}) {
		t.Error("different metadata judged same")
	}
	if !foldtype.SameIdempotentEvent(m, foldstream.EventInput{Type: "t", Metadata: json.RawMessage(`{"trace":"a"}`)}) {
		t.Error("equal metadata judged different")
	}
}

// Acceptance case P-49 (docs/engine.md#acceptance-cases).
func TestMetadataOnOneSideOnly(t *testing.T) {
	t.Parallel()
	m := foldstream.Event{Type: "t", Metadata: json.RawMessage(`{"trace":"a"}`)}
	if foldtype.SameIdempotentEvent(m, foldstream.EventInput{Type: "t"}) {
		t.Error("metadata on one side judged same")
	}
	if foldtype.SameIdempotentEvent(foldstream.Event{Type: "t"}, foldstream.EventInput{Type: "t", Metadata: json.RawMessage(`{}`)}) {
		t.Error("absent vs empty metadata judged same")
	}
}

type setPayload struct {
	N float64 `json:"n"`
}

type lastState struct {
	Last float64 `json:"last"`
}

// Acceptance case P-50 (docs/engine.md#acceptance-cases).
func TestMalformedPayloadIsSkipped(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[lastState]](t)(foldstream.DefineContract(foldstream.ContractConfig[lastState]{
		Slug: "guarded-payload", Version: "1", Consumes: []string{"demo/set"},
		StateSchema: json.RawMessage(`{"type":"object","properties":{"last":{"type":"number","default":0}},"required":[]}`),
		Events:      []foldstream.EventDefinition{foldstream.DefineEvent[setPayload]("demo/set", "sets last")},
	}))
	p := &fn[lastState]{Base: foldstream.NewBase(c), reduce: func(a foldstream.ReduceArgs[lastState]) (lastState, bool, error) {
		return lastState{Last: a.Payload.(setPayload).N}, true, nil
	}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[lastState](t, p, mem, cps)
	ctx := ctxFor(t)
	appendT(t, mem, foldstream.EventInput{Type: "demo/set", Payload: json.RawMessage(`{"n":5}`)})
	mustDo(t, eng.CatchUpFromLog(ctx))
	eq(t, "after n=5", must[foldstream.Snapshot[lastState]](t)(eng.Snapshot(ctx)).State, lastState{Last: 5})
	drain(t, eng) // let the live-state delta take its offset first
	bad := appendT(t, mem, foldstream.EventInput{Type: "demo/set", Payload: json.RawMessage(`{"n":"not-a-number"}`)})
	mustDo(t, eng.CatchUpFromLog(ctx))
	s := must[foldstream.Snapshot[lastState]](t)(eng.Snapshot(ctx))
	eq(t, "after bad payload", s, foldstream.Snapshot[lastState]{Offset: bad[0].Offset, State: lastState{Last: 5}})
	if err := c.ValidateState(foldstream.JSON(s.State)); err != nil {
		t.Errorf("state invalid against the state schema: %v", err)
	}
	// docs/engine.md#payload-schemas: a present falsy non-object payload fails; an absent one is
	// validated as {}.
	if _, _, err := c.Normalize(foldstream.Event{Type: "demo/set", Payload: json.RawMessage(`0`)}); err == nil {
		t.Error("payload 0 accepted")
	}
	if _, _, err := c.Normalize(foldstream.Event{Type: "demo/set"}); err == nil {
		t.Error("absent payload accepted although n is required")
	}
}

// coercedNumber is the Go answer to zod's z.coerce.number(): its JSON Schema admits a number or a
// numeric string, and UnmarshalJSON converts both. The normalized payload the engine hands on is
// the re-marshalled typed value, so {"n":"2"} arrives as {"n":2}.
type coercedNumber float64

func (coercedNumber) JSONSchema() *invopop.Schema {
	return &invopop.Schema{OneOf: []*invopop.Schema{
		{Type: "number"},
		{Type: "string", Pattern: `^\s*-?[0-9]+(\.[0-9]+)?\s*$`},
	}}
}

func (n *coercedNumber) UnmarshalJSON(b []byte) error {
	s := strings.Trim(strings.TrimSpace(string(b)), `"`)
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	*n = coercedNumber(f)
	return nil
}

type addPayload struct {
	N coercedNumber `json:"n"`
}

type sumState struct {
	Sum float64 `json:"sum"`
}

func newAdder(t *testing.T, version string, seen *rec[string]) *fn[sumState] {
	c := must[*foldstream.Contract[sumState]](t)(foldstream.DefineContract(foldstream.ContractConfig[sumState]{
		Slug: "adder", Version: version, Consumes: []string{"demo/add"},
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[addPayload]("demo/add", "adds n")},
	}))
	return &fn[sumState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[sumState]) (sumState, bool, error) {
			if seen != nil {
				seen.add(string(a.Event.Payload))
			}
			return sumState{Sum: a.State.Sum + float64(a.Payload.(addPayload).N)}, true, nil
		}}
}

// Acceptance case P-51 (docs/engine.md#acceptance-cases).
func TestCoercingSchemaNormalizesPayloadsBeforeReduce(t *testing.T) {
	t.Parallel()
	seen := &rec[string]{}
	p := newAdder(t, "1", seen)
	got := testsupport.ReduceProcessor[sumState](p, []foldstream.EventInput{
		{Type: "demo/add", Payload: json.RawMessage(`{"n":"2"}`)},
		{Type: "demo/add", Payload: json.RawMessage(`{"n":3}`)},
		{Type: "demo/add", Payload: json.RawMessage(`{"n":"x"}`)},
	})
	eq(t, "sum", got, sumState{Sum: 5})
	eq(t, "normalized payloads", seen.get(), []string{`{"n":2}`, `{"n":3}`})
}

// Acceptance case P-52 (docs/engine.md#acceptance-cases).
func TestInvalidPayloadSkipsEffects(t *testing.T) {
	t.Parallel()
	type nsState struct {
		Seen []float64 `json:"seen"`
	}
	c := must[*foldstream.Contract[nsState]](t)(foldstream.DefineContract(foldstream.ContractConfig[nsState]{
		Slug: "x", Version: "1", Consumes: []string{"demo/x"},
		Initial: func() (nsState, error) { return nsState{Seen: []float64{}}, nil },
		Events:  []foldstream.EventDefinition{foldstream.DefineEvent[setPayload]("demo/x", "x")},
	}))
	effects := &rec[float64]{}
	p := &fn[nsState]{Base: foldstream.NewBase(c),
		reduce: func(a foldstream.ReduceArgs[nsState]) (nsState, bool, error) {
			return nsState{Seen: append(append([]float64{}, a.State.Seen...), a.Payload.(setPayload).N)}, true, nil
		},
		process: func(a *foldstream.ProcessEventArgs[nsState]) error {
			if a.Event == nil {
				return nil
			}
			var raw map[string]any
			_ = json.Unmarshal(a.Event.Payload, &raw)
			n, ok := raw["n"].(float64)
			if !ok {
				return fmt.Errorf("effect saw a non-number: %s", a.Event.Payload)
			}
			effects.add(n)
			return nil
		}}
	mem, cps := testsupport.NewMemoryStream(), testsupport.MemoryCheckpoints()
	eng := newEngine[nsState](t, p, mem, cps)
	mem.Register(eng)
	for _, n := range []string{`1`, `"bad"`, `2`} {
		appendT(t, mem, foldstream.EventInput{Type: "demo/x", Payload: json.RawMessage(`{"n":` + n + `}`)})
	}
	settle(t, mem)
	eq(t, "effects", effects.get(), []float64{1, 2})
	eq(t, "state", must[foldstream.Snapshot[nsState]](t)(eng.Snapshot(ctxFor(t))).State, nsState{Seen: []float64{1, 2}})
	if eng.ReducedThroughOffset() < 3 {
		t.Errorf("cursor %d: the malformed event wedged the batch", eng.ReducedThroughOffset())
	}
}

func TestDefineEventSchema_HandWritten(t *testing.T) {
	t.Parallel()
	d := foldstream.DefineEventSchema("demo/hand", "hand-written", json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`))
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "hand", Version: "1", Events: []foldstream.EventDefinition{d}}))
	_, typed, err := c.Normalize(foldstream.Event{Type: "demo/hand", Payload: json.RawMessage(`{"n":4}`)})
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "typed", typed, any(map[string]any{"n": json.Number("4")}))
	// The typed payload is exactly what the schema validated: no rounding through float64.
	_, typed, err = c.Normalize(foldstream.Event{Type: "demo/hand", Payload: json.RawMessage(`{"n":9007199254740993}`)})
	mustDo(t, err)
	eq(t, "typed beyond 2^53", typed, any(map[string]any{"n": json.Number("9007199254740993")}))
	if _, _, err := c.Normalize(foldstream.Event{Type: "demo/hand", Payload: json.RawMessage(`{"n":4.5}`)}); err == nil {
		t.Error("4.5 accepted as integer")
	}
	bad := foldstream.DefineEventSchema("demo/bad", "", json.RawMessage(`{"type": 7}`))
	_, err = foldstream.DefineContract(foldstream.ContractConfig[emptyState]{Slug: "bad", Version: "1", Events: []foldstream.EventDefinition{bad}})
	if !errors.Is(err, foldtype.ErrInvalidContract) {
		t.Errorf("bad schema: got %v, want INVALID_CONTRACT", err)
	}
}

type treeNode struct {
	Name     string     `json:"name"`
	Children []treeNode `json:"children,omitempty"`
}

type nested struct {
	Inner struct {
		N int `json:"n"`
	} `json:"inner"`
	Tree treeNode `json:"tree"`
}

// Payload types may nest and recurse: the reflected schema uses $defs references.
func TestDefineEvent_NestedAndRecursiveTypes(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "nest", Version: "1", Events: []foldstream.EventDefinition{foldstream.DefineEvent[nested]("demo/nested", "")}}))
	ok := `{"inner":{"n":1},"tree":{"name":"a","children":[{"name":"b","children":[{"name":"c"}]}]}}`
	if _, _, err := c.Normalize(foldstream.Event{Type: "demo/nested", Payload: json.RawMessage(ok)}); err != nil {
		t.Fatalf("valid payload refused: %v", err)
	}
	bad := `{"inner":{"n":1},"tree":{"name":"a","children":[{"name":7}]}}`
	if _, _, err := c.Normalize(foldstream.Event{Type: "demo/nested", Payload: json.RawMessage(bad)}); err == nil {
		t.Fatal("a deep type error was accepted")
	}
}

type deposit struct {
	Account string  `json:"account"`
	Amount  float64 `json:"amount" jsonschema:"minimum=1"`
}

// The typed payload and the normalized payload are exactly what the schema validated: a key that
// matches a field only case-insensitively is an unknown field, never folded onto the field.
func TestPayloadKeysMatchTheSchemaExactly(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[emptyState]](t)(foldstream.DefineContract(foldstream.ContractConfig[emptyState]{
		Slug: "bank", Version: "1",
		Events: []foldstream.EventDefinition{foldstream.DefineEvent[deposit]("deposited", "money arrived")},
	}))
	for _, c2 := range []struct{ payload, normalized string }{
		{`{"account":"a","amount":5,"AMOUNT":-100}`, `{"account":"a","amount":5}`},
		{`{"AMOUNT":-100,"account":"a","amount":5}`, `{"account":"a","amount":5}`},
		{`{"account":"a","amount":5,"Amount":"n/a"}`, `{"account":"a","amount":5}`},
	} {
		ev, typed, err := c.Normalize(foldstream.Event{Type: "deposited", Payload: json.RawMessage(c2.payload)})
		if err != nil {
			t.Errorf("%s: refused: %v", c2.payload, err)
			continue
		}
		eq(t, c2.payload+" typed", typed, any(deposit{Account: "a", Amount: 5}))
		eq(t, c2.payload+" normalized", string(ev.Payload), c2.normalized)
	}
	if _, _, err := c.Normalize(foldstream.Event{Type: "deposited", Payload: json.RawMessage(`{"account":"a","amount":-100,"AMOUNT":5}`)}); err == nil {
		t.Error("amount -100 accepted because AMOUNT is 5")
	}
}

func TestDefineEvent_Ephemeral(t *testing.T) {
	t.Parallel()
	d := foldstream.DefineEvent[setPayload]("demo/chunk", "a chunk", foldstream.Ephemeral())
	if !d.Ephemeral || d.Schema == nil || !json.Valid(d.Schema.JSONSchema()) {
		t.Errorf("got %+v", d)
	}
}

// docs/engine.md#payload-schemas: only an absent payload is validated as {}; a present falsy
// non-object payload (0, false, "") is validated as itself and so fails an object schema. The
// absent payload's normalized form is {} (it is what reduce and processEvent see).
func TestAbsentPayloadIsAnEmptyObjectFalsyPayloadsFail(t *testing.T) {
	t.Parallel()
	c := must[*foldstream.Contract[nState]](t)(foldstream.DefineContract(foldstream.ContractConfig[nState]{
		Slug: "loose", Version: "1",
		Events: []foldstream.EventDefinition{foldstream.DefineEventSchema("demo/any", "", json.RawMessage(`{"type":"object"}`))}}))
	for _, raw := range []string{`0`, `false`, `""`} {
		if _, _, err := c.Normalize(foldstream.Event{Type: "demo/any", Payload: json.RawMessage(raw)}); err == nil {
			t.Errorf("payload %s accepted", raw)
		}
	}
	for _, raw := range []json.RawMessage{nil, json.RawMessage(`null`)} {
		norm, _, err := c.Normalize(foldstream.Event{Type: "demo/any", Payload: raw})
		if err != nil {
			t.Fatalf("absent payload %q refused: %v", raw, err)
		}
		jsonEq(t, "normalized absent payload", norm.Payload, `{}`)
	}
}
