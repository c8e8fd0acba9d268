package stream_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// The pause rules themselves run on both drivers in stream/driver/drivertest (RunPause); these
// check that the state is durable beyond one store's memory.

func pauseInput(reason string) foldtype.EventInput {
	return foldtype.EventInput{Type: foldtype.TypeStreamPaused, Payload: foldtype.JSON(map[string]string{"reason": reason})}
}

// S-08: the pause is part of the stream's durable state, not of the writer's memory.
func TestPauseSurvivesReopeningTheStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := storeopen.Open(ctx, path, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "a"}, pauseInput("disk swap")); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	s, err = storeopen.Open(ctx, path, storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "b"}); !errors.Is(err, foldtype.ErrStreamPaused) || err.Error() != "stream paused: disk swap" {
		t.Fatalf("append after reopen: got %v, want STREAM_PAUSED with the reason", err)
	}
	if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: foldtype.TypeStreamResumed}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "b"}); err != nil || got[0].Offset != 4 {
		t.Fatalf("append after resume: got %+v %v, want offset 4", got, err)
	}
}

// S-08 on PostgreSQL: a pause written by one node refuses the next append on another.
func TestPauseOnOneNodeRefusesAppendsOnAnother(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	if _, err := b.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "warm"}); err != nil {
		t.Fatal(err) // b caches the stream before a pauses it
	}
	if _, err := a.Events().Stream("/p").Append(ctx, pauseInput("node a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "x"}); !errors.Is(err, foldtype.ErrStreamPaused) {
		t.Fatalf("append on the other node: got %v, want STREAM_PAUSED", err)
	}
	if _, err := b.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: foldtype.TypeStreamResumed}); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "x"}); err != nil || got[0].Offset != 4 {
		t.Fatalf("append after the resume: got %+v %v, want offset 4", got, err)
	}
}
