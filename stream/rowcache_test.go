package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/foldstream/foldstream"
)

// A refused first append to a new path rolls its stream row back; SQLite then hands the same rowid
// to the next stream created. The writer's row cache must not route later appends of the first path
// into that other stream.
func TestRefusedCreateDoesNotAliasNextStream(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "t", Offset: 5}); !errors.Is(err, foldstream.ErrOffsetConflict) {
		t.Fatalf("first append: got %v, want OFFSET_CONFLICT", err)
	}
	if _, err := s.Append(ctx, "/b", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	wantOneEventEach(t, s, "/a", "/b")
}

// Deleting a stream in the same group as an append to it must not leave the append's cached row
// behind for a later stream that reuses the id.
//
// Two defences keep this green, and it fails only when both are gone: the delete forgets the row
// again after the commit, and streams.id is AUTOINCREMENT so a deleted id is never reused.
func TestDeleteInGroupForgetsCachedRow(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	// Created over the protocol, so the event view has not cached its row yet.
	if _, err := s.CreateStream(ctx, CreateRequest{Path: "/a", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	// An append and a delete of /a in one group, in that order.
	errs := inOneGroup(t, s,
		func() error { _, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "t"}); return err },
		func() error { return s.DeleteStream(ctx, "/a") })
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Append(ctx, "/c", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	wantOneEventEach(t, s, "/a", "/c")
}

// wantOneEventEach checks that each path's stream holds exactly one durable event.
func wantOneEventEach(t *testing.T, s *Store, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if got := len(mustRead(t, s, p, 0, 10, ReadOptions{}).Events); got != 1 {
			t.Errorf("%s: got %d events, want 1", p, got)
		}
	}
}

// A JSON message posted over the protocol with "ephemeral": true is stored, so the event view
// must read it back as a durable event.
func TestStoredMessageClaimingEphemeralReadsDurable(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	if _, err := s.CreateStream(ctx, CreateRequest{Path: "/j", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendRecord(ctx, AppendRequest{Path: "/j", ContentType: "application/json",
		Body: []byte(`{"type":"t","ephemeral":true}`)}); err != nil {
		t.Fatal(err)
	}
	page, err := s.Read(ctx, "/j", 0, 10, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || page.Events[0].Ephemeral {
		t.Fatalf("got %+v, want one durable event", page.Events)
	}
}
