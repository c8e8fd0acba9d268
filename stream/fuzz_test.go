package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

var (
	fuzzStoreOnce sync.Once
	fuzzStore     *Store
	fuzzSeq       atomic.Int64
)

func sharedFuzzStore(t testing.TB) *Store {
	fuzzStoreOnce.Do(func() {
		s, err := openStore(":memory:", Config{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		fuzzStore = s
	})
	return fuzzStore
}

// FuzzAppend appends one or two arbitrary inputs to a fresh stream and checks the append's
// contract: a refusal is coded and leaves nothing behind; a success returns receipts in input
// order that read back equal, with offsets from 1.
func FuzzAppend(f *testing.F) {
	f.Add("t", []byte(`{"n":1}`), "", int64(0), false, "u", false)
	f.Add("t", []byte(`{"n":1}`), "k", int64(1), false, "t", true)
	f.Add(" ", []byte(``), "", int64(0), false, "u", false)
	f.Add("t", []byte(`{"a":`), "", int64(0), true, "u", false)
	f.Add("t", []byte(`null`), "k", int64(7), false, "t", false)
	f.Fuzz(func(t *testing.T, typ string, payload []byte, key string, offset int64, ephemeral bool, typ2 string, dupe bool) {
		s := sharedFuzzStore(t)
		ctx := context.Background()
		path := fmt.Sprintf("/fuzz/%d", fuzzSeq.Add(1))
		in1 := foldtype.EventInput{Type: typ, Payload: payload, IdempotencyKey: key, Offset: offset, Ephemeral: ephemeral}
		in2 := foldtype.EventInput{Type: typ2, IdempotencyKey: key}
		if dupe {
			in2 = in1
			in2.Offset = 0
		}
		got, err := s.Events().Stream(path).Append(ctx, in1, in2)
		if err != nil {
			var ce *foldtype.Error
			if !errors.As(err, &ce) {
				t.Fatalf("uncoded refusal: %v", err)
			}
			switch ce.Code {
			case foldtype.CodeInvalidEvent, foldtype.CodeEventTooLarge, foldtype.CodeOffsetConflict, foldtype.CodeIdempotencyConflict:
			default:
				t.Fatalf("unexpected code %s: %v", ce.Code, err)
			}
			p, rerr := s.readEvents(ctx, path, 0, 10, readOptions{IncludeEphemeral: true})
			if rerr != nil || len(p.Events) != 0 {
				t.Fatalf("a refused batch left %d events (%v)", len(p.Events), rerr)
			}
			return
		}
		if len(got) != 2 {
			t.Fatalf("receipts: got %d, want 2", len(got))
		}
		if in1.Ephemeral && in2.Ephemeral {
			// An ephemeral-only batch never creates its stream: to the fresh path it is dropped,
			// its receipts at offset 0, and nothing is stored (docs/store.md).
			p, err := s.readEvents(ctx, path, 0, 10, readOptions{IncludeEphemeral: true})
			if got[0].Offset != 0 || got[1].Offset != 0 || err == nil && len(p.Events) != 0 {
				t.Fatalf("an ephemeral-only batch to a fresh path: receipts at %d, %d, %d events stored (%v); want it dropped",
					got[0].Offset, got[1].Offset, len(p.Events), err)
			}
			return
		}
		if got[0].Offset != 1 {
			t.Fatalf("first offset: got %d, want 1", got[0].Offset)
		}
		if offset != 0 && offset != 1 {
			t.Fatalf("expected offset %d accepted at 1", offset)
		}
		p, err := s.readEvents(ctx, path, 0, 10, readOptions{IncludeEphemeral: true})
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		byOffset := map[int64]foldtype.Event{}
		for _, e := range p.Events {
			byOffset[e.Offset] = e
		}
		for i, r := range got {
			back, ok := byOffset[r.Offset]
			if !ok {
				t.Fatalf("receipt %d (offset %d) not read back", i, r.Offset)
			}
			if back.Type != r.Type || !foldtype.SameIdempotentEvent(back, r.Input()) || back.Ephemeral != r.Ephemeral {
				t.Fatalf("receipt %d: read back %+v, receipt %+v", i, back, r)
			}
		}
		if dupe && key != "" && !ephemeral && got[1].Offset != got[0].Offset {
			t.Fatalf("duplicate keyed input: offsets %d and %d, want one", got[0].Offset, got[1].Offset)
		}
	})
}

// FuzzRead reads a fixed stream with arbitrary arguments and checks the proof rules of docs/store.md#reading.
func FuzzRead(f *testing.F) {
	f.Add(int64(0), 0, false)
	f.Add(int64(3), 2, true)
	f.Add(int64(-5), -1, true)
	f.Add(int64(1<<62), 5000, false)
	s, err := openStore(":memory:", Config{Logger: quietLog})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	// 1..3 durable, 4 ephemeral, 5 durable, 6 ephemeral (mark 6 — a mixed batch), 7 ephemeral.
	for _, in := range [][]foldtype.EventInput{{ev("d"), ev("d"), ev("d")}, {eph("e")}, {ev("d"), eph("e")}, {eph("e")}} {
		if _, err := s.Events().Stream("/r").Append(ctx, in...); err != nil {
			f.Fatal(err)
		}
	}
	const mark = 6
	f.Fuzz(func(t *testing.T, after int64, limit int, includeEph bool) {
		p, err := s.readEvents(ctx, "/r", after, limit, readOptions{IncludeEphemeral: includeEph})
		if err != nil {
			t.Fatal(err)
		}
		floor := max(after, 0)
		if p.ScannedThroughOffset < floor {
			t.Fatalf("scanned %d below after %d", p.ScannedThroughOffset, after)
		}
		if p.ScannedThroughOffset > max(floor, mark) {
			t.Fatalf("scanned %d beyond the durable mark %d", p.ScannedThroughOffset, mark)
		}
		durables := 0
		for i, e := range p.Events {
			if e.Offset <= floor {
				t.Fatalf("event at %d not after %d", e.Offset, after)
			}
			if i > 0 && e.Offset <= p.Events[i-1].Offset {
				t.Fatalf("events out of order")
			}
			if e.Ephemeral && !includeEph {
				t.Fatalf("ephemeral without IncludeEphemeral")
			}
			if !e.Ephemeral {
				durables++
				if e.Offset > p.ScannedThroughOffset {
					t.Fatalf("durable %d beyond the proof %d", e.Offset, p.ScannedThroughOffset)
				}
			} else if !p.AtHead && e.Offset > p.ScannedThroughOffset {
				t.Fatalf("ephemeral %d beyond a cut page's proof %d", e.Offset, p.ScannedThroughOffset)
			}
		}
		eff := limit
		if eff <= 0 {
			eff = DefaultReadLimit
		}
		if durables > min(eff, MaxReadLimit) {
			t.Fatalf("%d durables over the limit %d", durables, limit)
		}
		if p.AtHead && p.ScannedThroughOffset != max(floor, mark) {
			t.Fatalf("at head: scanned %d, want %d", p.ScannedThroughOffset, max(floor, mark))
		}
	})
}
