package stream

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/foldstream/foldstream/foldtype"
)

// TestDeletedStreamTakesItsProcessorStateAlong: a checkpoint, a claim, the ephemeral ring and the
// subscriptions belong to one incarnation of a stream. Every way a stream is deleted — a hard
// delete, a soft delete (forks still read it), expiry collection, and a create replacing an
// expired stream — removes its checkpoints and claims in the deleting transaction, clears its
// ring and ends its subscriptions with STREAM_DELETED; a stream created at the path again starts
// with no checkpoint, so its processors begin from their initial state at offset 0.
func TestDeletedStreamTakesItsProcessorStateAlong(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"hard delete", "soft delete", "expiry collection", "create over expired"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s, clk := setup(t)
			ctx := context.Background()
			const path = "/s"
			req := CreateRequest{Path: path, ContentType: "application/json"}
			if how == "expiry collection" || how == "create over expired" {
				req.HasTTL, req.TTLSeconds = true, 10
			}
			mustCreate(t, s, req)
			mustAppend(t, s, path, ev("a"), ev("b"), ev("c"), eph("blip"))
			if how == "soft delete" {
				mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: path})
			}
			cps, err := s.Events().Checkpoints(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if err := cps.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 3,
				State: json.RawMessage(`{"n":3}`)}, true); err != nil {
				t.Fatal(err)
			}
			if err := s.Events().Claim(ctx, path, "p", clk.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			sub, err := s.Events().Subscribe(path, func(context.Context, []foldtype.Event, foldtype.ScannedRange) error { return nil }, SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			id := countRows(t, s, `SELECT id FROM streams WHERE path = ?`, path)

			switch how {
			case "hard delete", "soft delete":
				if err := s.Protocol().DeleteStream(ctx, path); err != nil {
					t.Fatal(err)
				}
			case "expiry collection":
				clk.Advance(11 * time.Second)
				if _, err := s.Protocol().CollectExpired(ctx); err != nil {
					t.Fatal(err)
				}
			case "create over expired":
				clk.Advance(11 * time.Second)
				mustCreate(t, s, CreateRequest{Path: path, ContentType: "application/json"})
			}

			select {
			case <-sub.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the subscription did not end")
			}
			if err := sub.Err(); !errors.Is(err, foldtype.ErrStreamDeleted) {
				t.Fatalf("subscription ended with %v, want STREAM_DELETED", err)
			}
			if err := sub.WaitDelivered(ctx); !errors.Is(err, foldtype.ErrStreamDeleted) {
				t.Fatalf("WaitDelivered after the delete: got %v, want STREAM_DELETED", err)
			}
			if _, ok, err := cps.ReadCheckpoint(ctx, "p"); err != nil || ok {
				t.Fatalf("checkpoint after the delete: found %v (err %v), want none", ok, err)
			}
			// A processor still running on the deleted stream cannot leave a checkpoint behind.
			late := foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 4}
			if err := cps.WriteCheckpoint(ctx, "p", late, false); !errors.Is(err, foldtype.ErrStreamDeleted) || foldtype.IsRetryable(err) {
				t.Fatalf("late checkpoint write: got %v, want STREAM_DELETED, not retryable", err)
			}
			claims, err := s.Events().Claims(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(claims) != 0 {
				t.Fatalf("claims after the delete: got %+v, want none", claims)
			}
			if ring := s.ringSnapshot(int64(id)); len(ring) != 0 {
				t.Fatalf("ephemeral ring after the delete: got %d events, want none", len(ring))
			}
			if how == "soft delete" {
				return // the path stays reserved while the fork reads through it
			}

			// The path again: a fresh incarnation with no inherited processor state.
			got := mustAppend(t, s, path, ev("new"))
			if got[0].Offset != 1 {
				t.Fatalf("first event of the new stream at offset %d, want 1", got[0].Offset)
			}
			cps2, err := s.Events().Checkpoints(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			if cp, ok, err := cps2.ReadCheckpoint(ctx, "p"); err != nil || ok {
				t.Fatalf("checkpoint of the new stream: got %+v (found %v, err %v), want none", cp, ok, err)
			}
			if err := cps.WriteCheckpoint(ctx, "p", late, false); !errors.Is(err, foldtype.ErrStreamDeleted) {
				t.Fatalf("old incarnation's checkpoint write on the new stream: got %v, want STREAM_DELETED", err)
			}
			if err := cps2.WriteCheckpoint(ctx, "p", foldtype.Checkpoint{ReducerVersion: "1", ReducedThroughOffset: 1}, false); err != nil {
				t.Fatalf("new stream's checkpoint write: %v", err)
			}
			if cp, ok, err := cps2.ReadCheckpoint(ctx, "p"); err != nil || !ok || cp.ReducedThroughOffset != 1 {
				t.Fatalf("new stream's checkpoint: got %+v (found %v, err %v), want offset 1", cp, ok, err)
			}
			page := mustRead(t, s, path, 0, 100, readOptions{IncludeEphemeral: true})
			if len(page.Events) != 1 || page.Events[0].Type != "new" {
				t.Fatalf("new stream's events: got %+v, want only \"new\"", page.Events)
			}
		})
	}
}
