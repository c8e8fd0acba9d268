package stream

import (
	"errors"
	"sync/atomic"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/rawjson"
)

// AppendCheck inspects the durable events of an append to path before anything is written; an
// error refuses the whole append with that error (docs/store.md#refusing-invalid-events). It runs
// outside the writer, on the appender's goroutine, and must not block.
type AppendCheck func(path string, events []foldtype.Event) error

// appendCheckBox holds the store's installed check.
type appendCheckBox struct{ fn AppendCheck }

// appendChecks is the store's slot for its check.
type appendChecks = atomic.Pointer[appendCheckBox]

// SetAppendCheck installs check, run on every event append (Append, a processor's own appends)
// and every JSON protocol append (AppendRecord; each message as the event it becomes), and
// returns a function that removes it again. One check is installed at a time: the last one set
// wins. Ephemeral events are not checked.
func (e *Events) SetAppendCheck(check AppendCheck) (remove func()) {
	s := e.s
	box := &appendCheckBox{fn: check}
	s.check.Store(box)
	return func() { s.check.CompareAndSwap(box, nil) }
}

// checkInputs runs the installed check on the durable events among inputs. The check sees only
// those; the violations its refusal lists are renumbered to the inputs' own places in the batch
// (foldtype.Violation.Index), so a writer finds each event where it put it.
func (s *Store) checkInputs(path string, inputs []foldtype.EventInput) error {
	box := s.check.Load()
	if box == nil || box.fn == nil {
		return nil
	}
	var (
		evs   []foldtype.Event
		place []int // place[i] is the index in inputs of evs[i]
	)
	for i, in := range inputs {
		if !in.Ephemeral {
			evs = append(evs, foldtype.Event{Path: path, Type: in.Type, Payload: in.Payload, Metadata: in.Metadata})
			place = append(place, i)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	err := box.fn(path, evs)
	if len(evs) < len(inputs) {
		renumberViolations(err, place)
	}
	return err
}

// renumberViolations maps the violation indices of err (a check's refusal) through place.
func renumberViolations(err error, place []int) {
	var fe *foldtype.Error
	if !errors.As(err, &fe) {
		return
	}
	vs, ok := fe.Data[foldtype.DataViolations].([]foldtype.Violation)
	if !ok {
		return
	}
	out := make([]foldtype.Violation, len(vs))
	for i, v := range vs {
		if v.Index >= 0 && v.Index < len(place) {
			v.Index = place[v.Index]
		}
		out[i] = v
	}
	fe.Data[foldtype.DataViolations] = out
}

// checkMessages runs the installed check on JSON protocol messages, each as the event it becomes.
func (s *Store) checkMessages(path string, msgs []rawjson.Message) error {
	box := s.check.Load()
	if box == nil || box.fn == nil || len(msgs) == 0 {
		return nil
	}
	evs := make([]foldtype.Event, len(msgs))
	for i := range msgs {
		evs[i] = eventOf(path, 0, 0, &msgs[i], msgs[i].Raw)
	}
	return box.fn(path, evs)
}
