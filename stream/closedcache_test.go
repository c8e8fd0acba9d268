package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/foldstream/foldstream"
)

// An ephemeral-only append to a stream the protocol closed or soft-deleted must be refused like any
// other append. The bug: the writer's row cache still held the stream, and an ephemeral-only batch
// on a cached stream runs no SQL, so nothing re-checked it: the ephemerals took offsets past the
// closed stream's final tail and were pushed to its subscribers and waiters.
func TestEphemeralAppendRefusedAfterProtocolCloseOrSoftDelete(t *testing.T) {
	t.Parallel()
	s, _ := setupProto(t)
	ctx := context.Background()
	eph := foldstream.EventInput{Type: "e", Ephemeral: true}
	for _, p := range []string{"/closed", "/deleted"} {
		if _, err := s.Append(ctx, p, foldstream.EventInput{Type: "d"}, eph); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AppendRecord(ctx, AppendRequest{Path: "/closed", Close: true}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, CreateRequest{Path: "/fork", ForkedFrom: "/deleted"})
	if err := s.DeleteStream(ctx, "/deleted"); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]error{"/closed": foldstream.ErrStreamClosed, "/deleted": foldstream.ErrStreamGone} {
		if _, err := s.Append(ctx, p, eph); !errors.Is(err, want) {
			t.Errorf("%s: ephemeral append got %v, want %v", p, err, want)
		}
	}
}
