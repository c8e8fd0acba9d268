package stream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// TestWriterGroupIsolatesRefusedWrites: a write that fails inside a group rolls back alone; its
// neighbours in the same transaction commit.
func TestWriterGroupIsolatesRefusedWrites(t *testing.T) {
	t.Parallel()
	s, err := Open(filepath.Join(t.TempDir(), "w.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	refused := errors.New("refused")
	var wg sync.WaitGroup
	errs := make([]error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.write(ctx, func(tx *tx) error {
				if _, err := tx.Exec(`INSERT INTO streams(path, content_type, created_ms, last_access_ms) VALUES (?, 'x', 0, 0)`,
					fmt.Sprintf("/p%d", i)); err != nil {
					return err
				}
				if i%3 == 0 {
					return refused
				}
				return nil
			})
		}()
	}
	wg.Wait()
	want := 0
	for i, err := range errs {
		if i%3 == 0 {
			if !errors.Is(err, refused) {
				t.Errorf("write %d: got %v, want refused", i, err)
			}
			continue
		}
		want++
		if err != nil {
			t.Errorf("write %d: got %v, want nil", i, err)
		}
	}
	var n int
	if err := s.rawQueryRow(`SELECT count(*) FROM streams`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("rows: got %d, want %d", n, want)
	}
}

// TestWriterPanicIsContained: a panicking write fails alone.
func TestWriterPanicIsContained(t *testing.T) {
	t.Parallel()
	s, err := Open(":memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.write(context.Background(), func(tx *tx) error { panic("boom") })
	if err == nil {
		t.Fatal("got nil error from a panicking write")
	}
	if err := s.write(context.Background(), func(tx *tx) error { _, err := tx.Exec(`SELECT 1`); return err }); err != nil {
		t.Fatalf("write after panic: %v", err)
	}
}

func TestClosedStoreRefusesWrites(t *testing.T) {
	t.Parallel()
	s, err := Open(":memory:", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.write(context.Background(), func(tx *tx) error { return nil }); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("got %v, want ErrStoreClosed", err)
	}
}
