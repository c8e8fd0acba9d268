package bench_test

import (
	"encoding/json"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/bench"
)

func TestMessageHasExactSizeAndIsJSON(t *testing.T) {
	t.Parallel()
	for _, size := range []int{bench.MessageSizeDefault, 64, 100, 1000} {
		for _, id := range []int64{0, 7, 1234567890} {
			m := bench.Message(id, size)
			if got := len(m); got != size {
				t.Errorf("len(Message(%d, %d)) = %d, want %d", id, size, got, size)
			}
			var v map[string]any
			if err := json.Unmarshal(m, &v); err != nil {
				t.Errorf("Message(%d, %d) is not JSON: %v: %s", id, size, err, m)
			}
		}
	}
}

func TestMessageBelowMinimumSizeIsMinimal(t *testing.T) {
	t.Parallel()
	small := bench.Message(1, 0)
	if got := len(bench.Message(1, 1)); got != len(small) {
		t.Errorf("len(Message(1, 1)) = %d, want the minimum %d", got, len(small))
	}
	if !json.Valid(small) {
		t.Errorf("minimal message is not JSON: %s", small)
	}
}

func TestBatchIsArrayOfMessages(t *testing.T) {
	t.Parallel()
	b := bench.Batch(100, 5, bench.MessageSizeDefault)
	var msgs []json.RawMessage
	if err := json.Unmarshal(b, &msgs); err != nil {
		t.Fatalf("batch is not a JSON array: %v", err)
	}
	if len(msgs) != 5 {
		t.Fatalf("batch holds %d messages, want 5", len(msgs))
	}
	for _, m := range msgs {
		if len(m) != bench.MessageSizeDefault {
			t.Errorf("batch message is %d bytes, want %d", len(m), bench.MessageSizeDefault)
		}
	}
	if got, want := len(b), 5*bench.MessageSizeDefault+4+2; got != want {
		t.Errorf("batch is %d bytes, want %d", got, want)
	}
	ids := bench.MessageIDs(b)
	want := []int64{100, 101, 102, 103, 104}
	if len(ids) != len(want) {
		t.Fatalf("MessageIDs = %v, want %v", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Errorf("MessageIDs = %v, want %v", ids, want)
			break
		}
	}
}

// A server may re-serialise JSON (the reference does) or reorder object keys; counting and ids
// must survive both.
func TestCountSurvivesReserialisation(t *testing.T) {
	t.Parallel()
	b := bench.Batch(0, 3, bench.MessageSizeDefault)
	var msgs []map[string]any
	if err := json.Unmarshal(b, &msgs); err != nil {
		t.Fatal(err)
	}
	again, err := json.Marshal(msgs) // encoding/json sorts map keys: a different key order
	if err != nil {
		t.Fatal(err)
	}
	if got := bench.CountMessages(again); got != 3 {
		t.Errorf("CountMessages = %d, want 3", got)
	}
	if got := bench.MessageIDs(again); len(got) != 3 || got[2] != 2 {
		t.Errorf("MessageIDs = %v, want [0 1 2]", got)
	}
	if got := bench.CountMessages([]byte("[]")); got != 0 {
		t.Errorf("CountMessages([]) = %d, want 0", got)
	}
}
