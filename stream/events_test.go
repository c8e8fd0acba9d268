package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/feeds"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

func TestAppendAssignsOffsetsAndCreatesStream(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	got := mustAppend(t, s, "/a", ev("x"), foldtype.EventInput{Type: "y", Payload: []byte(`{ "n" : 1 }`)})
	if want := []int64{1, 2}; !slices.Equal(offsets(got), want) {
		t.Fatalf("offsets: got %v, want %v", offsets(got), want)
	}
	if got[1].Path != "/a" || string(got[1].Payload) != `{"n":1}` || got[1].CreatedAt != "2035-01-01T00:00:00.000Z" {
		t.Fatalf("receipt: got %+v", got[1])
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams WHERE path = '/a' AND content_type = 'application/json'`); n != 1 {
		t.Fatalf("streams rows: got %d, want 1", n)
	}
	stored := storedMessages(t, s)
	if len(stored) != 2 || stored[1].Offset != 2 {
		t.Fatalf("stored: got %+v, want offsets 1 and 2", stored)
	}
	body, start := stored[1].Body, stored[1].RecordStart
	if want := `{"type":"y","payload":{"n":1},"createdAt":"2035-01-01T00:00:00.000Z"}`; body != want {
		t.Fatalf("stored body: got %s, want %s", body, want)
	}
	if start != 0 {
		t.Fatalf("record_start: got %d, want 0 (the batch's after)", start)
	}
	p := mustRead(t, s, "/a", 0, 0, readOptions{})
	if len(p.Events) != 2 || p.Events[1].Type != "y" || p.Events[1].Offset != 2 || p.Events[1].Path != "/a" {
		t.Fatalf("read back: got %+v", p.Events)
	}
}

func TestAppendEmptyTypeRefused(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	_, err := s.Events().Stream("/a").Append(context.Background(), ev("ok"), ev("  "))
	if !errors.Is(err, foldtype.ErrInvalidEvent) || err.Error() != "every event needs a non-empty type" {
		t.Fatalf("got %v, want the empty-type error", err)
	}
	if n := len(storedMessages(t, s)); n != 0 {
		t.Fatalf("rows: got %d, want 0", n)
	}
}

func TestAppendEventTooLarge(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	big := foldtype.JSON(map[string]string{"s": strings.Repeat("x", MaxEventBytes)})
	for _, e := range []bool{false, true} {
		_, err := s.Events().Stream("/a").Append(context.Background(), foldtype.EventInput{Type: "big", Payload: big, Ephemeral: e})
		if !errors.Is(err, foldtype.ErrEventTooLarge) {
			t.Fatalf("ephemeral=%v: got %v, want EVENT_TOO_LARGE", e, err)
		}
	}
}

// read is durable-only by default; with IncludeEphemeral the ring merges under the log's
// proof; a cut page carries only the ephemerals inside its span.
// S-04 (docs/engine.md#acceptance-cases).
func TestReadEphemeralMerge(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	mustAppend(t, s, "/a", ev("d"), eph("e"), ev("d")) // 1 d, 2 e, 3 d
	mustAppend(t, s, "/a", eph("e"))                   // 4 e (beyond the mark 3)
	p := mustRead(t, s, "/a", 0, 0, readOptions{})
	if want := []int64{1, 3}; !slices.Equal(offsets(p.Events), want) || p.ScannedThroughOffset != 3 || !p.AtHead {
		t.Fatalf("default read: got %v scanned %d atHead %v, want %v scanned 3 at head", offsets(p.Events), p.ScannedThroughOffset, p.AtHead, want)
	}
	p = mustRead(t, s, "/a", 0, 0, readOptions{IncludeEphemeral: true})
	if want := []int64{1, 2, 3, 4}; !slices.Equal(offsets(p.Events), want) || p.ScannedThroughOffset != 3 {
		t.Fatalf("with ephemerals: got %v scanned %d, want %v scanned 3", offsets(p.Events), p.ScannedThroughOffset, want)
	}
	// A page cut by its limit (1 row) proves (0,1]: no ephemeral from outside that span.
	p = mustRead(t, s, "/a", 0, 1, readOptions{IncludeEphemeral: true})
	if want := []int64{1}; !slices.Equal(offsets(p.Events), want) || p.AtHead || p.ScannedThroughOffset != 1 {
		t.Fatalf("cut page: got %v scanned %d atHead %v, want [1] scanned 1 not at head", offsets(p.Events), p.ScannedThroughOffset, p.AtHead)
	}
	p = mustRead(t, s, "/a", 1, 1, readOptions{IncludeEphemeral: true})
	if want := []int64{2, 3, 4}; !slices.Equal(offsets(p.Events), want) || !p.AtHead {
		t.Fatalf("second page: got %v atHead %v, want %v at head", offsets(p.Events), p.AtHead, want)
	}
}

// a refused batch leaves no phantom in the ring; the ring is bounded to 1 MiB oldest first;
// an oversize ephemeral is kept alone.
// S-05 (docs/engine.md#acceptance-cases).
func TestEphemeralRing(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	mustAppend(t, s, "/a", ev("d")) // 1
	_, err := s.Events().Stream("/a").Append(context.Background(), eph("phantom"), foldtype.EventInput{Type: "d", Offset: 99})
	if !errors.Is(err, foldtype.ErrOffsetConflict) {
		t.Fatalf("got %v, want OFFSET_CONFLICT", err)
	}
	p := mustRead(t, s, "/a", 0, 0, readOptions{IncludeEphemeral: true})
	if want := []int64{1}; !slices.Equal(offsets(p.Events), want) {
		t.Fatalf("after a refused batch: got %v, want %v (no phantom)", offsets(p.Events), want)
	}
	// The refused batch burnt no offset either.
	if got := mustAppend(t, s, "/a", eph("e")); got[0].Offset != 2 {
		t.Fatalf("next offset: got %d, want 2", got[0].Offset)
	}
	// Fill well past 1 MiB with 10 KiB ephemerals: the ring keeps the newest ~1 MiB.
	chunk := foldtype.JSON(map[string]string{"s": strings.Repeat("x", 10<<10)})
	for range 200 {
		mustAppend(t, s, "/a", foldtype.EventInput{Type: "chunk", Payload: chunk, Ephemeral: true})
	}
	ring := s.ringSnapshot(streamIDOf(t, s, "/a"))
	total := 0
	for _, e := range ring {
		total += eventBytes(e)
	}
	if total > EphemeralRingBytes || total < EphemeralRingBytes-(11<<10) {
		t.Fatalf("ring bytes: got %d, want just under %d", total, EphemeralRingBytes)
	}
	if last := ring[len(ring)-1].Offset; last != 202 {
		t.Fatalf("newest ring offset: got %d, want 202", last)
	}
	if first := ring[0].Offset; first <= 3 {
		t.Fatalf("oldest ring offset: got %d, want the oldest dropped", first)
	}
	huge := foldtype.JSON(map[string]string{"s": strings.Repeat("y", 2<<20)})
	mustAppend(t, s, "/a", foldtype.EventInput{Type: "huge", Payload: huge, Ephemeral: true})
	ring = s.ringSnapshot(streamIDOf(t, s, "/a"))
	if len(ring) != 1 || ring[0].Type != "huge" {
		t.Fatalf("oversize ephemeral: got %d ring events, want it kept alone", len(ring))
	}
}

// an empty append is a no-op; append never prepends a wake record.
// S-06 (docs/engine.md#acceptance-cases).
func TestEmptyAppendAndNoWakeOnAppend(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	got, err := s.Events().Stream("/a").Append(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("empty append: got %v, %v", got, err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM streams`); n != 0 {
		t.Fatalf("streams after an empty append: got %d, want 0", n)
	}
	if got := mustAppend(t, s, "/a", ev("x")); got[0].Offset != 1 || got[0].Type != "x" {
		t.Fatalf("first append: got %+v, want x@1 with no wake record before it", got[0])
	}
	p := mustRead(t, s, "/a", 0, 0, readOptions{})
	if len(p.Events) != 1 {
		t.Fatalf("log: got %d events, want 1", len(p.Events))
	}
}

// the birth batch is created@1 + woken@2 in one batch; later incarnations append one woken
// with the reason; a second wake in the same incarnation appends nothing.
// S-07 (docs/engine.md#acceptance-cases).
func TestWakeRecords(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/w.db"
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	birth, err := s.Events().Wake(ctx, "/w", WakeRequest)
	if err != nil {
		t.Fatal(err)
	}
	if len(birth) != 2 || birth[0].Type != CreatedType || birth[0].Offset != 1 || birth[1].Type != WokenType || birth[1].Offset != 2 {
		t.Fatalf("birth: got %+v", birth)
	}
	if got, want := string(birth[1].Payload), `{"incarnation":1,"reason":"request"}`; got != want {
		t.Fatalf("woken payload: got %s, want %s", got, want)
	}
	if got, want := string(birth[0].Payload), `{"path":"/w"}`; got != want {
		t.Fatalf("created payload: got %s, want %s", got, want)
	}
	var starts []int64
	for _, m := range storedMessages(t, s) {
		starts = append(starts, m.RecordStart)
	}
	if !slices.Equal(starts, []int64{0, 0}) {
		t.Fatalf("record starts: got %v, want one batch [0 0]", starts)
	}
	again, err := s.Events().Wake(ctx, "/w", WakeRequest)
	if err != nil || len(again) != 0 {
		t.Fatalf("second wake in one incarnation: got %v, %v; want nothing", again, err)
	}
	mustAppend(t, s, "/w", ev("x")) // 3
	s.Close(context.Background())

	s2, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	woke, err := s2.Events().Wake(ctx, "/w", WakeAlarm)
	if err != nil {
		t.Fatal(err)
	}
	if len(woke) != 1 || woke[0].Offset != 4 || string(woke[0].Payload) != `{"incarnation":2,"reason":"alarm"}` {
		t.Fatalf("second incarnation: got %+v", woke)
	}
	if woke[0].Source == nil || !woke[0].Source.Platform {
		t.Fatalf("wake source: got %+v, want platform", woke[0].Source)
	}
}

// an ephemeral-only append writes nothing and runs no SQL.
// S-09 (docs/engine.md#acceptance-cases).
func TestEphemeralOnlyRunsNoSQL(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	mustAppend(t, s, "/a", ev("d"))
	before := s.savepoints()
	got := mustAppend(t, s, "/a", eph("e"), eph("e"))
	if want := []int64{2, 3}; !slices.Equal(offsets(got), want) {
		t.Fatalf("offsets: got %v, want %v", offsets(got), want)
	}
	if after := s.savepoints(); after != before {
		t.Fatalf("savepoints: got %d, want %d (no SQL)", after, before)
	}
	if n := len(storedMessages(t, s)); n != 1 {
		t.Fatalf("rows: got %d, want 1", n)
	}
	if info, err := s.Protocol().HeadStream(context.Background(), "/a"); err != nil || info.Tail != 1 {
		t.Fatalf("durable mark: got %d (%v), want 1", info.Tail, err)
	}
}

// offsets are reused across incarnations: dead ephemerals 4 and 5 are reused by woken@4 and
// a durable @5.
// S-10 (docs/engine.md#acceptance-cases).
func TestOffsetsReusedAcrossIncarnations(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/r.db"
	ctx := context.Background()
	s, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Wake(ctx, "/r", WakeRequest); err != nil { // created@1, woken@2
		t.Fatal(err)
	}
	mustAppend(t, s, "/r", ev("d"))            // 3
	mustAppend(t, s, "/r", eph("e"), eph("e")) // 4, 5: memory only
	s.Close(context.Background())

	s2, err := openStore(path, Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	woke, err := s2.Events().Wake(ctx, "/r", WakeRequest)
	if err != nil {
		t.Fatal(err)
	}
	d := mustAppend(t, s2, "/r", ev("d"))
	if woke[0].Offset != 4 || d[0].Offset != 5 {
		t.Fatalf("reused offsets: got woken@%d d@%d, want woken@4 d@5", woke[0].Offset, d[0].Offset)
	}
}

// the read proof stops at the durable mark, whatever ephemerals took offsets above it.
// S-11 (docs/engine.md#acceptance-cases).
func TestReadProofStopsAtDurableMark(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	mustAppend(t, s, "/a", ev("d"), ev("d")) // 1, 2
	mustAppend(t, s, "/a", eph("e"))         // 3
	for _, opts := range []readOptions{{}, {IncludeEphemeral: true}} {
		p := mustRead(t, s, "/a", 0, 0, opts)
		if p.ScannedThroughOffset != 2 || !p.AtHead {
			t.Fatalf("%+v: got scanned %d atHead %v, want 2 at head", opts, p.ScannedThroughOffset, p.AtHead)
		}
		p = mustRead(t, s, "/a", 2, 0, opts)
		if p.ScannedThroughOffset != 2 || !p.AtHead {
			t.Fatalf("%+v from 2: got scanned %d, want 2", opts, p.ScannedThroughOffset)
		}
	}
	// A mixed batch's through is the mark: durable 4, ephemeral 5 → mark 5.
	mustAppend(t, s, "/a", ev("d"), eph("e"))
	if p := mustRead(t, s, "/a", 0, 0, readOptions{}); p.ScannedThroughOffset != 5 {
		t.Fatalf("after a mixed batch: got scanned %d, want 5", p.ScannedThroughOffset)
	}
	// Asking beyond the head never proves less than after.
	if p := mustRead(t, s, "/a", 9, 0, readOptions{}); p.ScannedThroughOffset != 9 || !p.AtHead || len(p.Events) != 0 {
		t.Fatalf("read after 9: got %+v", p)
	}
	// A missing stream reads as empty at head.
	if p := mustRead(t, s, "/none", 0, 0, readOptions{}); p.ScannedThroughOffset != 0 || !p.AtHead || len(p.Events) != 0 {
		t.Fatalf("missing stream: got %+v", p)
	}
}

func TestReadLimitClampAndBudget(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	in := make([]foldtype.EventInput, 1005)
	for i := range in {
		in[i] = ev("d")
	}
	mustAppend(t, s, "/a", in...)
	for _, c := range []struct {
		limit, want int
		atHead      bool
	}{{0, 500, false}, {-3, 500, false}, {1, 1, false}, {5000, 1000, false}} {
		p := mustRead(t, s, "/a", 0, c.limit, readOptions{})
		if len(p.Events) != c.want || p.AtHead != c.atHead || p.ScannedThroughOffset != int64(c.want) {
			t.Errorf("limit %d: got %d events scanned %d atHead %v, want %d", c.limit, len(p.Events), p.ScannedThroughOffset, p.AtHead, c.want)
		}
	}
	// Byte budget (lowered from 8 MiB to 8 KiB to keep the test fast): three 3 KiB events → a
	// page of two, cut, not at head.
	s2, _ := setup(t)
	s2.ev.readBudget = 8 << 10
	big := foldtype.JSON(map[string]string{"s": strings.Repeat("x", 3<<10)})
	for range 3 {
		mustAppend(t, s2, "/b", foldtype.EventInput{Type: "big", Payload: big})
	}
	p := mustRead(t, s2, "/b", 0, 10, readOptions{})
	if len(p.Events) != 2 || p.AtHead || p.ScannedThroughOffset != 2 {
		t.Fatalf("budget: got %d events scanned %d atHead %v, want 2, 2, false", len(p.Events), p.ScannedThroughOffset, p.AtHead)
	}
	p = mustRead(t, s2, "/b", 2, 10, readOptions{})
	if len(p.Events) != 1 || !p.AtHead || p.ScannedThroughOffset != 3 {
		t.Fatalf("budget page 2: got %d events scanned %d atHead %v", len(p.Events), p.ScannedThroughOffset, p.AtHead)
	}
}

// idempotency: same key and body echo the existing event; a different body refuses the whole
// batch with the spec's message and existingOffset.
// S-13 (docs/engine.md#acceptance-cases).
func TestIdempotency(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	first := mustAppend(t, s, "/a", foldtype.EventInput{Type: "t", Payload: []byte(`{"a":1,"b":{"c":2,"d":3}}`), IdempotencyKey: "k"})
	echo := mustAppend(t, s, "/a", ev("before"), foldtype.EventInput{Type: "t", Payload: []byte(`{"b":{"d":3,"c":2},"a":1}`), IdempotencyKey: "k"})
	if echo[1].Offset != 1 || echo[1].CreatedAt != first[0].CreatedAt || echo[0].Offset != 2 {
		t.Fatalf("echo: got %+v", echo)
	}
	_, err := s.Events().Stream("/a").Append(context.Background(), ev("fresh"), foldtype.EventInput{Type: "t", Payload: []byte(`{"a":2}`), IdempotencyKey: "k"})
	var ce *foldtype.Error
	if !errors.As(err, &ce) || ce.Code != foldtype.CodeIdempotencyConflict {
		t.Fatalf("conflict: got %v, want IDEMPOTENCY_CONFLICT", err)
	}
	if want := `idempotency key "k" already names a different event at offset 1`; ce.Message != want {
		t.Fatalf("message: got %q, want %q", ce.Message, want)
	}
	if ce.Data["existingOffset"] != int64(1) {
		t.Fatalf("data: got %v, want existingOffset 1", ce.Data)
	}
	if n := len(storedMessages(t, s)); n != 2 {
		t.Fatalf("rows: got %d, want 2 (the refused batch wrote nothing)", n)
	}
	// Metadata on one side only is a different event.
	_, err = s.Events().Stream("/a").Append(context.Background(), foldtype.EventInput{Type: "t", Payload: []byte(`{"a":1,"b":{"c":2,"d":3}}`), Metadata: []byte(`{}`), IdempotencyKey: "k"})
	if !errors.Is(err, foldtype.ErrIdempotencyConflict) {
		t.Fatalf("metadata on one side: got %v, want IDEMPOTENCY_CONFLICT", err)
	}
	// Keys are per stream.
	if got := mustAppend(t, s, "/b", foldtype.EventInput{Type: "other", IdempotencyKey: "k"}); got[0].Offset != 1 {
		t.Fatalf("key on another stream: got %+v", got)
	}
}

// a duplicate key within one batch yields one row and two receipts.
// S-14 (docs/engine.md#acceptance-cases).
func TestDuplicateKeyInBatch(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	in := foldtype.EventInput{Type: "t", Payload: []byte(`{"n":1}`), IdempotencyKey: "dup"}
	got := mustAppend(t, s, "/a", in, in)
	if len(got) != 2 || got[0].Offset != 1 || got[1].Offset != 1 {
		t.Fatalf("receipts: got %v, want [1 1]", offsets(got))
	}
	if n := len(storedMessages(t, s)); n != 1 {
		t.Fatalf("rows: got %d, want 1", n)
	}
	other := in
	other.Payload = []byte(`{"n":2}`)
	_, err := s.Events().Stream("/b").Append(context.Background(), in, other)
	if !errors.Is(err, foldtype.ErrIdempotencyConflict) {
		t.Fatalf("in-batch conflict: got %v", err)
	}
}

// the offset precondition.
// S-15 (docs/engine.md#acceptance-cases).
func TestExpectedOffset(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	mustAppend(t, s, "/a", ev("d"), ev("d"), ev("d")) // 1..3
	_, err := s.Events().Stream("/a").Append(context.Background(), foldtype.EventInput{Type: "d", Offset: 2})
	var ce *foldtype.Error
	if !errors.As(err, &ce) || ce.Code != foldtype.CodeOffsetConflict {
		t.Fatalf("got %v, want OFFSET_CONFLICT", err)
	}
	if ce.Data["expected"] != int64(2) || ce.Data["actual"] != int64(4) || ce.Message != "expected offset 2, but the next offset is 4" {
		t.Fatalf("conflict: got %q %v", ce.Message, ce.Data)
	}
	got := mustAppend(t, s, "/a", foldtype.EventInput{Type: "d", Offset: 4}, foldtype.EventInput{Type: "d", Offset: 5, IdempotencyKey: "k"})
	if want := []int64{4, 5}; !slices.Equal(offsets(got), want) {
		t.Fatalf("sequential expectations: got %v, want %v", offsets(got), want)
	}
	// A mismatch later in the batch refuses the whole batch.
	if _, err := s.Events().Stream("/a").Append(context.Background(), foldtype.EventInput{Type: "d", Offset: 6}, foldtype.EventInput{Type: "d", Offset: 8}); !errors.Is(err, foldtype.ErrOffsetConflict) {
		t.Fatalf("second expectation: got %v", err)
	}
	if n := len(storedMessages(t, s)); n != 5 {
		t.Fatalf("rows: got %d, want 5", n)
	}
	// A dedupe hit ignores the offset it expected.
	again := mustAppend(t, s, "/a", foldtype.EventInput{Type: "d", Offset: 77, IdempotencyKey: "k"})
	if again[0].Offset != 5 {
		t.Fatalf("dedupe: got offset %d, want 5", again[0].Offset)
	}
}

func TestMessagesDecodeAsEvents(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	// A stream written by the protocol side: raw JSON messages, one not JSON at all.
	err := s.k.Write(ctx, func(tx *kernel.Tx) error {
		res, err := txExec(tx, `INSERT INTO streams(path, content_type, created_ms, last_access_ms) VALUES ('/m', 'application/json', 0, 0)`)
		if err != nil {
			return err
		}
		id, _ := res.LastInsertId()
		return insertRawRecord(tx, id, 0, 1000, `{"type":"t","payload":{"n":1}}`, `[1,2]`, `{"type":5}`, `not json`)
	})
	if err != nil {
		t.Fatal(err)
	}
	p := mustRead(t, s, "/m", 0, 3, readOptions{})
	got := make([]string, len(p.Events))
	for i, e := range p.Events {
		got[i] = fmt.Sprintf("%s %s %s", e.Type, e.Payload, e.CreatedAt)
	}
	want := []string{
		`t {"n":1} 1970-01-01T00:00:01.000Z`,
		MessageType + ` {"value":[1,2]} 1970-01-01T00:00:01.000Z`,
		MessageType + ` {"value":{"type":5}} 1970-01-01T00:00:01.000Z`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded:\n got %q\nwant %q", got, want)
	}
	_, err = s.readEvents(ctx, "/m", 3, 10, readOptions{})
	var ce *foldtype.Error
	if !errors.As(err, &ce) || ce.Code != foldtype.CodeEventUnreadable || ce.Data["offset"] != int64(4) {
		t.Fatalf("unreadable: got %v, want EVENT_UNREADABLE {offset 4}", err)
	}
}

func TestAppendRefusesNonJSONAndClosedStreams(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
		_, err := txExec(tx, `INSERT INTO streams(path, content_type, created_ms, last_access_ms, closed) VALUES ('/bytes', 'text/plain', 0, 0, 0), ('/closed', 'application/json', 0, 0, 1)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/bytes").Append(context.Background(), ev("x")); !errors.Is(err, foldtype.ErrInvalidEvent) {
		t.Fatalf("text stream: got %v, want INVALID_EVENT", err)
	}
	if _, err := s.Events().Stream("/closed").Append(context.Background(), ev("x")); !errors.Is(err, foldtype.ErrStreamClosed) {
		t.Fatalf("closed stream: got %v, want STREAM_CLOSED", err)
	}
	// A stream the writer has cached, closed afterwards by the protocol side, refuses too.
	mustAppend(t, s, "/later", ev("x"))
	if _, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "/later", Close: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/later").Append(context.Background(), ev("y")); !errors.Is(err, foldtype.ErrStreamClosed) {
		t.Fatalf("cached stream closed later: got %v, want STREAM_CLOSED", err)
	}
	if n := len(storedMessages(t, s)); n != 1 {
		t.Fatalf("rows: got %d, want 1", n)
	}
}

// TestConcurrentAppendsAndReads: many appenders (single and grouped), readers and subscribers on a
// real file never see SQLITE_BUSY, every append lands exactly once in offset order, and each
// subscriber receives every consumed event over chained ranges.
func TestConcurrentAppendsAndReads(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	ctx := context.Background()
	const writers, perWriter = 16, 20
	// One subscriber per stream, checking that its ranges chain and its events stay in order.
	type chain struct {
		mu      sync.Mutex
		through int64
		events  int
		err     error
	}
	chains := make([]*chain, 4)
	subs := make([]*Subscription, 4)
	for i := range chains {
		c := &chain{through: -1}
		chains[i] = c
		sub, err := s.Events().Subscribe(fmt.Sprintf("/s%d", i), func(ctx context.Context, evs []foldtype.Event, r foldtype.ScannedRange) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.through >= 0 && r.After != c.through && c.err == nil {
				c.err = fmt.Errorf("range %v does not chain to %d", r, c.through)
			}
			for _, e := range evs {
				if e.Offset <= r.After || e.Offset > r.Through {
					c.err = fmt.Errorf("event %d outside %v", e.Offset, r)
				}
			}
			c.through = r.Through
			c.events += len(evs)
			return nil
		}, SubscribeOptions{Consumes: []string{"t"}})
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = sub
		defer sub.Close()
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*2)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/s%d", w%4)
			for i := range perWriter {
				in := []foldtype.EventInput{{Type: "t", IdempotencyKey: fmt.Sprintf("%d-%d", w, i)}}
				if i%5 == 0 {
					in = append(in, ev("t"), eph("e"))
				}
				if _, err := s.Events().Stream(path).Append(ctx, in...); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	stop := make(chan struct{})
	var rwg sync.WaitGroup
	for r := range 4 {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.readEvents(ctx, fmt.Sprintf("/s%d", r), 0, 100, readOptions{IncludeEphemeral: true}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent op: %v", err)
	}
	for i := range 4 {
		var all []foldtype.Event
		after := int64(0)
		for {
			p := mustRead(t, s, fmt.Sprintf("/s%d", i), after, 1000, readOptions{})
			all = append(all, p.Events...)
			if p.AtHead {
				break
			}
			after = p.ScannedThroughOffset
		}
		// 4 writers per stream × (20 keyed + 4 unkeyed) durables.
		if want := 4 * (perWriter + perWriter/5); len(all) != want {
			t.Fatalf("stream %d: got %d durables, want %d", i, len(all), want)
		}
		if err := subs[i].WaitDelivered(ctx); err != nil {
			t.Fatal(err)
		}
		c := chains[i]
		c.mu.Lock()
		if c.err != nil || c.events != len(all) {
			t.Fatalf("stream %d subscriber: %v, %d events pushed, want %d", i, c.err, c.events, len(all))
		}
		c.mu.Unlock()
		for j := 1; j < len(all); j++ {
			if all[j].Offset <= all[j-1].Offset {
				t.Fatalf("stream %d: offsets not increasing at %d", i, j)
			}
		}
	}
}

// appendEvents gives any write event semantics inside its own transaction: offsets continue the
// stream's sequence, idempotency holds, and subscribers get the commit.
func TestAppendEventsInsideAWrite(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	mustAppend(t, s, "/p", ev("first"))
	var rec recorder
	sub := subscribe(t, s, "/p", &rec, SubscribeOptions{})
	var got []foldtype.Event
	err := s.k.Write(ctx, func(tx *kernel.Tx) error {
		m, err := s.eventStream(tx, "/p")
		if err != nil {
			return err
		}
		prepared, err := prepareInputs([]foldtype.EventInput{{Type: "second", IdempotencyKey: "k"}, {Type: "second", IdempotencyKey: "k"}})
		if err != nil {
			return err
		}
		got, err = s.appendEvents(tx, m, prepared, false)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{2, 2}; !slices.Equal(offsets(got), want) {
		t.Fatalf("offsets: got %v, want %v", offsets(got), want)
	}
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.got(), []string{"(1,2][second@2]"}; !slices.Equal(got, want) {
		t.Fatalf("pushes: got %v, want %v", got, want)
	}
	if next := mustAppend(t, s, "/p", ev("third")); next[0].Offset != 3 {
		t.Fatalf("next offset: got %d, want 3", next[0].Offset)
	}
}

// An ephemeral-only append to a stream the protocol closed or soft-deleted must be refused like any
// other append. The bug: the writer's row cache still held the stream, and an ephemeral-only batch
// on a cached stream runs no SQL, so nothing re-checked it: the ephemerals took offsets past the
// closed stream's final tail and were pushed to its subscribers and waiters.
func TestEphemeralAppendRefusedAfterProtocolCloseOrSoftDelete(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	eph := foldtype.EventInput{Type: "e", Ephemeral: true}
	for _, p := range []string{"/closed", "/deleted"} {
		if _, err := s.Events().Stream(p).Append(ctx, foldtype.EventInput{Type: "d"}, eph); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/closed", Close: true}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/deleted"})
	if err := s.Protocol().DeleteStream(ctx, "/deleted"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]error{"/closed": foldtype.ErrStreamClosed, "/deleted": foldtype.ErrStreamGone} {
		if _, err := s.Events().Stream(p).Append(ctx, eph); !errors.Is(err, want) {
			t.Errorf("%s: ephemeral append got %v, want %v", p, err, want)
		}
	}
}

// The rings of all streams together hold at most Config.MaxEphemeralBytes: past it, the rings of
// the streams whose last ephemeral is oldest go whole, and the stream just appended to keeps its
// ring; a read of a stream whose ring went merges no ephemerals and fails nothing.
func TestEphemeralRingsOfAllStreamsStayUnderTheStoresCap(t *testing.T) {
	t.Parallel()
	const max = 256 << 10
	s, err := openStore(":memory:", Config{Logger: quietLog, MaxEphemeralBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	chunk := foldtype.JSON(map[string]string{"s": strings.Repeat("x", 10<<10)}) // ~10 KiB each
	const streams = 100
	for i := range streams {
		path := fmt.Sprintf("/r/%d", i)
		mustAppend(t, s, path, ev("d"))
		for range 3 {
			mustAppend(t, s, path, foldtype.EventInput{Type: "chunk", Payload: chunk, Ephemeral: true})
		}
	}
	rings := feeds.Rings(s.pushes)
	total, held, listed, accounted := rings.Bytes, rings.Held, rings.Listed, rings.Accounted
	if total > max || total != accounted {
		t.Fatalf("rings hold %d bytes (accounted %d), want at most %d and the two equal", total, accounted, max)
	}
	if held == streams || held != listed || held < 2 {
		t.Fatalf("%d rings held (%d listed) of %d streams, want the oldest dropped and the rest listed", held, listed, streams)
	}
	// The newest stream kept its whole ring; the oldest lost its own.
	last := fmt.Sprintf("/r/%d", streams-1)
	if p := mustRead(t, s, last, 0, 0, readOptions{IncludeEphemeral: true}); len(p.Events) != 4 {
		t.Fatalf("%s: got %d events, want its durable and its 3 ephemerals", last, len(p.Events))
	}
	if p := mustRead(t, s, "/r/0", 0, 0, readOptions{IncludeEphemeral: true}); len(p.Events) != 1 || p.Events[0].Ephemeral {
		t.Fatalf("/r/0: got %d events, want its durable alone (its ring dropped)", len(p.Events))
	}
	// A stream's own ring is bounded on its own, and the one appended to is never the one dropped.
	big := foldtype.JSON(map[string]string{"s": strings.Repeat("y", 300<<10)})
	mustAppend(t, s, "/r/big", ev("d"))
	mustAppend(t, s, "/r/big", foldtype.EventInput{Type: "big", Payload: big, Ephemeral: true})
	if ring := s.ringSnapshot(streamIDOf(t, s, "/r/big")); len(ring) != 1 {
		t.Fatalf("/r/big: got %d ring events, want its one ephemeral kept", len(ring))
	}
	// Deleting streams gives their bytes back.
	for i := range streams {
		if err := s.Protocol().DeleteStream(context.Background(), fmt.Sprintf("/r/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	bigID := streamIDOf(t, s, "/r/big")
	rings = feeds.Rings(s.pushes)
	if b, ok := rings.Rings[bigID]; !ok || rings.Accounted != b || rings.Listed != 1 {
		t.Fatalf("after deleting: %d bytes in %d rings, want only /r/big's", rings.Accounted, rings.Listed)
	}
}
