package host_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/driver/sqlitedriver"
)

// driverWords is what a database driver's error says: the database's address, which a client is
// never told.
const driverWords = "failed to connect to `host=10.0.0.7 user=foldstream database=prod`: dial tcp 10.0.0.7:5432: connect: connection refused"

// unwritable is the SQLite driver whose write transactions cannot begin while down is set, as a
// database that takes reads (a standby, or a primary refusing writes) but no writes.
type unwritable struct {
	*sqlitedriver.Driver
	down atomic.Bool
}

func (d *unwritable) Writer(ctx context.Context) (driver.Writer, error) {
	w, err := d.Driver.Writer(ctx)
	if err != nil {
		return nil, err
	}
	return &unwritableWriter{Writer: w, d: d}, nil
}

type unwritableWriter struct {
	driver.Writer
	d *unwritable
}

func (w *unwritableWriter) Begin(ctx context.Context) (driver.WriteTx, error) {
	if w.d.down.Load() {
		return nil, &foldtype.Error{Code: foldtype.CodeUnavailable, Retryable: true, Message: "the database is unavailable; retry later: " + driverWords}
	}
	return w.Writer.Begin(ctx)
}

// held is a processor of "tick" events whose ProcessEvent blocks until release is closed.
type held struct {
	foldstream.Base[countState]
	release chan struct{}
}

func (p *held) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *held) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	if a.Event == nil {
		return nil
	}
	a.BlockProcessorWhile(func(ctx context.Context) error {
		select {
		case <-p.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return nil
}

// TestAProcessorWhoseCheckpointWaitsForTheDatabaseSaysSoOverHTTP: while the database takes no
// writes, a processor whose checkpoint the store refused shows, on the stream information route,
// the write being sent again — its kind, attempts, code and when it gives up, with the generic
// message of its code and not the driver's words — and its state stays running; once the database
// takes writes again the checkpoint goes through and the status says nothing more of it.
func TestAProcessorWhoseCheckpointWaitsForTheDatabaseSaysSoOverHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sd := sqliteDriver(t)
	d := &unwritable{Driver: sd}
	s := storeOver(t, sd, d, nil)
	h, err := host.New(s, host.Config{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{Slug: "held", Version: "1", Consumes: []string{"tick"}})
	if err != nil {
		t.Fatal(err)
	}
	p := &held{Base: foldstream.NewBase(c), release: make(chan struct{})}
	if _, err := host.Register(ctx, h, "/w", foldstream.Processor[countState](p)); err != nil {
		t.Fatal(err)
	}
	base := serveHost(t, s, h)

	type status struct {
		Offset          int64                        `json:"offset"`
		State           string                       `json:"state"`
		WaitingForStore *foldtype.ProcessorStoreWait `json:"waitingForStore"`
	}
	var last status
	var lastBody string
	look := func() bool {
		res, err := http.Get(base + "/v1/streams/info?path=/w")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		lastBody = string(b)
		var info struct {
			Processors []status `json:"processors"`
		}
		if res.StatusCode != http.StatusOK || json.Unmarshal(b, &info) != nil || len(info.Processors) != 1 {
			return false
		}
		last = info.Processors[0]
		return true
	}

	// The processor's engine has caught up (its opening catch-up over), so the tick reaches it by
	// a push and its checkpoint is the one refused below.
	if !wait.For(30*time.Second, func() bool { return look() && last.State == foldtype.StateRunning }) {
		t.Fatalf("the processor never ran; last answer: %s", lastBody)
	}
	res, err := http.Post(base+"/v1/stream/w", "application/json", strings.NewReader(`{"type":"tick"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	tail, _, err := server.ParseOffset(res.Header.Get("Stream-Next-Offset"))
	if res.StatusCode != http.StatusNoContent || err != nil {
		t.Fatalf("POST tick: %d, next offset %q", res.StatusCode, res.Header.Get("Stream-Next-Offset"))
	}

	// The tick's ProcessEvent waits in its blocker; the database stops taking writes; the blocker
	// ends, and the range's checkpoint is refused.
	d.down.Store(true)
	close(p.release)
	if !wait.For(10*time.Second, func() bool { return look() && last.WaitingForStore != nil && last.WaitingForStore.Attempts >= 2 }) {
		t.Fatalf("no write waiting for the database on the information route; last answer: %s", lastBody)
	}
	w := last.WaitingForStore
	if w.Write != "checkpoint" || w.Code != foldtype.CodeUnavailable || w.Since.IsZero() ||
		w.GivesUpAt.Sub(w.Since) != foldstream.DefaultWriteRetry || last.State != foldtype.StateRunning {
		t.Fatalf("status %s; want the checkpoint waiting with UNAVAILABLE, giving up %v after it began, the processor running",
			lastBody, foldstream.DefaultWriteRetry)
	}
	if strings.Contains(lastBody, "10.0.0.7") || w.Message == "" {
		t.Fatalf("the information route told the driver's words or nothing: %s", lastBody)
	}

	d.down.Store(false)
	if !wait.For(10*time.Second, func() bool { return look() && last.WaitingForStore == nil && last.Offset == tail }) {
		t.Fatalf("the checkpoint did not go through once the database took writes again; last answer: %s", lastBody)
	}
}
