package drivertest

import (
	"context"
	"errors"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/stream"
)

func pauseEv(reason string) foldtype.EventInput {
	return foldtype.EventInput{Type: foldtype.TypeStreamPaused, Payload: foldtype.JSON(map[string]any{"reason": reason})}
}

func resumeEv() foldtype.EventInput {
	return foldtype.EventInput{Type: foldtype.TypeStreamResumed}
}

func mustAppend(t *testing.T, s *stream.Store, path string, in ...foldtype.EventInput) []foldtype.Event {
	t.Helper()
	got, err := s.Events().Stream(path).Append(context.Background(), in...)
	if err != nil {
		t.Fatalf("append %v: %v", in, err)
	}
	return got
}

// wantPaused checks that an append is refused as STREAM_PAUSED with the reason.
func wantPaused(t *testing.T, err error, reason string) {
	t.Helper()
	var fe *foldtype.Error
	if !errors.As(err, &fe) || fe.Code != foldtype.CodeStreamPaused {
		t.Fatalf("got %v, want STREAM_PAUSED", err)
	}
	if fe.Message != "stream paused: "+reason || fe.Data["reason"] != reason {
		t.Fatalf("got %q data %v, want %q", fe.Message, fe.Data, "stream paused: "+reason)
	}
}

func durableTypes(t *testing.T, s *stream.Store, path string) []string {
	t.Helper()
	page, err := s.Events().Stream(path).Read(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range page.Events {
		out = append(out, e.Type)
	}
	return out
}

func wantState(t *testing.T, s *stream.Store, path string, paused bool, reason string) {
	t.Helper()
	info, err := s.Protocol().HeadStream(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Paused != paused || info.PauseReason != reason {
		t.Fatalf("head: paused %v %q, want %v %q", info.Paused, info.PauseReason, paused, reason)
	}
	list, err := s.Protocol().ListStreams(context.Background(), stream.ListOptions{Prefix: path})
	if err != nil || len(list) != 1 || list[0].Paused != paused || list[0].PauseReason != reason {
		t.Fatalf("list: got %+v %v, want paused %v %q", list, err, paused, reason)
	}
}

// RunPause runs the pause and resume rules (docs/store.md#pausing-a-stream; the contract's stream
// cases S-08 and S-12, docs/engine.md#acceptance-cases) over the driver.
func RunPause(t *testing.T, newDriver Factory) {
	ctx := context.Background()

	// S-08
	t.Run("PausedStreamRefusesFreshEventsAndBurnsNoOffset", func(t *testing.T) {
		s := openStore(t, newDriver)
		mustAppend(t, s, "/p", foldtype.EventInput{Type: "a"})
		p := mustAppend(t, s, "/p", pauseEv("maintenance"))[0]
		wantState(t, s, "/p", true, "maintenance")
		for range 3 {
			_, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "b"})
			wantPaused(t, err, "maintenance")
		}
		r := mustAppend(t, s, "/p", resumeEv())[0]
		wantState(t, s, "/p", false, "")
		b := mustAppend(t, s, "/p", foldtype.EventInput{Type: "b"})[0]
		if r.Offset != p.Offset+1 || b.Offset != p.Offset+2 {
			t.Fatalf("offsets: pause %d, resume %d, next %d: refused appends burnt offsets", p.Offset, r.Offset, b.Offset)
		}
	})

	// S-08
	t.Run("MixedBatchOnPausedStreamIsRefusedWhole", func(t *testing.T) {
		s := openStore(t, newDriver)
		mustAppend(t, s, "/p", pauseEv("x"))
		_, err := s.Events().Stream("/p").Append(ctx, resumeEv(), foldtype.EventInput{Type: "b"})
		wantPaused(t, err, "x")
		if got := durableTypes(t, s, "/p"); len(got) != 1 {
			t.Fatalf("log after the refused batch: %v, want only the pause", got)
		}
		wantState(t, s, "/p", true, "x")
	})

	// S-08
	t.Run("ResumeAndPauseAlwaysLandOnPausedStream", func(t *testing.T) {
		s := openStore(t, newDriver)
		mustAppend(t, s, "/p", pauseEv("first"))
		mustAppend(t, s, "/p", pauseEv("second"))
		wantState(t, s, "/p", true, "second")
		_, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "b"})
		wantPaused(t, err, "second")
		// A batch of control events only lands whole; the last one decides.
		mustAppend(t, s, "/p", resumeEv(), pauseEv("third"), resumeEv())
		wantState(t, s, "/p", false, "")
		// A pause without a reason pauses too.
		mustAppend(t, s, "/p", foldtype.EventInput{Type: foldtype.TypeStreamPaused})
		wantState(t, s, "/p", true, foldtype.NoPauseReason)
	})

	// S-08
	t.Run("IdempotentReplayIsAdmittedWhilePaused", func(t *testing.T) {
		s := openStore(t, newDriver)
		keyed := foldtype.EventInput{Type: "order", Payload: []byte(`{"n":1}`), IdempotencyKey: "k1"}
		first := mustAppend(t, s, "/p", keyed)[0]
		mustAppend(t, s, "/p", pauseEv("hold"))
		again := mustAppend(t, s, "/p", keyed)[0]
		if again.Offset != first.Offset {
			t.Fatalf("replay got offset %d, want the stored %d", again.Offset, first.Offset)
		}
		// A replay beside a fresh event is refused with it.
		_, err := s.Events().Stream("/p").Append(ctx, keyed, foldtype.EventInput{Type: "b"})
		wantPaused(t, err, "hold")
		// A different body under the key is still a conflict, never admitted.
		if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "order", Payload: []byte(`{"n":2}`), IdempotencyKey: "k1"}); !errors.Is(err, foldtype.ErrIdempotencyConflict) {
			t.Fatalf("conflicting replay: got %v, want IDEMPOTENCY_CONFLICT", err)
		}
	})

	t.Run("EphemeralsAndWakeRecordsFlowWhilePaused", func(t *testing.T) {
		s := openStore(t, newDriver)
		mustAppend(t, s, "/p", pauseEv("hold"))
		if _, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true}); err != nil {
			t.Fatalf("ephemeral on a paused stream: %v", err)
		}
		if _, err := s.Events().Wake(ctx, "/p", "request"); err != nil {
			t.Fatalf("wake a paused stream: %v", err)
		}
		_, err := s.Events().Stream("/p").Append(ctx, foldtype.EventInput{Type: "delta", Ephemeral: true}, foldtype.EventInput{Type: "b"})
		wantPaused(t, err, "hold")
	})

	// S-12
	t.Run("MalformedControlEventsLandButConfigureNothing", func(t *testing.T) {
		s := openStore(t, newDriver)
		for _, payload := range []string{`{"reason":5}`, `{"reason":{"x":1}}`} {
			mustAppend(t, s, "/p", foldtype.EventInput{Type: foldtype.TypeStreamPaused, Payload: []byte(payload)})
			wantState(t, s, "/p", false, "")
		}
		// An ephemeral pause is never stored, so it cannot configure a durable state.
		mustAppend(t, s, "/p", foldtype.EventInput{Type: foldtype.TypeStreamPaused, Ephemeral: true})
		wantState(t, s, "/p", false, "")
		mustAppend(t, s, "/p", foldtype.EventInput{Type: "still-flowing"})

		mustAppend(t, s, "/p", pauseEv("hold"))
		// A protocol message carries payloads the event view refuses: a resume whose payload is not
		// an object lands, and the stream stays paused.
		if _, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/p", ContentType: "application/json",
			Body: []byte(`{"type":"events.iterate.com/stream/resumed","payload":7}`)}); err != nil {
			t.Fatalf("malformed resume: %v", err)
		}
		wantState(t, s, "/p", true, "hold")
		got := durableTypes(t, s, "/p")
		if n := len(got); n != 5 || got[n-1] != foldtype.TypeStreamResumed {
			t.Fatalf("log: %v, want the malformed control events landed", got)
		}
	})

	t.Run("ProtocolAppendsObeyThePause", func(t *testing.T) {
		s := openStore(t, newDriver)
		post := func(body string) error {
			_, err := s.Protocol().AppendRecord(ctx, stream.AppendRequest{Path: "/h", ContentType: "application/json", Body: []byte(body)})
			return err
		}
		if _, err := s.Protocol().CreateStream(ctx, stream.CreateRequest{Path: "/h", ContentType: "application/json"}); err != nil {
			t.Fatal(err)
		}
		if err := post(`[1, {"type":"events.iterate.com/stream/paused","payload":{"reason":"over http"}}]`); err != nil {
			t.Fatal(err)
		}
		wantState(t, s, "/h", true, "over http")
		wantPaused(t, post(`[2]`), "over http")
		wantPaused(t, post(`[{"type":"events.iterate.com\/stream\/resumed"}, 3]`), "over http")
		// An escaped type names the control event all the same.
		if err := post(`{"type":"events.iterate.com\/stream\/resumed"}`); err != nil {
			t.Fatal(err)
		}
		wantState(t, s, "/h", false, "")
		if err := post(`[4]`); err != nil {
			t.Fatal(err)
		}
	})
}
