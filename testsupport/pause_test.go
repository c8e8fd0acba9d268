package testsupport_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/testsupport"
)

type appendFunc func(ctx context.Context, in ...foldtype.EventInput) ([]foldtype.Event, error)

// pauseScenario runs the pause rules (S-08, S-12) and returns each step's outcome, so the memory
// stream and the store can be compared step by step.
func pauseScenario(t *testing.T, app appendFunc) []string {
	t.Helper()
	ctx := context.Background()
	var steps []string
	step := func(in ...foldtype.EventInput) {
		got, err := app(ctx, in...)
		if err != nil {
			var fe *foldtype.Error
			if !errors.As(err, &fe) {
				t.Fatalf("uncoded refusal: %v", err)
			}
			steps = append(steps, string(fe.Code)+" "+fe.Message)
			return
		}
		s := "ok"
		for _, e := range got {
			s += " " + e.Type + "@" + itoa(e.Offset)
		}
		steps = append(steps, s)
	}
	keyed := foldtype.EventInput{Type: "order", IdempotencyKey: "k", Payload: []byte(`{"n":1}`)}
	pause := foldtype.EventInput{Type: foldtype.TypeStreamPaused, Payload: []byte(`{"reason":"maintenance"}`)}
	resume := foldtype.EventInput{Type: foldtype.TypeStreamResumed}
	step(keyed)
	step(foldtype.EventInput{Type: foldtype.TypeStreamPaused, Payload: []byte(`{"reason":5}`)}) // S-12: lands, configures nothing
	step(in("flows"))
	step(pause)
	step(in("refused"))                                   // S-08: STREAM_PAUSED with the reason
	step(resume, in("mixed"))                             // S-08: a mixed batch is refused whole
	step(keyed)                                           // S-08: an idempotent replay is admitted
	step(foldtype.EventInput{Type: "e", Ephemeral: true}) // ephemerals flow
	step(resume)                                          // S-08: the resume always lands
	step(in("after"))                                     // no offset was burnt
	return steps
}

func itoa(n int64) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// S-08, S-12: the memory stream pauses exactly as the store does — same refusals, same codes,
// same messages, same offsets.
func TestMemoryStreamPausesLikeTheStore(t *testing.T) {
	t.Parallel()
	mem := testsupport.NewMemoryStreamAt("/p")
	got := pauseScenario(t, mem.Append)
	store, err := storeopen.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), storeopen.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	want := pauseScenario(t, store.Events().Stream("/p").Append)
	if len(got) != len(want) {
		t.Fatalf("memory stream: %q\nstore: %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d: memory stream %q, store %q", i+1, got[i], want[i])
		}
	}
	if want[4] != "STREAM_PAUSED stream paused: maintenance" || want[9] != "ok after@7" {
		t.Fatalf("store steps: %q", want)
	}
	if p, _ := mem.Paused(); p {
		t.Fatal("the memory stream is still paused after the resume")
	}
}

// §17.2: the stand-in's idempotency conflict carries the code and data {existingOffset}.
func TestMemoryStreamIdempotencyConflictIsCoded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem := testsupport.NewMemoryStream()
	if _, err := mem.Append(ctx, in("a"), foldtype.EventInput{Type: "k", IdempotencyKey: "k"}); err != nil {
		t.Fatal(err)
	}
	_, err := mem.Append(ctx, foldtype.EventInput{Type: "other", IdempotencyKey: "k"})
	var fe *foldtype.Error
	if !errors.As(err, &fe) || fe.Code != foldtype.CodeIdempotencyConflict || fe.Data["existingOffset"] != int64(2) {
		t.Fatalf("got %#v, want IDEMPOTENCY_CONFLICT with existingOffset 2", err)
	}
}

// §17.9: CommittedEvent builds an event at path "/", createdAt offset seconds after the epoch,
// origin "/".
func TestCommittedEventHasPathCreatedAtAndOrigin(t *testing.T) {
	t.Parallel()
	ev := testsupport.CommittedEvent(3, "tick", []byte(`{"n":1}`))
	if ev.Offset != 3 || ev.Type != "tick" || string(ev.Payload) != `{"n":1}` || ev.Path != "/" ||
		ev.CreatedAt != "1970-01-01T00:00:03.000Z" || ev.Source == nil || ev.Source.Origin != "/" {
		t.Fatalf("got %+v", ev)
	}
}
