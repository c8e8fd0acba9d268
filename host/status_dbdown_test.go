package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// unreadable is the SQLite driver whose read transactions fail while down is set, as a
// database that does not answer.
type unreadable struct {
	*sqlitedriver.Driver
	down atomic.Bool
}

func (d *unreadable) Read(ctx context.Context, fn func(driver.Reader) error) error {
	if d.down.Load() {
		return errors.New("the database does not answer")
	}
	return d.Driver.Read(ctx, fn)
}

// TestStatusOfARunningPatternProcessorNamesItsOwnerWhileTheDatabaseDoesNotAnswer: a pattern
// processor whose engine runs on this node is reported, with this node as its owner and its lease
// generation, also when the stream's head cannot be read: whether the stream exists is not known
// then, but what the node runs is.
func TestStatusOfARunningPatternProcessorNamesItsOwnerWhileTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sd, err := sqlitedriver.Open(ctx, sqlitedriver.Config{Path: filepath.Join(t.TempDir(), "s.db")})
	if err != nil {
		t.Fatal(err)
	}
	d := &unreadable{Driver: sd}
	s, err := stream.OpenDriver(ctx, d, stream.Config{Logger: quietLog})
	if err != nil {
		sd.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	h := newHost(t, s)
	if err := host.RegisterPattern[countState](ctx, h, "/t/*", newTicker(t, "tick")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/t/1").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Snapshot(ctx, "/t/1", "tick"); err != nil { // opens the engine under its lease
		t.Fatal(err)
	}
	before := h.ProcessorsOn(ctx, "/t/1")
	if len(before) != 1 || !before[0].Open || before[0].Owner != h.NodeID() || before[0].Generation < 1 {
		t.Fatalf("status with the database answering: %+v, want the open engine owned by %q", before, h.NodeID())
	}

	d.down.Store(true)
	got := h.ProcessorsOn(ctx, "/t/1")
	d.down.Store(false)
	if len(got) != 1 || got[0].Owner != h.NodeID() || !got[0].Local || got[0].Generation != before[0].Generation || !got[0].Open {
		t.Fatalf("status while the database does not answer: %+v, want the open engine owned by %q at generation %d",
			got, h.NodeID(), before[0].Generation)
	}
	if sts := h.ProcessorsOn(ctx, "/t/2"); len(sts) != 0 { // no such stream: patterns cover existing streams only
		t.Fatalf("status on a stream that does not exist: %+v, want none", sts)
	}
}
