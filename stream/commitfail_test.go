package stream

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream"
)

// failingCommitWrite is a write function that succeeds itself but makes its whole group's COMMIT
// fail: it leaves a deferred foreign-key violation behind, which SQLite reports only at COMMIT.
func failingCommitWrite(tx *tx) error {
	if _, err := tx.Exec(`PRAGMA defer_foreign_keys = ON`); err != nil {
		return err
	}
	_, err := tx.Exec(`INSERT INTO streams(path, content_type, created_ms, last_access_ms, forked_from)
		VALUES ('/fk-violation', 'x', 0, 0, 987654321)`)
	return err
}

// groupWithFailingCommit runs the given writes in one group together with failingCommitWrite, so the
// group's COMMIT fails; it returns the writes' errors.
func groupWithFailingCommit(t *testing.T, s *Store, fns ...func() error) []error {
	t.Helper()
	failing := func() error { return s.write(context.Background(), failingCommitWrite) }
	errs := inOneGroup(t, s, append(fns, failing)...)
	if errs[len(fns)] == nil {
		t.Fatal("the group's commit did not fail")
	}
	return errs[:len(fns)]
}

// inOneGroup runs fns (each a call that queues one write) so that their writes share one group,
// in order: it holds the writer with a blocking write, queues them one by one, then releases it.
// It returns their errors.
func inOneGroup(t *testing.T, s *Store, fns ...func() error) []error {
	t.Helper()
	release := make(chan struct{})
	held := make(chan struct{})
	go s.write(context.Background(), func(tx *tx) error { close(held); <-release; return nil }) //nolint:errcheck
	<-held
	errs := make([]chan error, len(fns))
	for i, fn := range fns {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- fn() }()
		waitFor(t, func() bool { return len(s.writes) >= i+1 })
	}
	close(release)
	out := make([]error, len(fns))
	for i := range fns {
		out[i] = <-errs[i]
	}
	return out
}

// A Wake whose group failed to commit wrote no wake record, so a retry must write it. The bug:
// Wake marked the stream woken for this incarnation inside its write function and unmarked it
// only when the function itself failed, so after a failed COMMIT the mark stayed and every later
// Wake of this incarnation returned nothing: the stream never got its birth or wake record. Worse,
// the rolled-back stream id was handed to the next stream created, which then counted as woken.
func TestWakeAfterFailedCommitWritesRecords(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "/e", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	errs := groupWithFailingCommit(t, s,
		func() error { _, err := s.Wake(ctx, "/w", WakeRequest); return err },
		func() error { _, err := s.Wake(ctx, "/e", WakeRequest); return err })
	for i, err := range errs {
		if err == nil {
			t.Fatalf("wake %d in a failed group: got nil error", i)
		}
	}
	// The stream row was rolled back; its id goes to the next stream created.
	if _, err := s.Append(ctx, "/other", foldstream.EventInput{Type: "t"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/w", "/e", "/other"} {
		got, err := s.Wake(ctx, p, WakeRequest)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[len(got)-1].Type != WokenType {
			t.Errorf("%s: wake returned %v, want its wake record", p, got)
		}
	}
}

// Appends whose group failed to commit leave nothing behind: no offsets taken, nothing in the
// ephemeral ring, nothing pushed, no cached row (checked, found correct; kept as a regression test).
func TestAppendsInFailedGroupLeaveNoState(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "/known", foldstream.EventInput{Type: "d"}); err != nil {
		t.Fatal(err)
	}
	pushed := make(chan foldstream.ScannedRange, 16)
	sub, err := s.Subscribe("/known", func(_ context.Context, _ []foldstream.Event, r foldstream.ScannedRange) error {
		pushed <- r
		return nil
	}, SubscribeOptions{Consumes: []string{"*", "e"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	errs := groupWithFailingCommit(t, s,
		func() error {
			_, err := s.Append(ctx, "/known", foldstream.EventInput{Type: "d"}, foldstream.EventInput{Type: "e", Ephemeral: true})
			return err
		},
		func() error {
			_, err := s.Append(ctx, "/known", foldstream.EventInput{Type: "e", Ephemeral: true})
			return err
		},
		func() error { _, err := s.Append(ctx, "/new", foldstream.EventInput{Type: "d"}); return err })
	for i, err := range errs {
		if err == nil {
			t.Fatalf("append %d in a failed group: got nil error", i)
		}
	}
	got, err := s.Append(ctx, "/known", foldstream.EventInput{Type: "d"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Offset != 2 {
		t.Errorf("next offset: got %d, want 2", got[0].Offset)
	}
	if err := sub.WaitDelivered(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-pushed; r.After != 1 || r.Through != 2 {
		t.Errorf("first push: got %+v, want (1, 2]", r)
	}
	page, err := s.Read(ctx, "/known", 0, 10, ReadOptions{IncludeEphemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 2 {
		t.Errorf("read: got %d events, want 2", len(page.Events))
	}
	if _, err := s.Append(ctx, "/other", foldstream.EventInput{Type: "d"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Append(ctx, "/new", foldstream.EventInput{Type: "d"}); err != nil || got[0].Offset != 1 {
		t.Fatalf("/new after the failed group: got %v, %v; want offset 1", got, err)
	}
	for _, p := range []string{"/new", "/other"} {
		page, err := s.Read(ctx, p, 0, 10, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) != 1 {
			t.Errorf("%s: got %d events, want 1", p, len(page.Events))
		}
	}
}
