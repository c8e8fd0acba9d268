package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/testsupport"
)

// setupProto opens an in-memory store with a fake clock for the protocol view's tests.
func setupProto(t *testing.T) (*Store, *testsupport.FakeClock) {
	t.Helper()
	return setup(t)
}

func mustCreate(t *testing.T, s *Store, req CreateRequest) CreateResult {
	t.Helper()
	res, err := s.Protocol().CreateStream(context.Background(), req)
	if err != nil {
		t.Fatalf("create %s: %v", req.Path, err)
	}
	return res
}

func mustAppendRecord(t *testing.T, s *Store, req AppendRequest) AppendResult {
	t.Helper()
	res, err := s.Protocol().AppendRecord(context.Background(), req)
	if err != nil {
		t.Fatalf("append %s: %v", req.Path, err)
	}
	return res
}

func readAll(t *testing.T, s *Store, path string) string {
	t.Helper()
	res, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: path})
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(res.Body)
}

func kindOf(err error) foldtype.Code { return foldtype.CodeOf(err) }

func TestJSONOffsetsAndRecords(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "application/json"
	res := mustCreate(t, s, CreateRequest{Path: "j", ContentType: ct, Body: []byte(`[{"n":1},{"n":2}]`)})
	if res.Info.Tail != 2 {
		t.Fatalf("tail after create: got %d, want 2", res.Info.Tail)
	}
	a := mustAppendRecord(t, s, AppendRequest{Path: "j", ContentType: ct, Body: []byte(`{"n":3}`)})
	if a.Tail != 3 {
		t.Fatalf("tail after append: got %d, want 3", a.Tail)
	}
	if got, want := readAll(t, s, "j"), `[{"n":1},{"n":2},{"n":3}]`; got != want {
		t.Fatalf("read: got %s, want %s", got, want)
	}
	r, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: "j", After: 2})
	if err != nil || string(r.Body) != `[{"n":3}]` || r.Next != 3 || !r.UpToDate {
		t.Fatalf("read after 2: got %s next %d upToDate %v err %v", r.Body, r.Next, r.UpToDate, err)
	}
}

func TestByteReadsSliceRecordsAndChunk(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	mustCreate(t, s, CreateRequest{Path: "b", ContentType: "text/plain"})
	mustAppendRecord(t, s, AppendRequest{Path: "b", ContentType: "text/plain", Body: []byte("hello ")})
	mustAppendRecord(t, s, AppendRequest{Path: "b", ContentType: "text/plain", Body: []byte("world")})
	r, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: "b", After: 3, MaxBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	// The budget stops before the next record: the rest of the first one comes back.
	if string(r.Body) != "lo " || r.Next != 6 || r.UpToDate {
		t.Fatalf("got %q next %d upToDate %v, want \"lo \" 6 false", r.Body, r.Next, r.UpToDate)
	}
	r, err = s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: "b", After: 7, MaxBytes: 3})
	if err != nil || string(r.Body) != "orl" || r.Next != 10 || r.UpToDate {
		t.Fatalf("got %q next %d upToDate %v err %v, want \"orl\" 10", r.Body, r.Next, r.UpToDate, err)
	}
	r, err = s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: "b", After: 10})
	if err != nil || string(r.Body) != "d" || r.Next != 11 || !r.UpToDate {
		t.Fatalf("got %q next %d upToDate %v err %v", r.Body, r.Next, r.UpToDate, err)
	}
}

// TestProducerDecisionTable walks the producer rules of docs/store.md#idempotent-producers case by case on one stream.
func TestProducerDecisionTable(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "text/plain"
	mustCreate(t, s, CreateRequest{Path: "p", ContentType: ct})
	type step struct {
		name       string
		epoch, seq int64
		close      bool
		wantKind   foldtype.Code
		wantDup    bool
		wantSeq    int64
		wantEpoch  int64 // for stale epoch
		wantExpect int64 // for gaps
	}
	steps := []step{
		{name: "new producer seq>0 is a gap", epoch: 0, seq: 3, wantKind: foldtype.CodeSequenceGap, wantExpect: 0},
		{name: "new producer seq 0 accepted", epoch: 0, seq: 0, wantSeq: 0},
		{name: "next seq accepted", epoch: 0, seq: 1, wantSeq: 1},
		{name: "duplicate answers highest accepted", epoch: 0, seq: 0, wantDup: true, wantSeq: 1},
		{name: "gap", epoch: 0, seq: 5, wantKind: foldtype.CodeSequenceGap, wantExpect: 2},
		{name: "new epoch must start at 0", epoch: 1, seq: 1, wantKind: foldtype.CodeBadRequest},
		{name: "new epoch at 0 accepted", epoch: 1, seq: 0, wantSeq: 0},
		{name: "old epoch fenced", epoch: 0, seq: 2, wantKind: foldtype.CodeStaleEpoch, wantEpoch: 1},
		{name: "close by producer", epoch: 1, seq: 1, close: true, wantSeq: 1},
		{name: "close retried is a duplicate", epoch: 1, seq: 1, close: true, wantDup: true, wantSeq: 1},
		{name: "append after close", epoch: 1, seq: 2, wantKind: foldtype.CodeStreamClosed},
	}
	for _, st := range steps {
		body := []byte("x")
		res, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "p", ContentType: ct, Body: body, Close: st.close,
			Producer: &ProducerHeaders{ID: "w", Epoch: st.epoch, Seq: st.seq}})
		if st.wantKind != "" {
			if kindOf(err) != st.wantKind {
				t.Fatalf("%s: got %v, want code %s", st.name, err, st.wantKind)
			}
			if epoch, _ := EpochOf(err); st.wantKind == foldtype.CodeStaleEpoch && epoch != st.wantEpoch {
				t.Fatalf("%s: epoch got %d, want %d", st.name, epoch, st.wantEpoch)
			}
			if exp, got, _ := SequenceGapOf(err); st.wantKind == foldtype.CodeSequenceGap && (exp != st.wantExpect || got != st.seq) {
				t.Fatalf("%s: gap got %d/%d, want %d/%d", st.name, exp, got, st.wantExpect, st.seq)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if res.Duplicate != st.wantDup || res.Seq != st.wantSeq {
			t.Fatalf("%s: got dup %v seq %d, want dup %v seq %d", st.name, res.Duplicate, res.Seq, st.wantDup, st.wantSeq)
		}
	}
	// Accepted: seq 0, seq 1, epoch 1 seq 0, the close's x — four bytes.
	if got := readAll(t, s, "p"); got != "xxxx" {
		t.Fatalf("data: got %q, want xxxx", got)
	}
}

// TestRefusedJSONLeavesProducerState: invalid JSON after a valid producer header is refused and
// leaves producer state untouched, so the same seq succeeds next.
func TestRefusedJSONLeavesProducerState(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "application/json"
	mustCreate(t, s, CreateRequest{Path: "j", ContentType: ct})
	p := &ProducerHeaders{ID: "w", Epoch: 0, Seq: 0}
	if _, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "j", ContentType: ct, Body: []byte(`{`), Producer: p}); kindOf(err) != foldtype.CodeBadRequest {
		t.Fatalf("invalid JSON: got %v, want bad request", err)
	}
	res := mustAppendRecord(t, s, AppendRequest{Path: "j", ContentType: ct, Body: []byte(`[1,2]`), Producer: p})
	if res.Duplicate || res.Tail != 2 {
		t.Fatalf("got dup %v tail %d, want a fresh append to 2", res.Duplicate, res.Tail)
	}
}

func TestStreamSeqAndExpectedTail(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "text/plain"
	mustCreate(t, s, CreateRequest{Path: "s", ContentType: ct})
	mustAppendRecord(t, s, AppendRequest{Path: "s", ContentType: ct, Body: []byte("a"), StreamSeq: "09"})
	mustAppendRecord(t, s, AppendRequest{Path: "s", ContentType: ct, Body: []byte("b"), StreamSeq: "10"})
	if _, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "s", ContentType: ct, Body: []byte("c"), StreamSeq: "10"}); kindOf(err) != foldtype.CodeConflict {
		t.Fatalf("equal Stream-Seq: got %v, want conflict", err)
	}
	_, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "s", ContentType: ct, Body: []byte("c"), HasExpectedTail: true, ExpectedTail: 1})
	if tail, _ := TailOf(err); !errors.Is(err, foldtype.ErrOffsetConflict) || tail != 2 {
		t.Fatalf("stale expected tail: got %v, want OFFSET_CONFLICT at 2", err)
	}
	mustAppendRecord(t, s, AppendRequest{Path: "s", ContentType: ct, Body: []byte("c"), HasExpectedTail: true, ExpectedTail: 2})
}

func TestEventIdempotencyKeys(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "application/json"
	mustCreate(t, s, CreateRequest{Path: "e", ContentType: ct})
	ev := `{"type":"order.placed","payload":{"id":1},"idempotencyKey":"k1"}`
	mustAppendRecord(t, s, AppendRequest{Path: "e", ContentType: ct, Body: []byte(`[` + ev + `,{"type":"x"}]`)})
	// Retrying the same event (key order differs) is dropped; the other message is stored.
	res := mustAppendRecord(t, s, AppendRequest{Path: "e", ContentType: ct,
		Body: []byte(`[{"idempotencyKey":"k1","payload":{"id":1},"type":"order.placed"},{"type":"y"}]`)})
	if res.Tail != 3 {
		t.Fatalf("tail: got %d, want 3", res.Tail)
	}
	_, err := s.Protocol().AppendRecord(context.Background(), AppendRequest{Path: "e", ContentType: ct,
		Body: []byte(`{"type":"order.placed","payload":{"id":2},"idempotencyKey":"k1"}`)})
	if !errors.Is(err, foldtype.ErrIdempotencyConflict) {
		t.Fatalf("different event under the same key: got %v, want IDEMPOTENCY_CONFLICT", err)
	}
}

func TestForkSubOffsetsCompose(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "application/json"
	mustCreate(t, s, CreateRequest{Path: "src", ContentType: ct, Body: []byte(`[1,2,3,4]`)})
	f := mustCreate(t, s, CreateRequest{Path: "f1", ForkedFrom: "src", HasForkOffset: true, ForkOffset: 0, ForkSubOffset: 2})
	if f.Info.Tail != 2 || !f.Info.JSON {
		t.Fatalf("fork: tail %d json %v, want 2 true", f.Info.Tail, f.Info.JSON)
	}
	mustAppendRecord(t, s, AppendRequest{Path: "f1", ContentType: ct, Body: []byte(`9`)})
	if got := readAll(t, s, "f1"); got != `[1,2,9]` {
		t.Fatalf("fork read: got %s, want [1,2,9]", got)
	}
	mustCreate(t, s, CreateRequest{Path: "f2", ForkedFrom: "f1", HasForkOffset: true, ForkOffset: 0, ForkSubOffset: 1})
	if got := readAll(t, s, "f2"); got != `[1]` {
		t.Fatalf("fork of fork: got %s, want [1]", got)
	}
	if _, err := s.Protocol().CreateStream(context.Background(), CreateRequest{Path: "f3", ForkedFrom: "src", HasForkOffset: true, ForkOffset: 0, ForkSubOffset: 5}); kindOf(err) != foldtype.CodeBadRequest {
		t.Fatalf("overshooting sub-offset: got %v, want bad request", err)
	}

	mustCreate(t, s, CreateRequest{Path: "bsrc", ContentType: "text/plain", Body: []byte("abcdef")})
	mustCreate(t, s, CreateRequest{Path: "bf", ForkedFrom: "bsrc", HasForkOffset: true, ForkOffset: 0, ForkSubOffset: 3})
	mustAppendRecord(t, s, AppendRequest{Path: "bf", ContentType: "text/plain", Body: []byte("XY")})
	if got := readAll(t, s, "bf"); got != "abcXY" {
		t.Fatalf("byte fork: got %q, want abcXY", got)
	}
}

// TestSoftDeleteCascade: a source with forks is soft-deleted (gone) and collected with its
// soft-deleted ancestors when the last fork goes.
func TestSoftDeleteCascade(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "a", ContentType: "text/plain", Body: []byte("1")})
	mustCreate(t, s, CreateRequest{Path: "b", ForkedFrom: "a"})
	mustCreate(t, s, CreateRequest{Path: "c", ForkedFrom: "b"})
	if err := s.Protocol().DeleteStream(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Protocol().DeleteStream(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if _, err := s.Protocol().HeadStream(ctx, p); kindOf(err) != foldtype.CodeStreamGone {
			t.Fatalf("head %s: got %v, want gone", p, err)
		}
	}
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: "a", ContentType: "text/plain"}); kindOf(err) != foldtype.CodeConflict {
		t.Fatalf("re-create soft-deleted: got %v, want conflict", err)
	}
	if got := readAll(t, s, "c"); got != "1" {
		t.Fatalf("fork read through deleted ancestors: got %q, want 1", got)
	}
	if err := s.Protocol().DeleteStream(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if _, err := s.Protocol().HeadStream(ctx, p); kindOf(err) != foldtype.CodeStreamNotFound {
			t.Fatalf("head %s after cascade: got %v, want not found", p, err)
		}
	}
	if r := mustCreate(t, s, CreateRequest{Path: "a", ContentType: "text/plain"}); !r.Created || r.Info.Tail != 0 {
		t.Fatalf("re-create: got %+v, want a fresh empty stream", r)
	}
}

// TestSlidingTTL: reads and appends renew a sliding TTL, Head does not; an absolute expiry is
// never extended; an expired path can be re-created.
func TestSlidingTTL(t *testing.T) {
	t.Parallel()
	s, clk := setupProto(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "t", ContentType: "text/plain", HasTTL: true, TTLSeconds: 10})
	mustCreate(t, s, CreateRequest{Path: "x", ContentType: "text/plain", ExpiresAt: clk.Now().Add(15 * time.Second)})
	clk.Advance(8 * time.Second)
	if _, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "t", AtTail: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "x"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(8 * time.Second) // 16 s: t was read at 8 s, x expired at 15 s
	if _, err := s.Protocol().HeadStream(ctx, "t"); err != nil {
		t.Fatalf("t after renewal: %v", err)
	}
	if _, err := s.Protocol().HeadStream(ctx, "x"); kindOf(err) != foldtype.CodeStreamNotFound {
		t.Fatalf("x past its expiry: got %v, want not found", err)
	}
	mustAppendRecord(t, s, AppendRequest{Path: "t", ContentType: "text/plain", Close: true})
	clk.Advance(9 * time.Second)
	if _, err := s.Protocol().HeadStream(ctx, "t"); err != nil {
		t.Fatalf("t after close-only POST renewal: %v", err)
	}
	clk.Advance(2 * time.Second)
	if _, err := s.Protocol().HeadStream(ctx, "t"); kindOf(err) != foldtype.CodeStreamNotFound {
		t.Fatalf("t expired: got %v, want not found", err)
	}
	if r := mustCreate(t, s, CreateRequest{Path: "t", ContentType: "text/plain"}); !r.Created {
		t.Fatal("re-create after expiry: got 200, want 201")
	}
}

// TestAccessTimesOfExpiredStreamsAreSweptAndStillExpire: the in-memory read times of streams
// whose sliding TTL has passed are dropped once the map has grown past its sweep size, a stream
// read within its TTL keeps its entry, and a stream whose entry was dropped is still expired.
func TestAccessTimesOfExpiredStreamsAreSweptAndStillExpire(t *testing.T) {
	t.Parallel()
	s, clk := setupProto(t)
	ctx := context.Background()
	read := func(path string) {
		t.Helper()
		if _, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: path, AtTail: true}); err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
	}
	mustCreate(t, s, CreateRequest{Path: "/keep", ContentType: "text/plain", HasTTL: true, TTLSeconds: 100})
	for i := range 10 {
		p := fmt.Sprintf("/short/%d", i)
		mustCreate(t, s, CreateRequest{Path: p, ContentType: "text/plain", HasTTL: true, TTLSeconds: 10})
		clk.Advance(100 * time.Millisecond)
		read(p)
	}
	read("/keep")
	if n := AccessEntries(s, 0); n != 11 {
		t.Fatalf("%d access entries after reading 11 streams, want 11", n)
	}
	clk.Advance(11 * time.Second) // every /short stream is past its TTL; /keep is not
	mustCreate(t, s, CreateRequest{Path: "/late", ContentType: "text/plain", HasTTL: true, TTLSeconds: 10})
	AccessEntries(s, 8)
	read("/late") // a new entry in a map at its sweep size sweeps it
	if n := AccessEntries(s, 0); n != 2 {
		t.Fatalf("%d access entries after the sweep, want 2 (/keep and /late)", n)
	}
	read("/keep")
	if n := AccessEntries(s, 0); n != 2 {
		t.Fatalf("%d access entries after reading /keep again, want 2", n)
	}
	if _, err := s.Protocol().HeadStream(ctx, "/short/3"); kindOf(err) != foldtype.CodeStreamNotFound {
		t.Fatalf("/short/3 after its entry was swept: got %v, want not found", err)
	}
	clk.Advance(95 * time.Second) // /keep was last read 106 s after its creation, so it lives
	if _, err := s.Protocol().HeadStream(ctx, "/keep"); err != nil {
		t.Fatalf("/keep within its TTL of its last read: %v", err)
	}
}

// TestWatchWakesOnAppend: the Changed channel of a read closes at the next commit.
func TestWatchWakesOnAppend(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	mustCreate(t, s, CreateRequest{Path: "w", ContentType: "text/plain"})
	r, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: "w", Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	mustAppendRecord(t, s, AppendRequest{Path: "w", ContentType: "text/plain", Body: []byte("z")})
	select {
	case <-r.Changed:
	case <-time.After(5 * time.Second):
		t.Fatal("Changed did not close after an append")
	}
}

// TestCollectExpired: expired streams and soft-deleted sources without live forks are reclaimed;
// a live stream and a source still read by a live fork stay.
func TestCollectExpired(t *testing.T) {
	t.Parallel()
	s, clk := setupProto(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "/live", ContentType: "text/plain", Body: []byte("x")})
	mustCreate(t, s, CreateRequest{Path: "/ttl", ContentType: "text/plain", HasTTL: true, TTLSeconds: 5, Body: []byte("x")})
	mustCreate(t, s, CreateRequest{Path: "/src", ContentType: "text/plain", Body: []byte("x")})
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/src", HasTTL: true, TTLSeconds: 60})
	if err := s.Protocol().DeleteStream(ctx, "/src"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	n, err := s.Protocol().CollectExpired(ctx)
	if err != nil || n != 1 {
		t.Fatalf("first sweep: got %d, %v; want 1 (the TTL stream)", n, err)
	}
	if _, err := s.Protocol().HeadStream(ctx, "/src"); kindOf(err) != foldtype.CodeStreamGone {
		t.Fatalf("source with a live fork: got %v, want gone", err)
	}
	clk.Advance(time.Minute) // the fork expires, releasing the source
	n, err = s.Protocol().CollectExpired(ctx)
	if err != nil || n != 2 {
		t.Fatalf("second sweep: got %d, %v; want 2 (fork and source)", n, err)
	}
	if _, err := s.Protocol().HeadStream(ctx, "/live"); err != nil {
		t.Fatalf("live stream: %v", err)
	}
	var left int
	if err := s.rawQueryRow(`SELECT count(*) FROM streams`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 1 {
		t.Fatalf("rows left: got %d, want 1", left)
	}
}

// TestJSONBatchLimits: a large batch is one record (inserted many rows per statement); a batch over
// the message cap is refused as too large before it reaches the writer.
func TestJSONBatchLimits(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ct := "application/json"
	mustCreate(t, s, CreateRequest{Path: "/big", ContentType: ct})
	const n = 1234
	body := "[" + strings.Repeat("1,", n-1) + "1]"
	res := mustAppendRecord(t, s, AppendRequest{Path: "/big", ContentType: ct, Body: []byte(body)})
	if res.Tail != n {
		t.Fatalf("tail: got %d, want %d", res.Tail, n)
	}
	r, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: "/big", After: n - 2})
	if err != nil || string(r.Body) != "[1,1]" {
		t.Fatalf("read the batch's end: got %s, %v", r.Body, err)
	}
	over := "[" + strings.Repeat("1,", MaxMessagesPerRecord) + "1]"
	if _, err := splitJSON([]byte(over), false, nil); kindOf(err) != foldtype.CodeTooLarge {
		t.Fatalf("over the cap: got %v, want too large", err)
	}
}

// TestRecreatedPathStartsClean: a path deleted and created again (possibly under the same id)
// shows none of the old stream's data, producer state or Stream-Seq, to both views.
func TestRecreatedPathStartsClean(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	ct := "application/json"
	mustCreate(t, s, CreateRequest{Path: "/r", ContentType: ct, Body: []byte(`[1,2,3]`)})
	mustAppendRecord(t, s, AppendRequest{Path: "/r", ContentType: ct, Body: []byte(`4`), StreamSeq: "5",
		Producer: &ProducerHeaders{ID: "p", Epoch: 3, Seq: 0}})
	if err := s.Protocol().DeleteStream(ctx, "/r"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, CreateRequest{Path: "/r", ContentType: ct})
	res := mustAppendRecord(t, s, AppendRequest{Path: "/r", ContentType: ct, Body: []byte(`"a"`), StreamSeq: "1",
		Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 0}})
	if res.Tail != 1 || res.Duplicate {
		t.Fatalf("append to the new stream: got %+v, want a fresh append at 1", res)
	}
	if got := readAll(t, s, "/r"); got != `["a"]` {
		t.Fatalf("protocol read: got %s, want [\"a\"]", got)
	}
	page, err := s.readEvents(ctx, "/r", 0, 100, readOptions{})
	if err != nil || len(page.Events) != 1 || page.Events[0].Type != MessageType {
		t.Fatalf("event read: got %+v, %v; want one message event", page.Events, err)
	}
}

// TestForksInheritNoProducerOrStreamSeq: a fork starts without producer or Stream-Seq state, even
// when it splits a producer's batch.
func TestForksInheritNoProducerOrStreamSeq(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	ct := "application/json"
	mustCreate(t, s, CreateRequest{Path: "/src", ContentType: ct})
	for seq := range int64(3) {
		mustAppendRecord(t, s, AppendRequest{Path: "/src", ContentType: ct, Body: []byte(`[1,2]`), StreamSeq: fmt.Sprintf("%03d", seq),
			Producer: &ProducerHeaders{ID: "p", Epoch: 2, Seq: seq}})
	}
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/src", HasForkOffset: true, ForkOffset: 2, ForkSubOffset: 1})
	_, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/fork", ContentType: ct, Body: []byte(`9`), Producer: &ProducerHeaders{ID: "p", Epoch: 2, Seq: 3}})
	if exp, _, _ := SequenceGapOf(err); !errors.Is(err, foldtype.ErrSequenceGap) || exp != 0 {
		t.Fatalf("producer continuing on the fork: got %v, want a gap expecting seq 0", err)
	}
	res := mustAppendRecord(t, s, AppendRequest{Path: "/fork", ContentType: ct, Body: []byte(`9`), StreamSeq: "000",
		Producer: &ProducerHeaders{ID: "p", Epoch: 0, Seq: 0}})
	if res.Tail != 4 {
		t.Fatalf("fork tail: got %d, want 4 (1,2 inherited, 1 materialised, 9)", res.Tail)
	}
	if got := readAll(t, s, "/fork"); got != `[1,2,1,9]` {
		t.Fatalf("fork read: got %s, want [1,2,1,9]", got)
	}
}

// TestEventViewSeesProtocolChanges: the event view's cached rows never outlive a protocol close,
// delete or re-creation of the path.
func TestEventViewSeesProtocolChanges(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	if _, err := s.Events().Stream("/x").Append(ctx, foldtype.EventInput{Type: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Protocol().DeleteStream(ctx, "/x"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, CreateRequest{Path: "/x", ContentType: "text/plain"})
	if _, err := s.Events().Stream("/x").Append(ctx, foldtype.EventInput{Type: "b"}); err == nil {
		t.Fatal("event append to a re-created text stream: got nil error")
	}
	if _, err := s.Events().Stream("/y").Append(ctx, foldtype.EventInput{Type: "a"}); err != nil {
		t.Fatal(err)
	}
	mustAppendRecord(t, s, AppendRequest{Path: "/y", Close: true})
	if _, err := s.Events().Stream("/y").Append(ctx, foldtype.EventInput{Type: "b"}); foldtype.CodeOf(err) != foldtype.CodeStreamClosed {
		t.Fatalf("event append after a protocol close: got %v, want STREAM_CLOSED", err)
	}
	// Events and HTTP messages share one offset sequence.
	if _, err := s.Events().Stream("/z").Append(ctx, foldtype.EventInput{Type: "a"}, foldtype.EventInput{Type: "b"}); err != nil {
		t.Fatal(err)
	}
	res := mustAppendRecord(t, s, AppendRequest{Path: "/z", ContentType: "application/json", Body: []byte(`{"type":"c"}`)})
	if res.Tail != 3 {
		t.Fatalf("tail after two events and one message: got %d, want 3", res.Tail)
	}
	evs, err := s.Events().Stream("/z").Append(ctx, foldtype.EventInput{Type: "d"})
	if err != nil || evs[0].Offset != 4 {
		t.Fatalf("event after a message: got %+v, %v; want offset 4", evs, err)
	}
	// An ephemeral takes offset 5 without persisting; the next HTTP message lands after it.
	if evs, err = s.Events().Stream("/z").Append(ctx, foldtype.EventInput{Type: "e", Ephemeral: true}); err != nil || evs[0].Offset != 5 {
		t.Fatalf("ephemeral: got %+v, %v; want offset 5", evs, err)
	}
	res = mustAppendRecord(t, s, AppendRequest{Path: "/z", ContentType: "application/json", Body: []byte(`[7,8]`)})
	if res.Tail != 7 {
		t.Fatalf("tail after the ephemeral and two messages: got %d, want 7", res.Tail)
	}
	r, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "/z", After: 4})
	if err != nil || string(r.Body) != "[7,8]" || r.Next != 7 || !r.UpToDate {
		t.Fatalf("read across the ephemeral's gap: got %s next %d upToDate %v, %v", r.Body, r.Next, r.UpToDate, err)
	}
}

// The event view reads a JSON message's fields by their exact names, as a schema or the server's
// checks see them: a key that matches "type", "payload" or "source" only case-insensitively is an
// unknown member, never folded onto the field.
func TestEventViewReadsMessageFieldsByExactName(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "/m", ContentType: "application/json"})
	for _, body := range []string{
		`{"type":"t","payload":{"n":5},"PAYLOAD":{"n":-100}}`,
		`{"TYPE":"t","payload":{"n":1}}`,
		`{"type":"t","Source":{"platform":true}}`,
	} {
		mustAppendRecord(t, s, AppendRequest{Path: "/m", ContentType: "application/json", Body: []byte(body)})
	}
	p, err := s.readEvents(ctx, "/m", 0, 10, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(p.Events))
	for i, e := range p.Events {
		got[i] = fmt.Sprintf("%s %s %v", e.Type, e.Payload, e.Source != nil)
	}
	want := []string{
		`t {"n":5} false`,
		MessageType + ` {"value":{"TYPE":"t","payload":{"n":1}}} false`,
		`t  false`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("decoded:\n got %q\nwant %q", got, want)
	}
}

// A JSON message's idempotency key is its exact "idempotencyKey" member, the one the event view
// shows; a case variant is an unknown member and keys nothing.
func TestMessageIdempotencyKeyIsTheExactMember(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	mustCreate(t, s, CreateRequest{Path: "/k", ContentType: "application/json"})
	mustAppendRecord(t, s, AppendRequest{Path: "/k", ContentType: "application/json",
		Body: []byte(`{"type":"t","idempotencyKey":"a","IDEMPOTENCYKEY":"b"}`)})
	evs, err := s.Events().Stream("/k").Append(ctx, foldtype.EventInput{Type: "t", IdempotencyKey: "a"})
	if err != nil || evs[0].Offset != 1 {
		t.Fatalf("retry under key a: got %+v, %v; want the echo of offset 1", evs, err)
	}
	evs, err = s.Events().Stream("/k").Append(ctx, foldtype.EventInput{Type: "t", IdempotencyKey: "b"})
	if err != nil || evs[0].Offset != 2 {
		t.Fatalf("key b: got %+v, %v; want a fresh event at offset 2", evs, err)
	}
}

// An HTTP read of a JSON stream whose durable mark sits above its last entry (the batch ended with
// an ephemeral) must reach up-to-date. The bug: readJSON only called a page up to date when its
// last entry reached the tail, so a reader at offset 1 got an empty page with Next 1 and
// "not up to date" forever: catch-up loops spun and long-polls never waited.
func TestReadRecordsReachesTailAboveLastEntry(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	if _, err := s.Events().Stream("src").Append(ctx, foldtype.EventInput{Type: "d"}, foldtype.EventInput{Type: "e", Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	for _, after := range []int64{0, 1} {
		res, err := s.Protocol().ReadRecords(ctx, ReadRequest{Path: "src", After: after})
		if err != nil {
			t.Fatal(err)
		}
		if !res.UpToDate || res.Next != 2 {
			t.Errorf("read after %d: up to date %v, next %d; want true, 2", after, res.UpToDate, res.Next)
		}
	}
}

// A fork at the source's tail (the default fork point, and the Stream-Next-Offset a read at the
// head returns) must be accepted. The bug: the record-boundary check looked for an entry ending
// exactly at the fork offset, but an event batch that ends with an ephemeral moves the durable
// mark (streams.tail) to the ephemeral's offset, which has no entry, so forking such a stream at
// its tail failed with 400 "not a record boundary".
func TestForkAtTailAfterTrailingEphemeral(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	if _, err := s.Events().Stream("src").Append(ctx, foldtype.EventInput{Type: "d"}, foldtype.EventInput{Type: "e", Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	f := mustCreate(t, s, CreateRequest{Path: "f", ForkedFrom: "src"})
	if f.Info.Tail != 2 {
		t.Fatalf("fork tail: got %d, want 2", f.Info.Tail)
	}
	tail := readRecordsTail(t, s, "src")
	mustCreate(t, s, CreateRequest{Path: "g", ForkedFrom: "src", HasForkOffset: true, ForkOffset: tail})
	if _, err := s.Events().Stream("f").Append(ctx, foldtype.EventInput{Type: "x"}); err != nil {
		t.Fatal(err)
	}
	page, err := s.readEvents(ctx, "f", 0, 10, readOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 || page.Events[0].Type != "d" || page.Events[1].Type != "x" || page.Events[1].Offset != 3 {
		t.Fatalf("fork read: got %+v, want d@1 then x@3", page.Events)
	}
}

func readRecordsTail(t *testing.T, s *Store, path string) int64 {
	t.Helper()
	res, err := s.Protocol().ReadRecords(context.Background(), ReadRequest{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if !res.UpToDate {
		t.Fatalf("read %s: not up to date", path)
	}
	return res.Next
}
