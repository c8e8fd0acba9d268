package host_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// recordsDown is the SQLite driver whose reads of a stream's records fail while down is set: a
// database that answers the small reads (a stream's row, a checkpoint) and times out on the log.
type recordsDown struct {
	*sqlitedriver.Driver
	down    atomic.Bool
	refused atomic.Int64 // log reads refused
	msg     string       // the refusal's message; a generic one when empty
}

func (d *recordsDown) Read(ctx context.Context, fn func(driver.Reader) error) error {
	return d.Driver.Read(ctx, func(r driver.Reader) error { return fn(&recordsDownReader{Reader: r, d: d}) })
}

type recordsDownReader struct {
	driver.Reader
	d *recordsDown
}

func (r *recordsDownReader) Records(ctx context.Context, streamID, after int64, fn func(driver.Record) (bool, error)) error {
	if r.d.down.Load() {
		r.d.refused.Add(1)
		msg := r.d.msg
		if msg == "" {
			msg = "the database is unavailable; retry later"
		}
		return &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true, Message: msg}
	}
	return r.Reader.Records(ctx, streamID, after, fn)
}

// folder reduces every "tick" it consumes into its state, and has no effect.
type folder struct {
	foldstream.Base[countState]
}

func (p *folder) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1, Offsets: append(slices.Clone(a.State.Offsets), a.Event.Offset)}, true, nil
}

func (p *folder) ProcessEvent(*foldstream.ProcessEventArgs[countState]) error { return nil }

// TestAReadAfterAFailedOpeningCatchUpFoldsTheEventsBeforeTheSubscription: an engine whose opening
// catch-up could not read the log is at its checkpoint, below the events committed before its
// subscription began. A state read (GET on the processor route) after a commit it does not consume
// reads them and answers their fold, never a state that lacks them under an offset past them. (Here
// the engine's wake record, which it consumes, is offered to the subscription after the ticks, so
// the read finds the gap either way; the subscription's own rule, that it never vouches for the
// commits before it began, is TestSeenRangeNeverVouchesForCommitsBeforeTheSubscription in package
// stream.)
func TestAReadAfterAFailedOpeningCatchUpFoldsTheEventsBeforeTheSubscription(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sd := sqliteDriver(t)
	d := &recordsDown{Driver: sd}
	s := storeOver(t, sd, d, nil)
	for range 3 {
		if _, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	base := serveHost(t, s, h)
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{Slug: "folder", Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	d.down.Store(true) // the opening catch-up cannot read the log
	eng, err := host.Register(ctx, h, "/f", foldstream.Processor[countState](&folder{Base: foldstream.NewBase(c)}))
	if err != nil {
		t.Fatal(err)
	}
	if got := eng.ReducedThroughOffset(); got != 0 {
		t.Fatalf("the engine reduced through %d with the log unreadable; the test wants its catch-up to fail", got)
	}
	d.down.Store(false)
	// A commit the processor does not consume: its subscription sees it, and nothing before it.
	other, err := s.Events().Stream("/f").Append(ctx, foldtype.EventInput{Type: "other"})
	if err != nil {
		t.Fatal(err)
	}
	tail := other[0].Offset

	res, err := http.Get(base + "/v1/processor/folder/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var snap struct {
		Offset int64      `json:"offset"`
		State  countState `json:"state"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal(b, &snap) != nil {
		t.Fatalf("GET the processor's state: %d %s", res.StatusCode, b)
	}
	// The offset may be past the durable tail: the processor's live-state deltas are ephemeral
	// events, which take offsets too.
	if snap.Offset < tail || !slices.Equal(snap.State.Offsets, []int64{1, 2, 3}) {
		t.Fatalf("the state through offset %d is %+v; want the fold of the ticks at 1, 2 and 3 through offset %d or later", snap.Offset, snap.State, tail)
	}
}
