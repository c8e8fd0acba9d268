package stream

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// openingPage is the page ReadOpening for work answers for an engine whose checkpoint is at after,
// and whether the writer's recent events (recent.go) held it.
func openingPage(t *testing.T, s *Store, path string, after int64, limit int) (foldtype.ReadPage, bool) {
	t.Helper()
	ctx := context.Background()
	var served bool
	if err := s.k.Write(ctx, func(tx *kernel.Tx) error {
		m, err := tx.Stream(path)
		if err != nil {
			return err
		}
		row := m.Row
		row.Tail = m.Tail
		_, served = s.recentExt.Get(m).page(&row, after, limit, s.ev.readBudget)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	o, err := s.Events().ReadOpening(ctx, OpeningRequest{Path: path, Slugs: []string{"p"}, ForWork: true,
		After: func(map[string]foldtype.Checkpoint) int64 { return after }, Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if !o.HasPage {
		t.Fatal("no page")
	}
	return o.Page, served
}

// samePage fails unless got is the page a read of the log after after gives, event by event
// (payloads, metadata and sources as JSON values).
func samePage(t *testing.T, s *Store, path string, got foldtype.ReadPage, after int64, limit int) {
	t.Helper()
	want := mustRead(t, s, path, after, limit, readOptions{})
	if got.AtHead != want.AtHead || got.ScannedThroughOffset != want.ScannedThroughOffset || len(got.Events) != len(want.Events) {
		t.Fatalf("page after %d: got %d events at head %v through %d, want %d events at head %v through %d", after,
			len(got.Events), got.AtHead, got.ScannedThroughOffset, len(want.Events), want.AtHead, want.ScannedThroughOffset)
	}
	for i := range want.Events {
		g, w := got.Events[i], want.Events[i]
		if !jsonEqual(g.Payload, w.Payload) || !jsonEqual(g.Metadata, w.Metadata) || !reflect.DeepEqual(g.Source, w.Source) {
			t.Fatalf("event %d: got %+v, want %+v", i, g, w)
		}
		g.Payload, g.Metadata, g.Source, w.Payload, w.Metadata, w.Source = nil, nil, nil, nil, nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("event %d: got %+v, want %+v", i, g, w)
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestEngineOpeningForWorkAnswersTheEventsJustAppendedAsTheLogHoldsThem: while a host watches
// commits, the opening read in the writer answers the events after the checkpoint from the
// events the writer just appended, with no read of the records — the same page the log gives,
// across batches, ephemerals between them, a wake record and a checkpoint inside the batch.
func TestEngineOpeningForWorkAnswersTheEventsJustAppendedAsTheLogHoldsThem(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	defer s.Events().WatchCommits(func(string) {})()
	ctx := context.Background()
	src := &foldtype.Source{Processor: &foldtype.ProcessorSource{Slug: "cart", Version: "1"}}
	mustAppend(t, s, "/a",
		foldtype.EventInput{Type: "x", Payload: json.RawMessage(` {"n": 1, "html": "<b>&"} `), Metadata: json.RawMessage(`{"m":[1, 2]}`)},
		foldtype.EventInput{Type: "y", IdempotencyKey: "k1", Source: src})
	mustAppend(t, s, "/a", eph("live"), ev("z"))
	if _, err := s.Events().WakeExisting(ctx, "/a", WakeRequest); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "/a", foldtype.EventInput{Type: "y", IdempotencyKey: "k1", Source: src}, ev("w")) // a replay and a new one
	for _, after := range []int64{0, 1, 2, 4, 5, 6} {
		page, served := openingPage(t, s, "/a", after, 500)
		if !served {
			t.Fatalf("after %d: the page was read from the log, want it from the events just appended", after)
		}
		samePage(t, s, "/a", page, after, 500)
	}
	// A limit the events do not fit is left to the read, which cuts the page.
	page, served := openingPage(t, s, "/a", 0, 2)
	if served {
		t.Fatal("a page over its limit came from the events just appended, want the read's cut page")
	}
	samePage(t, s, "/a", page, 0, 2)
}

// TestEngineOpeningForWorkReadsTheLogWhenTheRecentEventsAreNotAllOfIt: the events just appended
// answer an opening only while they hold every event after its checkpoint: not after a write
// that moved the tail some other way (a protocol append), not for a checkpoint before them, and
// never from a batch whose group failed to commit.
func TestEngineOpeningForWorkReadsTheLogWhenTheRecentEventsAreNotAllOfIt(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	defer s.Events().WatchCommits(func(string) {})()
	ctx := context.Background()
	mustAppend(t, s, "/a", ev("x"), ev("x"))
	if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/a", ContentType: "application/json",
		Body: []byte(`{"type":"raw","payload":{"n":1}}`)}); err != nil {
		t.Fatal(err)
	}
	page, served := openingPage(t, s, "/a", 0, 500)
	if served {
		t.Fatal("after a protocol append the page came from the events appended before it")
	}
	samePage(t, s, "/a", page, 0, 500)

	mustAppend(t, s, "/a", ev("y"))
	if page, served = openingPage(t, s, "/a", 3, 500); !served {
		t.Fatal("the event appended after the checkpoint was read from the log")
	}
	samePage(t, s, "/a", page, 3, 500)
	if page, served = openingPage(t, s, "/a", 2, 500); served {
		t.Fatal("a checkpoint before the events just appended was answered from them")
	}
	samePage(t, s, "/a", page, 2, 500)

	// A batch whose group fails leaves nothing behind: the event append and then the protocol
	// append that land at the same offsets next are what the opening reads.
	failed := func() {
		t.Helper()
		errs := groupWithFailingCommit(t, s, func() error {
			_, err := s.Events().Stream("/a").Append(ctx, ev("lost"), ev("lost"))
			return err
		})
		if errs[0] == nil {
			t.Fatal("the append in the failed group succeeded")
		}
	}
	failed()
	mustAppend(t, s, "/a", ev("kept"))
	if page, served = openingPage(t, s, "/a", 3, 500); !served || len(page.Events) != 2 || page.Events[1].Type != "kept" {
		t.Fatalf("after the failed group and an event append: got %+v (from the events just appended: %v), want [y kept] from them", page.Events, served)
	}
	samePage(t, s, "/a", page, 3, 500)
	failed()
	if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: "/a", ContentType: "application/json",
		Body: []byte(`{"type":"kept"}`)}); err != nil {
		t.Fatal(err)
	}
	page, _ = openingPage(t, s, "/a", 5, 500)
	if len(page.Events) != 1 || page.Events[0].Type != "kept" {
		t.Fatalf("after the failed group: got %+v, want the protocol append's event", page.Events)
	}
	samePage(t, s, "/a", page, 5, 500)
}

// TestRecentEventsStayWithinTheirBudget: the writer keeps recent events for at most
// recentTotalBytes of them, dropping the streams that kept theirs longest ago.
func TestRecentEventsStayWithinTheirBudget(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	defer s.Events().WatchCommits(func(string) {})()
	body := json.RawMessage(`{"s":"` + strings.Repeat("a", 30<<10) + `"}`)
	n := 2*recentTotalBytes/len(body) + 1
	for i := range n {
		mustAppend(t, s, "/s/"+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)),
			foldtype.EventInput{Type: "big", Payload: body})
	}
	var kept, bytes int
	if err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
		kept, bytes = len(s.ls.recent.by), s.ls.recent.bytes
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if bytes > recentTotalBytes || kept == 0 || kept >= n {
		t.Fatalf("recent events: %d streams keep %d bytes, want some of the %d streams within %d bytes", kept, bytes, n, recentTotalBytes)
	}
	if page, served := openingPage(t, s, "/s/aaa", 0, 500); served {
		t.Fatal("the first stream still keeps its events past the budget")
	} else {
		samePage(t, s, "/s/aaa", page, 0, 500)
	}
}

// TestRecentEventsOrderStaysBoundedWhenStreamsStopAndStartKeeping: a stream whose recent events
// are dropped and kept again over and over (event appends between protocol appends, say) leaves
// no trail in the order of streams that started keeping them, while the total stays far under its
// budget; the live entry is still the one dropped first when the budget is passed.
func TestRecentEventsOrderStaysBoundedWhenStreamsStopAndStartKeeping(t *testing.T) {
	s, _ := setup(t)
	kept := &kernel.StreamState{}
	s.recentExt.Set(kept, &recentEvents{mem: 100})
	ws := &s.ls
	// keptRecent runs on the writer: in a write function.
	if err := s.k.Write(context.Background(), func(*kernel.Tx) error {
		for range 10_000 {
			s.keptRecent("/toggling", kept)
			s.keptRecent("/toggling", &kernel.StreamState{})
		}
		s.keptRecent("/toggling", kept)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(ws.recent.order); n > 2*len(ws.recent.by)+recentOrderSlack {
		t.Fatalf("%d entries in the order for %d streams keeping recent events", n, len(ws.recent.by))
	}
	if e, ok := ws.recent.by["/toggling"]; !ok || ws.recent.bytes != 100 || e.bytes != 100 {
		t.Fatalf("kept %+v (%v), %d bytes in all; want the stream's 100 bytes", e, ok, ws.recent.bytes)
	}
	if at := ws.recent.order[len(ws.recent.order)-1]; at.path != "/toggling" || at.seq != ws.recent.by["/toggling"].seq {
		t.Fatalf("last in the order %+v, want the live entry of /toggling", at)
	}
}

// TestRecentEventsAnOpeningReadAreDroppedFirst: events an opening took its page from count against
// recentReadBytes, dropped in the order they were read, while the unread ones stay within their
// own budget; an append to a stream whose events were read makes them unread again.
func TestRecentEventsAnOpeningReadAreDroppedFirst(t *testing.T) {
	t.Parallel()
	s, _ := setupFile(t)
	defer s.Events().WatchCommits(func(string) {})()
	body := json.RawMessage(`{"s":"` + strings.Repeat("a", 30<<10) + `"}`)
	n := 2*recentReadBytes/len(body) + 1 // all of them far within recentTotalBytes
	path := func(i int) string { return "/s/" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) }
	for i := range n {
		mustAppend(t, s, path(i), foldtype.EventInput{Type: "big", Payload: body})
	}
	for i := range n {
		if page, served := openingPage(t, s, path(i), 0, 500); !served {
			t.Fatalf("stream %d: the opening page was read from the log, want it from the events just appended", i)
		} else {
			samePage(t, s, path(i), page, 0, 500)
		}
	}
	recent := func() recentKept {
		var k recentKept
		if err := s.k.Write(context.Background(), func(tx *kernel.Tx) error {
			k = s.ls.recent
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return k
	}
	k := recent()
	if k.readBytes > recentReadBytes || k.bytes != 0 || len(k.by) == 0 || len(k.by) >= n {
		t.Fatalf("after %d openings: %d streams keep %d bytes read and %d unread; want some of them, within %d bytes read and none unread",
			n, len(k.by), k.readBytes, k.bytes, recentReadBytes)
	}
	if page, served := openingPage(t, s, path(0), 0, 500); served {
		t.Fatal("the stream read first still keeps its events past the budget of read events")
	} else {
		samePage(t, s, path(0), page, 0, 500)
	}
	last := path(n - 1)
	mustAppend(t, s, last, ev("x"))
	if e := recent().by[last]; e.read || e.bytes == 0 {
		t.Fatalf("after an append the stream's entry is %+v, want its events unread", e)
	}
	if page, served := openingPage(t, s, last, 0, 500); !served || len(page.Events) != 2 {
		t.Fatalf("after an append: %d events (from the events just appended: %v), want both from them", len(page.Events), served)
	}
}
