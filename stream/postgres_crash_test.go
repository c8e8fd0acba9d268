package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// TestPostgresAnOffsetAnEphemeralTookIsNotHandedOutAgainAfterTheDatabaseCrashed: node A appends
// ephemeral events, past the first block of reserved offsets, which its subscriber receives; the
// database then crashes (pg_ctl restart -m
// immediate) while both nodes run. Node B's next durable event takes an offset after the
// ephemeral's, and node A's subscriber receives it: handed the ephemeral's offset again, the
// event would look already published to node A, and a processor there would never reduce it
// (docs/postgres.md#ephemeral-events).
func TestPostgresAnOffsetAnEphemeralTookIsNotHandedOutAgainAfterTheDatabaseCrashed(t *testing.T) {
	srv := pgtest.StartServer(t)
	a, b := openPG(t, srv.URL()), openPG(t, srv.URL())
	ctx := context.Background()

	col := newCollector()
	sub, err := a.Events().Subscribe("/e", col.deliver, stream.SubscribeOptions{Consumes: []string{"tick", "delta"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := a.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	eph, err := a.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true, Payload: foldtype.JSON("d")})
	if err != nil {
		t.Fatal(err)
	}
	col.waitFor(t, 2)
	// Past the first block of reserved offsets (pgdriver.ReserveBlock): the reserve moved with them.
	batch := make([]foldtype.EventInput, 100)
	for i := range batch {
		batch[i] = foldtype.EventInput{Type: "delta", Ephemeral: true, Payload: foldtype.JSON(i)}
	}
	for range (pgdriver.ReserveBlock + 99) / 100 {
		if eph, err = a.Events().Stream("/e").Append(ctx, batch...); err != nil {
			t.Fatal(err)
		}
	}
	eph = eph[len(eph)-1:]
	if eph[0].Offset <= pgdriver.ReserveBlock+2 {
		t.Fatalf("the last ephemeral took offset %d; want one past the first reserved block", eph[0].Offset)
	}
	col.waitFor(t, 2+len(batch)*((pgdriver.ReserveBlock+99)/100))

	srv.Restart("immediate")

	// Node B has not written to the stream: it reads the stream's row from the database.
	var durable []foldtype.Event
	var lastErr error
	if !wait.For(60*time.Second, func() bool {
		durable, lastErr = b.Events().Stream("/e").Append(ctx, foldtype.EventInput{Type: "tick"})
		if lastErr != nil && !foldtype.IsRetryable(lastErr) {
			t.Fatalf("append after the restart: %v", lastErr)
		}
		return lastErr == nil
	}) {
		t.Fatalf("node B could not append after the database's restart: %v", lastErr)
	}
	if durable[0].Offset <= eph[0].Offset {
		t.Fatalf("node B's durable event after the crash got offset %d; node A's ephemeral had taken %d", durable[0].Offset, eph[0].Offset)
	}
	got := col.waitFor(t, 3+len(batch)*((pgdriver.ReserveBlock+99)/100))
	if last := got[len(got)-1]; last.Offset != durable[0].Offset || last.Type != "tick" {
		t.Fatalf("node A's subscriber got %+v last, want the tick at %d", last, durable[0].Offset)
	}
}
