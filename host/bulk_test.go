package host_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/internal/testhooks"
	"github.com/foldstream/foldstream/stream/driver/pgdriver"
	"github.com/foldstream/foldstream/testsupport"
)

// Bulk retry and skip over a pattern touch only the streams where the processor is failing: the
// dry runs count those and change nothing, the retry runs one more attempt on each (still failing,
// the event is still bad), the skip parks each one's bad event and lets the processor run on, and
// a dry run then finds none left. A healthy stream the pattern matches is matched, never changed.
func TestBulkRetryAndSkipTouchOnlyTheStreamsWhereTheProcessorFails(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clk := testsupport.NewFakeClock()
	s := openStore(t, ":memory:", clk)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ManualAlarms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	if err := host.RegisterPattern(ctx, h, "/f/*", newFlaky(t)); err != nil {
		t.Fatal(err)
	}
	failing, healthy := []string{"/f/a", "/f/b"}, "/f/c"
	for _, path := range failing {
		if _, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "bad"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Events().Stream(healthy).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	attemptsOf := func(path string) int {
		for _, st := range h.ProcessorsOn(ctx, path) {
			if st.Slug == "flaky" && st.State == foldtype.StateFailing && st.Failing != nil {
				return st.Failing.Attempts
			}
		}
		return 0
	}
	for _, path := range failing {
		if !wait.For(20*time.Second, func() bool { return attemptsOf(path) == 1 }) {
			t.Fatalf("%s did not fail within 20s: %+v", path, h.ProcessorsOn(ctx, path))
		}
	}
	if err := h.WaitUntilProcessed(ctx, healthy, "flaky", 1, 20*time.Second); err != nil {
		t.Fatalf("the healthy stream: %v", err)
	}
	want := func(what string, got host.BulkResult, err error, matched, changed int) {
		t.Helper()
		if err != nil || got.Matched != matched || got.Changed != changed || got.Failed != 0 {
			t.Fatalf("%s: %+v %v, want %d of %d changed, none failed", what, got, err, changed, matched)
		}
	}
	res, err := h.RetryMatching(ctx, "/f/*", "flaky", true)
	want("retry dry run", res, err, 3, 2)
	for _, path := range failing {
		if n := attemptsOf(path); n != 1 {
			t.Fatalf("%s after a dry run: %d attempts, want 1", path, n)
		}
	}
	res, err = h.RetryMatching(ctx, "/f/*", "flaky", false)
	want("retry", res, err, 3, 2)
	for _, path := range failing {
		if !wait.For(20*time.Second, func() bool { return attemptsOf(path) == 2 }) {
			t.Fatalf("%s: the retried attempt did not run within 20s: %+v", path, h.ProcessorsOn(ctx, path))
		}
	}
	res, err = h.SkipMatching(ctx, "/f/*", "flaky", "bad events", true)
	want("skip dry run", res, err, 3, 2)
	res, err = h.SkipMatching(ctx, "/f/*", "flaky", "bad events", false)
	want("skip", res, err, 3, 2)
	for _, path := range append(failing, healthy) {
		info, err := s.Events().HeadStream(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.WaitUntilProcessed(ctx, path, "flaky", info.Tail, 20*time.Second); err != nil {
			t.Fatalf("%s after the bulk skip: %v", path, err)
		}
		parked, err := h.ParkedEvents(ctx, path, "flaky")
		if err != nil {
			t.Fatal(err)
		}
		if wantParked := path != healthy; (len(parked) == 1 && parked[0].Reason == "bad events") != wantParked {
			t.Fatalf("%s: parked %+v, want the bad event parked: %v", path, parked, wantParked)
		}
	}
	res, err = h.SkipMatching(ctx, "/f/*", "flaky", "", true)
	want("skip dry run after the skip", res, err, 3, 0)
	res, err = h.RetryMatching(ctx, "/f/*", "flaky", true)
	want("retry dry run after the skip", res, err, 3, 0)
}

// A bulk rebuild over a pattern counts the streams where a next version is registered and not
// switched in: none before the program registers one, every matched stream after, and none once
// the rebuild it started switched each of them to the next version.
func TestBulkRebuildStartsTheNextVersionWhereItIsNotSwitchedIn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := openStore(t, filepath.Join(t.TempDir(), "bulkrebuild.db"), nil)
	defer s.Close(context.Background())
	h := newHost(t, s)
	defer h.Shutdown(context.Background())
	if err := host.RegisterPattern(ctx, h, "/t/*", newTicker(t, "ticks")); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/t/a", "/t/b"}
	for _, path := range paths {
		if _, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		if err := h.WaitUntilProcessed(ctx, path, "ticks", 2, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := h.RebuildMatching(ctx, "/t/*", "ticks", true); err != nil || res.Matched != 2 || res.Changed != 0 {
		t.Fatalf("dry run with no next version: %+v %v, want 0 of 2", res, err)
	}
	next := byTen{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[countState]{
		Slug: "ticks", Version: "2", Consumes: []string{"tick"}}))}
	if err := host.RegisterNextVersion(ctx, h, "/t/*", next); err != nil {
		t.Fatal(err)
	}
	if res, err := h.RebuildMatching(ctx, "/t/*", "ticks", true); err != nil || res.Matched != 2 || res.Changed != 2 || !res.DryRun {
		t.Fatalf("dry run: %+v %v, want 2 of 2", res, err)
	}
	for _, path := range paths {
		if v := statusOf(t, h, path, "ticks"); v.Version != "1" || v.Rebuilding != nil || v.NextVersion != "2" {
			t.Fatalf("%s after a dry run: %+v, want version 1, next version 2 and no rebuild", path, v)
		}
	}
	if res, err := h.RebuildMatching(ctx, "/t/*", "ticks", false); err != nil || res.Changed != 2 || res.Failed != 0 {
		t.Fatalf("rebuild: %+v %v, want 2 of 2", res, err)
	}
	for _, path := range paths {
		if !wait.For(20*time.Second, func() bool { return statusOf(t, h, path, "ticks").Version == "2" }) {
			t.Fatalf("%s was not switched to version 2 within 20s: %+v", path, h.ProcessorsOn(ctx, path))
		}
		snap, err := h.Snapshot(ctx, path, "ticks")
		if err != nil {
			t.Fatal(err)
		}
		if v := statusOf(t, h, path, "ticks"); v.NextVersion != "" {
			t.Fatalf("%s after the switch: %+v, want no next version", path, v)
		}
		if st := state(t, snap.State); st.Ticks != 20 {
			t.Fatalf("%s after the rebuild: %+v, want 20 ticks (2 by ten)", path, st)
		}
	}
	if res, err := h.RebuildMatching(ctx, "/t/*", "ticks", true); err != nil || res.Changed != 0 {
		t.Fatalf("dry run after the switch: %+v %v, want none left", res, err)
	}
}

// A bulk verb reads what it decides on a page at a time: over n streams listed five at a time,
// a dry run of each verb reads the store about twice per page (the page's list, then its state
// rows or checkpoints), not once per stream. Counted on PostgreSQL, whose driver counts its read
// transactions; with two engines open at most, most streams' failing state is the stored row's.
func TestABulkVerbReadsItsStreamsStateOncePerPage(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := openStore(t, db, nil)
	defer s.Close(context.Background())
	h, err := host.New(s, host.Config{Logger: quietLog, MaxOpenEngines: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	const n, page = 60, 5
	host.SetBulkPage(h, page)
	if err := host.RegisterPattern(ctx, h, "/b/*", newTicker(t, "ticks")); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		path := fmt.Sprintf("/b/%02d", i)
		if _, err := s.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
			t.Fatal(err)
		}
		if err := h.WaitUntilProcessed(ctx, path, "ticks", 1, 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	const paused = 4
	for i := range paused {
		if err := h.Pause(ctx, fmt.Sprintf("/b/%02d", i*13), "ticks", "test"); err != nil {
			t.Fatal(err)
		}
	}
	next := byTen{foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[countState]{
		Slug: "ticks", Version: "2", Consumes: []string{"tick"}}))}
	if err := host.RegisterNextVersion(ctx, h, "/b/*", next); err != nil {
		t.Fatal(err)
	}
	d := s.Driver().(*pgdriver.Driver)
	// n/page full pages, then the list that finds the end; each full page one read more.
	const pages = n/page + 1
	const most = 2*pages + 10 // a few reads of the host's own may fall in; one a stream would be n and more
	for _, c := range []struct {
		verb    string
		run     func() (host.BulkResult, error)
		changed int
	}{
		{"pause", func() (host.BulkResult, error) { return h.PauseMatching(ctx, "/b/*", "ticks", "", true) }, n - paused},
		{"resume", func() (host.BulkResult, error) { return h.ResumeMatching(ctx, "/b/*", "ticks", true) }, paused},
		{"retry", func() (host.BulkResult, error) { return h.RetryMatching(ctx, "/b/*", "ticks", true) }, 0},
		{"skip", func() (host.BulkResult, error) { return h.SkipMatching(ctx, "/b/*", "ticks", "", true) }, 0},
		{"rebuild", func() (host.BulkResult, error) { return h.RebuildMatching(ctx, "/b/*", "ticks", true) }, n},
	} {
		before := testhooks.PGReads(d)
		res, err := c.run()
		reads := testhooks.PGReads(d) - before
		if err != nil || res.Matched != n || res.Changed != c.changed {
			t.Errorf("%s dry run: %+v %v, want %d of %d", c.verb, res, err, c.changed, n)
		}
		if reads > most {
			t.Errorf("%s dry run over %d streams, %d a page: %d reads, want %d at most", c.verb, n, page, reads, most)
		}
		t.Logf("%s: %d reads", c.verb, reads)
	}
}
