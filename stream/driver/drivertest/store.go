package drivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

func openStore(t *testing.T, newDriver Factory) *stream.Store {
	t.Helper()
	s, err := stream.OpenDriver(context.Background(), newDriver(t), stream.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ProducerReorderWait: -1})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// readAllRecords follows a protocol read from the start to the tail, in pages of maxBytes.
func readAllRecords(t *testing.T, s *stream.Store, path string, maxBytes int) (body []byte, pages int) {
	t.Helper()
	var out bytes.Buffer
	after := int64(0)
	for {
		r, err := s.Protocol().ReadRecords(context.Background(), stream.ReadRequest{Path: path, After: after, MaxBytes: maxBytes})
		if err != nil {
			t.Fatalf("read %s after %d: %v", path, after, err)
		}
		pages++
		if r.Info.JSON {
			inner := bytes.TrimSuffix(bytes.TrimPrefix(r.Body, []byte("[")), []byte("]"))
			if len(inner) > 0 {
				if out.Len() > 0 {
					out.WriteByte(',')
				}
				out.Write(inner)
			}
		} else {
			out.Write(r.Body)
		}
		if r.UpToDate {
			return out.Bytes(), pages
		}
		if r.Next <= after {
			t.Fatalf("read %s made no progress at %d", path, after)
		}
		after = r.Next
	}
}

// RunStore runs the store's behaviour over the driver.
func RunStore(t *testing.T, newDriver Factory) {
	ctx := context.Background()

	t.Run("EventAppendIdempotencyAndPreconditions", func(t *testing.T) {
		s := openStore(t, newDriver)
		in := []foldtype.EventInput{{Type: "a"}, {Type: "b", IdempotencyKey: "k", Payload: []byte(`{"n":1}`)}, {Type: "e", Ephemeral: true}}
		got, err := s.Events().Stream("/e").Append(ctx, in...)
		if err != nil || len(got) != 3 || got[2].Offset != 3 {
			t.Fatalf("append: got %+v %v", got, err)
		}
		again, err := s.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "b", IdempotencyKey: "k", Payload: []byte(`{"n":1}`)})
		if err != nil || again[0].Offset != 2 {
			t.Fatalf("retry: got %+v %v, want the stored event at 2", again, err)
		}
		if _, err := s.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "b", IdempotencyKey: "k", Payload: []byte(`{"n":2}`)}); !errors.Is(err, foldtype.ErrIdempotencyConflict) {
			t.Fatalf("different body: got %v, want IDEMPOTENCY_CONFLICT", err)
		}
		if _, err := s.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "c", Offset: 9}); !errors.Is(err, foldtype.ErrOffsetConflict) {
			t.Fatalf("precondition: got %v, want OFFSET_CONFLICT", err)
		}
		page, err := s.Events().Stream("/e").Read(ctx, 0, 0)
		if err != nil || len(page.Events) != 2 || !page.AtHead || page.ScannedThroughOffset != 3 {
			t.Fatalf("read: got %+v %v, want 2 durable events, proven through 3", page, err)
		}
	})

	t.Run("AFencedAppendCommitsOnlyWhileItsLeaseIsHeld", func(t *testing.T) {
		// A processor's emitted events are fenced as its checkpoints are: after another holder
		// took the lease, an append under the old generation is refused and writes nothing; a
		// batch of ephemerals alone is not checked.
		s := openStore(t, newDriver)
		d := s.Driver()
		l, ok, err := d.AcquireLease(ctx, "lease", "node-a", "", time.Minute)
		if err != nil || !ok {
			t.Fatalf("acquire: %v %v", ok, err)
		}
		old := s.Events().Stream("/f").Fenced("lease", l.Generation)
		if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "made"}); err != nil {
			t.Fatal(err)
		}
		if got, err := old.ForProcessor("p").Append(ctx, foldtype.EventInput{Type: "done", IdempotencyKey: "k1"}); err != nil || got[0].Offset != 2 {
			t.Fatalf("append under the held lease: %+v %v, want offset 2", got, err)
		}
		if err := d.ReleaseLease(ctx, l, false); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := d.AcquireLease(ctx, "lease", "node-b", "", time.Minute); err != nil || !ok {
			t.Fatalf("takeover: %v %v", ok, err)
		}
		if _, err := old.ForProcessor("p").Append(ctx, foldtype.EventInput{Type: "done", IdempotencyKey: "k2"}); !errors.Is(err, foldtype.ErrLeaseLost) {
			t.Fatalf("append under a lease taken over: %v, want LEASE_LOST", err)
		}
		if _, err := old.ForProcessor("p").Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true}); err != nil {
			t.Fatalf("ephemerals under a lease taken over: %v, want them taken", err)
		}
		page, err := s.Events().Stream("/f").Read(ctx, 0, 0)
		if err != nil || len(page.Events) != 2 {
			t.Fatalf("read: %+v %v, want the two events before the takeover", page.Events, err)
		}
	})

	t.Run("ARetriedEmissionWithAnotherTraceContextIsTheSameEvent", func(t *testing.T) {
		// A retried ProcessEvent emits under a new span: its trace context differs from the first
		// emission's, and the store still takes it as that emission (docs/engine.md#tracing).
		s := openStore(t, newDriver)
		first := foldtype.EventInput{Type: "shipped", IdempotencyKey: "processor:ship/1", Payload: []byte(`{"n":1}`),
			Metadata: []byte(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","who":"x"}`)}
		got, err := s.Events().Stream("/t").Append(ctx, foldtype.EventInput{Type: "a"}, first)
		if err != nil {
			t.Fatal(err)
		}
		retry := first
		retry.Metadata = []byte(`{"who":"x","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}`)
		again, err := s.Events().Stream("/t").Append(ctx, retry)
		if err != nil || len(again) != 1 || again[0].Offset != got[1].Offset {
			t.Fatalf("retry with another trace context: got %+v %v, want the event stored at %d", again, err, got[1].Offset)
		}
		if string(again[0].Metadata) != string(first.Metadata) {
			t.Errorf("the retry answered metadata %s, want the stored %s", again[0].Metadata, first.Metadata)
		}
		untraced := first
		untraced.Metadata = []byte(`{"who":"x"}`)
		if again, err := s.Events().Stream("/t").Append(ctx, untraced); err != nil || again[0].Offset != got[1].Offset {
			t.Fatalf("untraced retry: got %+v %v, want the event stored at %d", again, err, got[1].Offset)
		}
		other := first
		other.Metadata = []byte(`{"who":"y","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)
		if _, err := s.Events().Stream("/t").Append(ctx, other); !errors.Is(err, foldtype.ErrIdempotencyConflict) {
			t.Fatalf("other metadata besides the trace: got %v, want IDEMPOTENCY_CONFLICT", err)
		}
		page, err := s.Events().Stream("/t").Read(ctx, 0, 0)
		if err != nil || len(page.Events) != 2 {
			t.Fatalf("read: got %+v %v, want the two events appended first", page, err)
		}
	})

	t.Run("AStreamCreatedByItsWriterGetsNoBirthRecord", func(t *testing.T) {
		// Only a wake that creates the stream writes itx/created (docs/store.md#records-nobody-appended):
		// an empty stream created over the protocol (an HTTP PUT) gets itx/woken alone.
		s := openStore(t, newDriver)
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/carts/1", ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Events().WakeExisting(ctx, "/carts/1", stream.WakeRequest)
		if err != nil || len(got) != 1 || got[0].Type != foldtype.WokenType || got[0].Offset != 1 {
			t.Fatalf("wake of an empty stream created over the protocol: got %+v %v, want itx/woken alone at 1", got, err)
		}
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/carts/2", ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Events().Wake(ctx, "/carts/2", stream.WakeRequest); err != nil || len(got) != 1 || got[0].Type != foldtype.WokenType {
			t.Fatalf("Wake of an existing empty stream: got %+v %v, want itx/woken alone", got, err)
		}
		born, err := s.Events().Wake(ctx, "/carts/3", stream.WakeRequest)
		if err != nil || len(born) != 2 || born[0].Type != foldtype.CreatedType || born[1].Type != foldtype.WokenType {
			t.Fatalf("Wake that creates the stream: got %+v %v, want the birth batch", born, err)
		}
	})

	t.Run("ProtocolRecordsProducersAndClose", func(t *testing.T) {
		s := openStore(t, newDriver)
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/j", ContentType: "application/json", Body: []byte(`[1,2]`)}); err != nil {
			t.Fatal(err)
		}
		prod := func(seq int64, body string) (stream.AppendResult, error) {
			return s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/j", ContentType: "application/json", Body: []byte(body),
				Producer: &stream.ProducerHeaders{ID: "p", Epoch: 0, Seq: seq}})
		}
		if r, err := prod(0, `[3,4,5]`); err != nil || r.Tail != 5 {
			t.Fatalf("seq 0: got %+v %v", r, err)
		}
		if r, err := prod(0, `[3,4,5]`); err != nil || !r.Duplicate {
			t.Fatalf("seq 0 again: got %+v %v, want a duplicate", r, err)
		}
		if _, err := prod(2, `[7]`); !errors.Is(err, foldtype.ErrSequenceGap) {
			t.Fatalf("seq 2: got %v, want SEQUENCE_GAP", err)
		}
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/j", ContentType: "application/json", Body: []byte(`6`), Close: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/j", ContentType: "application/json", Body: []byte(`7`)}); !errors.Is(err, foldtype.ErrStreamClosed) {
			t.Fatalf("append after close: got %v, want STREAM_CLOSED", err)
		}
		if body, _ := readAllRecords(t, s, "/j", 1<<20); string(body) != `1,2,3,4,5,6` {
			t.Fatalf("read: got %s", body)
		}
		r, err := s.Protocol().ReadRecords(ctx, stream.ReadRequest{Path: "/j", After: 3})
		if err != nil || string(r.Body) != `[4,5,6]` || r.Next != 6 || !r.UpToDate {
			t.Fatalf("read from inside a record: got %s next %d %v", r.Body, r.Next, err)
		}
	})

	t.Run("LargeRecordsAreSlicedAndReadInPages", func(t *testing.T) {
		s := openStore(t, newDriver)
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/big", ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteByte('[')
		const n = 5000
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"i":%d,"pad":"%s"}`, i, strings.Repeat("x", 180))
		}
		b.WriteByte(']')
		if r, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/big", ContentType: "application/json", Body: []byte(b.String())}); err != nil || r.Tail != n {
			t.Fatalf("append: got %+v %v", r, err)
		}
		body, pages := readAllRecords(t, s, "/big", 64<<10)
		if "["+string(body)+"]" != b.String() {
			t.Fatal("read back differs from the appended record")
		}
		if pages < 10 {
			t.Fatalf("pages: got %d, want the 64 KiB budget to cut the record", pages)
		}
		page, err := s.Events().Stream("/big").Read(ctx, 4990, 0)
		if err != nil || len(page.Events) != 10 || page.Events[0].Offset != 4991 || page.Events[0].Type != stream.MessageType {
			t.Fatalf("event read of the tail: got %d events %v", len(page.Events), err)
		}
		bin := bytes.Repeat([]byte("0123456789"), 100_000)
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/bin", ContentType: "application/octet-stream", Body: bin}); err != nil {
			t.Fatal(err)
		}
		if got, _ := readAllRecords(t, s, "/bin", 100_000); !bytes.Equal(got, bin) {
			t.Fatal("byte record read back differs")
		}
	})

	t.Run("ForksAndDeletes", func(t *testing.T) {
		s := openStore(t, newDriver)
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/src", ContentType: "text/plain", Body: []byte("hello ")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/src", ContentType: "text/plain", Body: []byte("world")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/fork", ForkedFrom: "/src", ForkOffset: 6, HasForkOffset: true, ForkSubOffset: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/fork", ContentType: "text/plain", Body: []byte("!")}); err != nil {
			t.Fatal(err)
		}
		if got, _ := readAllRecords(t, s, "/fork", 1<<20); string(got) != "hello wo!" {
			t.Fatalf("fork: got %q", got)
		}
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/bad", ForkedFrom: "/src", ForkOffset: 3, HasForkOffset: true}); !errors.Is(err, foldtype.ErrBadRequest) {
			t.Fatalf("fork inside a record: got %v, want BAD_REQUEST", err)
		}
		// The source is deleted softly while its fork reads through it.
		if err := s.Protocol().DeleteStream(ctx, "/src"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().HeadStream(ctx, "/src"); !errors.Is(err, foldtype.ErrStreamGone) {
			t.Fatalf("deleted source: got %v, want STREAM_GONE", err)
		}
		if got, _ := readAllRecords(t, s, "/fork", 1<<20); string(got) != "hello wo!" {
			t.Fatalf("fork after the source's delete: got %q", got)
		}
		if err := s.Protocol().DeleteStream(ctx, "/fork"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().HeadStream(ctx, "/src"); !errors.Is(err, foldtype.ErrStreamNotFound) {
			t.Fatalf("source after its last fork went: got %v, want STREAM_NOT_FOUND", err)
		}
		// A path created again starts empty.
		got, err := s.Events().Stream("/fork").Append(ctx, foldtype.EventInput{Type: "x"})
		if err != nil || got[0].Offset != 1 {
			t.Fatalf("recreated path: got %+v %v, want offset 1", got, err)
		}
	})

	t.Run("SubscribersSeeBothViews", func(t *testing.T) {
		s := openStore(t, newDriver)
		pushed := make(chan foldtype.ScannedRange, 8)
		sub, err := s.Events().Subscribe("/sub", func(_ context.Context, evs []foldtype.Event, r foldtype.ScannedRange) error {
			pushed <- r
			return nil
		}, stream.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		if _, err := s.Events().Stream("/sub").Append(ctx, foldtype.EventInput{Type: "a"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/sub", ContentType: "application/json", Body: []byte(`[{"type":"b"},{"type":"c"}]`)}); err != nil {
			t.Fatal(err)
		}
		if err := sub.WaitDelivered(ctx); err != nil {
			t.Fatal(err)
		}
		var through int64
		for len(pushed) > 0 {
			through = (<-pushed).Through
		}
		if through != 3 {
			t.Fatalf("pushes reached %d, want 3", through)
		}
	})

	t.Run("Checkpoints", func(t *testing.T) {
		s := openStore(t, newDriver)
		cps, err := s.Events().Checkpoints(ctx, "/c")
		if err != nil {
			t.Fatal(err)
		}
		if err := cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 2, State: []byte(`{}`)}, true); err != nil {
			t.Fatal(err)
		}
		cp, ok, err := cps.ReadCheckpoint(ctx, "p")
		if err != nil || !ok || cp.ReducedThroughOffset != 2 {
			t.Fatalf("checkpoint: got %+v %v %v", cp, ok, err)
		}
		if err := cps.Fenced("no-such-lease", 1).WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 3}, false); !errors.Is(err, foldtype.ErrLeaseLost) {
			t.Fatalf("fenced write without the lease: got %v, want LEASE_LOST", err)
		}
	})

	t.Run("SwitchCheckpointReplacesTheRowAndDeletesTheSideRowInOneWrite", func(t *testing.T) {
		s := openStore(t, newDriver)
		if _, err := s.Events().Stream("/sw").Append(ctx, foldtype.EventInput{Type: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		cps, err := s.Events().Checkpoints(ctx, "/sw")
		if err != nil {
			t.Fatal(err)
		}
		if err := cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 1, State: []byte(`{"v":1}`)}, true); err != nil {
			t.Fatal(err)
		}
		if err := cps.WriteCheckpoint(ctx, "p@2", foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: 1, State: []byte(`{"w":1}`)}, true); err != nil {
			t.Fatal(err)
		}
		if err := cps.Fenced("no-such-lease", 1).SwitchCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: 1, State: []byte(`{"w":1}`)}, "p@2"); !errors.Is(err, foldtype.ErrLeaseLost) {
			t.Fatalf("fenced switch without the lease: got %v, want LEASE_LOST", err)
		}
		if cp, ok, _ := cps.ReadCheckpoint(ctx, "p@2"); !ok || cp.ReducerVersion != "2" {
			t.Fatalf("side row after a refused switch: got %+v %v, want it kept", cp, ok)
		}
		if err := cps.SwitchCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "2", ReducedThroughOffset: 1, State: []byte(`{"w":1}`)}, "p@2"); err != nil {
			t.Fatal(err)
		}
		got, err := cps.ReadCheckpoints(ctx, "p", "p@2")
		if err != nil {
			t.Fatal(err)
		}
		if cp := got["p"]; cp.ReducerVersion != "2" || string(cp.State) != `{"w":1}` {
			t.Fatalf("processor row after the switch: got %+v, want version 2 with the rebuilt state", cp)
		}
		if cp, ok := got["p@2"]; ok {
			t.Fatalf("side row after the switch: got %+v, want none", cp)
		}
	})
}
