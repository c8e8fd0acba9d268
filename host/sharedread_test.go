package host_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
)

// readsDown is the PostgreSQL driver whose reads fail while down is set: a node that can no
// longer read the database (its writes are not tried while it is down).
type readsDown struct {
	*pgdriver.Driver
	down atomic.Bool
}

func (d *readsDown) Read(ctx context.Context, fn func(driver.Reader) error) error {
	if d.down.Load() {
		return &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true, Message: "the database is unavailable; retry later"}
	}
	return d.Driver.Read(ctx, fn)
}

// TestAReadOnASharedDatabaseThatCannotLearnTheHeadAnswersUnavailable: on a shared database a state
// read learns the stream's head from the database, because another node may have acknowledged an
// append whose notice has not reached this one; the state it answers reflects every append that
// returned before it. A read that cannot learn the head cannot keep that promise: it answers
// UNAVAILABLE (503 with Retry-After over HTTP), not a state that may lack such an append.
func TestAReadOnASharedDatabaseThatCannotLearnTheHeadAnswersUnavailable(t *testing.T) {
	ctx := context.Background()
	pd := pgDriver(t)
	d := &readsDown{Driver: pd}
	s := storeOver(t, pd, d, nil)
	h, err := host.New(s, host.Config{Logger: quietLog, ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	p, _ := newEffector(t)
	if _, err := host.Register(ctx, h, "/r", foldstream.Processor[countState](p)); err != nil {
		t.Fatal(err)
	}
	tick, err := s.Events().Stream("/r").Append(ctx, foldtype.EventInput{Type: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/r", "effector", tick[0].Offset, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	base := serveHost(t, s, h)
	d.down.Store(true)
	if snap, err := h.Snapshot(ctx, "/r", "effector"); foldtype.CodeOf(err) != foldtype.CodeUnavailable {
		t.Fatalf("a read that cannot learn the stream's head: %+v, %v; want UNAVAILABLE", snap, err)
	}
	// Over HTTP, as a client reads it: 503 with its code and when to come back, and no state.
	res, err := http.Get(base + "/v1/processor/effector/r")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Foldstream-Error-Code") != string(foldtype.CodeUnavailable) ||
		res.Header.Get("Retry-After") == "" || strings.Contains(string(b), `"ticks"`) {
		t.Fatalf("GET the processor's state while the head cannot be read: %d %v %s; want 503 UNAVAILABLE with Retry-After and no state",
			res.StatusCode, res.Header, b)
	}
	d.down.Store(false)
	snap, err := h.Snapshot(ctx, "/r", "effector")
	if err != nil || state(t, snap.State).Ticks != 1 {
		t.Fatalf("the read once the database answers: %+v, %v; want the tick's fold", snap, err)
	}
}
