package stream

import (
	"context"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream/internal/feeds"
)

// TestAFeedKickedWhileTheStoreClosesStartsNoCatchUp: the listener that kicks a path's feed when
// another node commits stops only after Close waited for the background goroutines. A kick that
// comes once Close began starts no catch-up goroutine: counted then, it would race Close's wait
// (a WaitGroup's Add from zero while Wait runs) and read a database being closed.
func TestAFeedKickedWhileTheStoreClosesStartsNoCatchUp(t *testing.T) {
	t.Parallel()
	s := openPGStore(t, pgtest.URL(t))
	ctx := context.Background()
	if _, err := s.Events().Stream("/k").Append(ctx, foldtype.EventInput{Type: "tick"}); err != nil {
		t.Fatal(err)
	}
	sub, err := s.Events().Subscribe("/k", func(context.Context, []foldtype.Event, foldtype.ScannedRange) error { return nil }, SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if !feeds.HasFeed(s.pushes, "/k") {
		t.Fatal("no feed for a subscribed path on a shared database")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	feeds.KickFeed(s.pushes, "/k")
	if feeds.FeedRunning(s.pushes, "/k") {
		t.Fatal("a kick after Close started the feed's catch-up goroutine")
	}
}
