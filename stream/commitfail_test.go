package stream

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream"
)

// failingCommitWrite is a write function that succeeds itself but makes its whole group's COMMIT
// fail: it leaves a deferred foreign-key violation behind, which SQLite reports only at COMMIT.
func failingCommitWrite(tx *Tx) error {
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
	ctx := context.Background()
	release := make(chan struct{})
	held := make(chan struct{})
	go s.write(ctx, func(tx *Tx) error { close(held); <-release; return nil }) //nolint:errcheck
	<-held
	errs := make([]chan error, len(fns))
	for i, fn := range fns {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- fn() }()
		waitQueued(t, s, i+1)
	}
	failed := make(chan error, 1)
	go func() { failed <- s.write(ctx, failingCommitWrite) }()
	waitQueued(t, s, len(fns)+1)
	close(release)
	if err := <-failed; err == nil {
		t.Fatal("the group's commit did not fail")
	}
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
	s, err := Open(":memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
