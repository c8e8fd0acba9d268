package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/stream"
	"github.com/foldstream/foldstream/testsupport"
)

// dier starts background work on every pass that ignores its context and runs until the test
// ends: a host shut down with a short deadline leaves it in flight, as a crash would.
type dier struct {
	foldstream.Base[countState]
	started chan struct{}
	release chan struct{}
}

func (p *dier) Reduce(a foldstream.ReduceArgs[countState]) (countState, bool, error) {
	return countState{Ticks: a.State.Ticks + 1}, true, nil
}

func (p *dier) ProcessEvent(a *foldstream.ProcessEventArgs[countState]) error {
	a.RunInBackground(func(ctx context.Context) error {
		p.started <- struct{}{}
		<-p.release
		return nil
	})
	return nil
}

// outcomeRunner reports the outcome of each Revive on a channel.
type outcomeRunner struct {
	*foldstream.Engine[countState]
	revived chan error
}

func (r outcomeRunner) Revive(ctx context.Context) error {
	err := r.Engine.Revive(ctx)
	r.revived <- err
	return err
}

// §17.1 on the store (docs/store.md#work-that-keeps-dying): successive fresh hosts revive work
// that died with the previous one; the fifth death fails with PERMANENT_FAILURE, the host records
// it once (itx/work-failed), drops the claim and shows it in the status; the next host owes no
// revive; a new event starts the work again.
func TestHostStopsRevivingWorkThatDiedWithFiveHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clk := testsupport.NewFakeClock()
	s := openStore(t, filepath.Join(t.TempDir(), "s.db"), clk)
	defer s.Close(context.Background())
	c, err := foldstream.DefineContract(foldstream.ContractConfig[countState]{Slug: "dier", Version: "1", Consumes: []string{"e"}})
	if err != nil {
		t.Fatal(err)
	}
	p := &dier{Base: foldstream.NewBase(c), started: make(chan struct{}, 64), release: make(chan struct{})}
	t.Cleanup(func() { close(p.release) })
	// die ends a host whose work never settles: its engine's Close gives up at the deadline, and
	// the work is still in flight when the next host starts — as if the host had died.
	die := func(h *host.Host) {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_ = h.Shutdown(dctx)
	}
	// start starts a fresh host running a fresh engine of dier, its revives reported.
	start := func() (*host.Host, outcomeRunner) {
		h, err := host.New(s, host.Config{Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		cps, err := s.Events().Checkpoints(ctx, "/p")
		if err != nil {
			t.Fatal(err)
		}
		eng, err := foldstream.NewEngine[countState](p, foldstream.EngineConfig{
			Stream: s.Events().Stream("/p").ForProcessor("dier"), Checkpoints: cps, FedByPushes: true, Clock: clk, Logger: quietLog,
			KeyValue: foldstream.CheckpointKeyValue(cps, "dier"), CodeID: "build-1"})
		if err != nil {
			t.Fatal(err)
		}
		r := outcomeRunner{Engine: eng, revived: make(chan error, 4)}
		if err := h.Add(ctx, "/p", r); err != nil {
			t.Fatal(err)
		}
		return h, r
	}
	claims := func() int {
		t.Helper()
		cl, err := s.Events().Claims(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(cl)
	}

	h, r := start()
	evs, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "e"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.started
	if err := r.WaitUntilProcessed(ctx, evs[0].Offset, 0); err != nil {
		t.Fatal(err)
	}
	die(h) // the host dies with its work in flight
	if claims() != 1 {
		t.Fatal("no claim left by the host that died")
	}

	var got []string
	for i := range 6 {
		h, r = start()
		if i == 5 {
			if claims() == 0 {
				got = append(got, "-") // no revive owed: nothing is revived
			}
			break
		}
		select {
		case err := <-r.revived:
			switch {
			case err == nil:
				got = append(got, "1")
			case errors.Is(err, foldtype.ErrPermanentFailure):
				got = append(got, string(foldtype.CodeOf(err)))
				waitWorkFailed(t, ctx, s) // the host records the failure, then drops the claim
				if st := h.ProcessorsOn(ctx, "/p"); len(st) != 1 || st[0].WorkFailed == nil || st[0].WorkFailed.Code != foldtype.CodePermanentFailure {
					t.Fatalf("status after the failure: %+v", st)
				}
			default:
				t.Fatalf("host %d: revive: %v", i+2, err)
			}
		case <-ctx.Done():
			t.Fatalf("host %d: no revive", i+2)
		}
		die(h)
	}
	if want := []string{"1", "1", "1", "1", "PERMANENT_FAILURE", "-"}; !equalStrings(got, want) {
		t.Fatalf("revives by six fresh hosts: %v, want %v", got, want)
	}
	failed := workFailedRecords(t, ctx, s)
	if len(failed) != 1 || !jsonHas(failed[0].Payload, `"facet":"dier"`) {
		t.Fatalf("work-failed records: %+v, want one for dier", failed)
	}
	// A new event starts the work again, and claims its revive.
	for len(p.started) > 0 {
		<-p.started
	}
	if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "e"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.started:
	case <-ctx.Done():
		t.Fatal("a new event did not start the work")
	}
	die(h)
	if claims() != 1 {
		t.Fatal("the new work holds no claim")
	}
}

// workFailedRecords returns the work-failed records of /p.
func workFailedRecords(t *testing.T, ctx context.Context, s *stream.Store) []foldtype.Event {
	t.Helper()
	page, err := s.Events().Stream("/p").Read(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []foldtype.Event
	for _, e := range page.Events {
		if e.Type == foldtype.WorkFailedType {
			out = append(out, e)
		}
	}
	return out
}

// waitWorkFailed waits until /p holds a work-failed record, re-reading at each commit on it.
func waitWorkFailed(t *testing.T, ctx context.Context, s *stream.Store) {
	t.Helper()
	commits := make(chan struct{}, 1)
	stop := s.Events().WatchCommits(func(path string) {
		if path == "/p" {
			select {
			case commits <- struct{}{}:
			default:
			}
		}
	})
	defer stop()
	for len(workFailedRecords(t, ctx, s)) == 0 {
		select {
		case <-commits:
		case <-ctx.Done():
			t.Fatal("no work-failed record")
		}
	}
}

func jsonHas(raw []byte, part string) bool {
	return len(raw) > 0 && contains(string(raw), part)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
