package stream

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/testsupport"
)

// testT is the spec's test clock start (§14.2).
var testT = testsupport.T

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup opens an in-memory store with a fake clock.
func setup(t testing.TB) (*Store, *testsupport.FakeClock) {
	t.Helper()
	clk := testsupport.NewFakeClock()
	s, err := Open(":memory:", Options{Clock: clk, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// setupFile opens a store in a file under a temp dir.
func setupFile(t testing.TB) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path, Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func ev(typ string) foldstream.EventInput { return foldstream.EventInput{Type: typ} }

func eph(typ string) foldstream.EventInput { return foldstream.EventInput{Type: typ, Ephemeral: true} }

func offsets(evs []foldstream.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Offset
	}
	return out
}

func mustAppend(t testing.TB, s *Store, path string, in ...foldstream.EventInput) []foldstream.Event {
	t.Helper()
	out, err := s.Append(context.Background(), path, in...)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return out
}

func mustRead(t testing.TB, s *Store, path string, after int64, limit int, opts ReadOptions) foldstream.ReadPage {
	t.Helper()
	p, err := s.Read(context.Background(), path, after, limit, opts)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return p
}

func countRows(t testing.TB, s *Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.readTx(context.Background(), func(tx *sql.Tx) error { return tx.QueryRow(query, args...).Scan(&n) }); err != nil {
		t.Fatal(err)
	}
	return n
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// waitFor polls cond every millisecond, failing t after about 5 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 5000 {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
