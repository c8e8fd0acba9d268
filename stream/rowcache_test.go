package stream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
)

// A refused first append to a new path rolls its stream row back; SQLite then hands the same rowid
// to the next stream created. The writer's row cache must not route later appends of the first path
// into that other stream.
func TestRefusedCreateDoesNotAliasNextStream(t *testing.T) {
	t.Parallel()
	s, err := Open(":memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
	for _, p := range []string{"/a", "/b"} {
		page, err := s.Read(ctx, p, 0, 10, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != 1 {
			t.Errorf("%s: got %d events, want 1", p, len(page.Events))
		}
	}
}

// Deleting a stream in the same group as an append to it must not leave the append's cached row
// behind for a later stream that reuses the id.
func TestDeleteInGroupForgetsCachedRow(t *testing.T) {
	t.Parallel()
	s, err := Open(":memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// Created over the protocol, so the event view has not cached its row yet.
	if _, err := s.CreateStream(ctx, CreateRequest{Path: "/a", ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	// Queue an append and a delete of /a into one group: hold the writer with a blocking write.
	release := make(chan struct{})
	held := make(chan struct{})
	go s.write(ctx, func(tx *Tx) error { close(held); <-release; return nil }) //nolint:errcheck
	<-held
	appended := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "t"})
		appended <- err
	}()
	deleted := make(chan error, 1)
	waitQueued(t, s, 1)
	go func() { deleted <- s.DeleteStream(ctx, "/a") }()
	waitQueued(t, s, 2)
	close(release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "/c", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "/a", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a", "/c"} {
		page, err := s.Read(ctx, p, 0, 10, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != 1 {
			t.Errorf("%s: got %d events, want 1", p, len(page.Events))
		}
	}
}

// waitQueued waits until n writes are queued behind the running one.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for i := 0; len(s.writes) < n; i++ {
		if i > 5000 {
			t.Fatalf("writes queued: got %d, want %d", len(s.writes), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A JSON message posted over the protocol with "ephemeral": true is stored, so the event view
// must read it back as a durable event.
func TestStoredMessageClaimingEphemeralReadsDurable(t *testing.T) {
	t.Parallel()
	s, err := Open(":memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
