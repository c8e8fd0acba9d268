package foldstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
	invopop "github.com/invopop/jsonschema"
	"github.com/santhosh-tekuri/jsonschema/v5"
)

// PayloadSchema validates and normalizes one event type's payload (docs/engine.md#contracts): it
// either rejects a payload or returns the normalized payload.
//
// A schema made by [DefineEvent] from a Go type P validates the wire payload against the JSON
// Schema reflected from P (github.com/invopop/jsonschema, compiled by
// github.com/santhosh-tekuri/jsonschema/v5), then decodes it into P and re-marshals P: the
// re-marshalled value is the normalized payload, and the decoded P is handed to reducers as the
// typed payload. Payload keys match P's JSON field names exactly, as the schema matches them: a key
// that differs from every field name (even only in case, like "AMOUNT" beside "amount") is an
// unknown field, dropped, never folded onto a field the way encoding/json would. Coercions are
// therefore expressed the Go way: a field type whose JSONSchema method
// admits the wire forms and whose UnmarshalJSON converts them (see the package example for a number
// that also accepts "2"). Unknown fields are allowed on the wire and dropped by normalization (like
// a permissive object schema).
//
// A schema made by [DefineEventSchema] from hand-written JSON Schema validates only; its normalized
// payload is the payload itself and its typed payload is the decoded JSON (map[string]any, numbers
// as json.Number).
type PayloadSchema struct {
	source   json.RawMessage
	compiled *jsonschema.Schema
	decode   func(raw []byte) (typed any, normalized json.RawMessage, err error)
}

// JSONSchema returns the schema's JSON text.
func (s *PayloadSchema) JSONSchema() json.RawMessage { return s.source }

// Validate checks payload and returns the normalized payload and the typed value. An absent
// payload (nil or JSON null) is validated as an empty object; a present non-object payload (0,
// false, "") is validated as itself and so fails an object schema (docs/engine.md#payload-schemas).
func (s *PayloadSchema) Validate(payload json.RawMessage) (normalized json.RawMessage, typed any, err error) {
	raw := []byte(payload)
	if isAbsentJSON(payload) {
		raw = []byte("{}")
	}
	doc, err := decodeJSONNumber(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("payload is not JSON: %w", err)
	}
	if err := s.compiled.Validate(doc); err != nil {
		return nil, nil, err
	}
	typed, normalized, err = s.decode(raw)
	if err != nil {
		return nil, nil, err
	}
	return normalized, typed, nil
}

var schemaSeq atomic.Int64

func compileSchema(src []byte) (*jsonschema.Schema, error) {
	url := fmt.Sprintf("mem://foldstream/schema-%d.json", schemaSeq.Add(1))
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, bytes.NewReader(src)); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// EventDefinition is one entry of a contract's event catalog (docs/engine.md#contracts): a type, a
// description, an optional ephemeral flag and a payload schema.
type EventDefinition struct {
	// Type is the event type string.
	Type string
	// Description says what the event means.
	Description string
	// Ephemeral marks types that are appended as ephemeral events.
	Ephemeral bool
	// Schema validates and normalizes the payload; nil folds the type unvalidated.
	Schema *PayloadSchema
	err    error
}

// EventOption configures an [EventDefinition].
type EventOption func(*EventDefinition)

// Ephemeral marks the defined event type as ephemeral.
func Ephemeral() EventOption { return func(d *EventDefinition) { d.Ephemeral = true } }

// DefineEvent defines an event type whose payload is the Go type P (usually a struct). The JSON
// Schema is reflected from P; see [PayloadSchema] for validation and normalization. A reflection
// or compile failure is reported by [DefineContract] (code INVALID_CONTRACT), so definitions can
// live in package-level var blocks.
func DefineEvent[P any](typ, description string, opts ...EventOption) EventDefinition {
	d := EventDefinition{Type: typ, Description: description}
	for _, o := range opts {
		o(&d)
	}
	r := &invopop.Reflector{ExpandedStruct: true, AllowAdditionalProperties: true}
	var zero P
	sch := r.ReflectFromType(reflect.TypeOf(&zero).Elem())
	src, err := json.Marshal(sch)
	if err != nil {
		d.err = fmt.Errorf("event %q: reflect payload schema: %w", typ, err)
		return d
	}
	compiled, err := compileSchema(src)
	if err != nil {
		d.err = fmt.Errorf("event %q: compile payload schema: %w", typ, err)
		return d
	}
	d.Schema = &PayloadSchema{source: src, compiled: compiled, decode: func(raw []byte) (any, json.RawMessage, error) {
		var p P
		// Keys match P's fields exactly, as the schema matched them: encoding/json alone would fold
		// "AMOUNT" onto the field "amount" and hand on a value the schema never saw.
		if err := rawjson.UnmarshalExact(raw, &p); err != nil {
			return nil, nil, err
		}
		out, err := json.Marshal(p)
		if err != nil {
			return nil, nil, err
		}
		return p, out, nil
	}}
	return d
}

// DefineEventSchema defines an event type validated by a hand-written JSON Schema. The payload is
// not transformed; reducers get it decoded as map[string]any (or the JSON value it is), with
// numbers as json.Number, exactly as validated.
func DefineEventSchema(typ, description string, schema json.RawMessage, opts ...EventOption) EventDefinition {
	d := EventDefinition{Type: typ, Description: description}
	for _, o := range opts {
		o(&d)
	}
	compiled, err := compileSchema(schema)
	if err != nil {
		d.err = fmt.Errorf("event %q: compile payload schema: %w", typ, err)
		return d
	}
	d.Schema = &PayloadSchema{source: append(json.RawMessage(nil), schema...), compiled: compiled,
		decode: func(raw []byte) (any, json.RawMessage, error) {
			// Numbers stay json.Number, the exact text the schema validated (float64 would round
			// integers beyond 2^53).
			v, err := rawjson.DecodeNumbers(raw)
			if err != nil {
				return nil, nil, err
			}
			return v, append(json.RawMessage(nil), raw...), nil
		}}
	return d
}

// ContractDep is a defined contract another contract depends on: its own catalog's events may be
// consumed or emitted without being owned (docs/engine.md#contracts). Every *Contract[S] is a
// ContractDep.
type ContractDep interface {
	// ContractSlug is the dependency's slug.
	ContractSlug() string
	// OwnEvents is the dependency's local catalog (not its dependencies').
	OwnEvents() []EventDefinition
}

// ContractConfig is the input to [DefineContract] (docs/engine.md#contracts).
type ContractConfig[S any] struct {
	// Slug keys the checkpoint row and the live state.
	Slug string
	// Version: any change triggers the one-time reduce-only re-reduce (docs/engine.md#re-reduce).
	Version string
	// Description says what the processor does.
	Description string
	// Consumes lists the consumed types: nil means every durable event, "*" every durable event,
	// a named type opts in (ephemerals only this way), an empty non-nil list nothing
	// (docs/engine.md#the-consumes-rule).
	Consumes []string
	// Emits lists the types the processor's Append may emit (docs/engine.md#emitting-events).
	Emits []string
	// Initial builds a fresh initial state. Defaults to decoding "{}" into a zero S. It plays
	// the role of "the state schema applied to {}": an error or panic fails the definition.
	Initial func() (S, error)
	// StateSchema is an optional hand-written JSON Schema of the state. It must accept "{}" and
	// the initial state, or the definition fails (docs/engine.md#contracts).
	StateSchema json.RawMessage
	// Events is the catalog of event types this contract owns.
	Events []EventDefinition
	// Deps are contracts whose events this one consumes or emits without owning them.
	Deps []ContractDep
}

// Contract is a defined processor contract (docs/engine.md#contracts). Build it with
// [DefineContract]; it is immutable and safe for concurrent use.
type Contract[S any] struct {
	cfg         ContractConfig[S]
	stateSchema *jsonschema.Schema
	catalog     map[string]EventDefinition
}

func invalidContract(slug, format string, args ...any) *Error {
	e := foldtype.NewError(foldtype.CodeInvalidContract, map[string]any{"slug": slug}, "contract %q: "+format,
		append([]any{slug}, args...)...)
	e.Retryable = false
	return e
}

// DefineContract validates cfg and returns the contract. Definition errors carry code
// INVALID_CONTRACT and these messages (docs/engine.md#contracts):
//
//	contract "<slug>": stateSchema must parse {} (default every field)
//	contract "<slug>": event "<type>" is already owned by a dep
//	contract "<slug>": event "<type>" is declared by two deps
func DefineContract[S any](cfg ContractConfig[S]) (*Contract[S], error) {
	c := &Contract[S]{cfg: cfg, catalog: map[string]EventDefinition{}}
	c.cfg.Consumes = cloneStrings(cfg.Consumes)
	c.cfg.Emits = cloneStrings(cfg.Emits)
	if strings.TrimSpace(cfg.Slug) == "" {
		return nil, foldtype.NewError(foldtype.CodeInvalidContract, nil, "contract: a slug is required")
	}
	mustParse := func(cause error) error {
		e := invalidContract(cfg.Slug, "stateSchema must parse {} (default every field)")
		e.Err = cause
		return e
	}
	if len(cfg.StateSchema) > 0 {
		s, err := compileSchema(cfg.StateSchema)
		if err != nil {
			e := invalidContract(cfg.Slug, "stateSchema does not compile: %v", err)
			e.Err = err
			return nil, e
		}
		c.stateSchema = s
		if err := c.ValidateState(json.RawMessage("{}")); err != nil {
			return nil, mustParse(err)
		}
	}
	initial, err := c.buildInitial()
	if err != nil {
		return nil, mustParse(err)
	}
	if c.stateSchema != nil {
		b, err := json.Marshal(initial)
		if err != nil {
			return nil, mustParse(err)
		}
		if err := c.ValidateState(b); err != nil {
			return nil, mustParse(err)
		}
	}
	for _, d := range cfg.Events {
		if d.err != nil {
			e := invalidContract(cfg.Slug, "%v", d.err)
			e.Err = d.err
			return nil, e
		}
		if _, dup := c.catalog[d.Type]; dup {
			return nil, invalidContract(cfg.Slug, "event %q is declared twice", d.Type)
		}
		c.catalog[d.Type] = d
	}
	seen := map[string]bool{}
	for _, dep := range cfg.Deps {
		for _, d := range dep.OwnEvents() {
			if _, own := c.catalog[d.Type]; own {
				return nil, invalidContract(cfg.Slug, "event %s is already owned by a dep", quoteJSON(d.Type))
			}
			if seen[d.Type] {
				return nil, invalidContract(cfg.Slug, "event %s is declared by two deps", quoteJSON(d.Type))
			}
			seen[d.Type] = true
		}
	}
	return c, nil
}

// MustDefineContract is [DefineContract] that panics on error, for package-level definitions.
func MustDefineContract[S any](cfg ContractConfig[S]) *Contract[S] {
	c, err := DefineContract(cfg)
	if err != nil {
		panic(err)
	}
	return c
}

func (c *Contract[S]) buildInitial() (s S, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("initial state panicked: %v", r)
		}
	}()
	if c.cfg.Initial != nil {
		return c.cfg.Initial()
	}
	err = json.Unmarshal([]byte("{}"), &s)
	return s, err
}

// Slug returns the contract's slug.
func (c *Contract[S]) Slug() string { return c.cfg.Slug }

// ContractSlug returns the slug (for [ContractDep]).
func (c *Contract[S]) ContractSlug() string { return c.cfg.Slug }

// Version returns the reducer version.
func (c *Contract[S]) Version() string { return c.cfg.Version }

// Description returns the description.
func (c *Contract[S]) Description() string { return c.cfg.Description }

// Consumes returns a copy of the consumes list (nil = every durable event).
func (c *Contract[S]) Consumes() []string { return cloneStrings(c.cfg.Consumes) }

// Emits returns a copy of the emits list.
func (c *Contract[S]) Emits() []string { return cloneStrings(c.cfg.Emits) }

// Deps returns the dependencies.
func (c *Contract[S]) Deps() []ContractDep { return append([]ContractDep(nil), c.cfg.Deps...) }

// OwnEvents returns the local catalog in definition order.
func (c *Contract[S]) OwnEvents() []EventDefinition {
	return append([]EventDefinition(nil), c.cfg.Events...)
}

// InitialState returns a fresh initial state. DefineContract proved it can be built; should a
// non-deterministic Initial fail later, the zero S is returned.
func (c *Contract[S]) InitialState() S {
	s, err := c.buildInitial()
	if err != nil {
		var zero S
		return zero
	}
	return s
}

// StateSchema returns the hand-written state schema, or nil when the contract has none.
func (c *Contract[S]) StateSchema() json.RawMessage {
	return append(json.RawMessage(nil), c.cfg.StateSchema...)
}

// ValidateState validates a state's JSON against the contract's StateSchema (nil when there is
// none).
func (c *Contract[S]) ValidateState(state json.RawMessage) error {
	if c.stateSchema == nil {
		return nil
	}
	doc, err := decodeJSONNumber(state)
	if err != nil {
		return err
	}
	return c.stateSchema.Validate(doc)
}

// PayloadSchemaFor returns the payload schema for typ: the local catalog first, then each
// dependency's catalog in order (docs/engine.md#payload-schemas). Nil means the type is unknown:
// its events are folded unvalidated.
func (c *Contract[S]) PayloadSchemaFor(typ string) *PayloadSchema {
	if d, ok := c.catalog[typ]; ok {
		return d.Schema
	}
	for _, dep := range c.cfg.Deps {
		for _, d := range dep.OwnEvents() {
			if d.Type == typ {
				return d.Schema
			}
		}
	}
	return nil
}

// Normalize applies docs/engine.md#payload-schemas to ev: without a schema for its type the event
// is returned unchanged (typed payload nil); with one, the payload is validated and replaced by
// the normalized payload, and the decoded typed payload is returned beside it. An error means the
// event is invalid: it must be neither reduced nor given to ProcessEvent.
func (c *Contract[S]) Normalize(ev Event) (Event, any, error) {
	s := c.PayloadSchemaFor(ev.Type)
	if s == nil {
		return ev, nil, nil
	}
	norm, typed, err := s.Validate(ev.Payload)
	if err != nil {
		return ev, nil, err
	}
	ev.Payload = norm
	return ev, typed, nil
}

// IdempotencyKey returns "<slug>/<key>", or "<slug>/<key>@<offset>" when ev is non-nil
// (docs/engine.md#processors). It is unique within one stream only: use it for the
// IdempotencyKey of an event the processor appends to its own stream, never for a service
// outside the store, where two streams (and a stream created again at the same path) would hand
// over the same key. For those, use [Contract.EffectKey] (docs/engine.md#effect-keys).
func (c *Contract[S]) IdempotencyKey(key string, ev *Event) string {
	if ev == nil {
		return c.cfg.Slug + "/" + key
	}
	return fmt.Sprintf("%s/%s@%d", c.cfg.Slug, key, ev.Offset)
}

// EffectKey returns the key to hand a service outside the store (a payment provider's
// Idempotency-Key, a mail sender's message id) for the effect name of event ev:
//
//	<stream path>#<slug>/<name>@<offset>@<createdAt>
//
// for example "/carts/c1#checkout/charge@3@2026-12-04T20:13:18.123Z" (docs/engine.md#effect-keys).
// A retried unit runs the effect again with the same key, so the service can dedupe it; the
// path keeps two streams apart, and the event's commit time keeps a stream deleted and created
// again at the same path (whose offsets restart at 1) from repeating an old key. The key is the
// same on every node and after every restart, because it is made of the event alone.
//
// ev must be the event being processed (ProcessEventArgs.Event, non-nil: the eventless at-head
// pass has no event to key an effect by; an effect decided there is keyed by the event that
// decided it). For nil it returns "", which no service should accept as a key.
func (c *Contract[S]) EffectKey(name string, ev *Event) string {
	if ev == nil {
		return ""
	}
	return ev.Path + "#" + c.cfg.Slug + "/" + name + "@" + strconv.FormatInt(ev.Offset, 10) + "@" + ev.CreatedAt
}

func cloneStrings(s []string) []string {
	if s == nil {
		return nil
	}
	return append([]string{}, s...)
}

// quoteJSON renders s as a JSON string (quoted and escaped like JSON.stringify, without HTML
// escaping).
func quoteJSON(s string) string { return rawjson.Quote(s) }

// decodeJSONNumber decodes JSON for the validator, which wants numbers as json.Number.
func decodeJSONNumber(raw []byte) (any, error) { return rawjson.DecodeNumbers(raw) }
