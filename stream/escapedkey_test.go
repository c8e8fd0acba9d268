package stream

import (
	"context"
	"testing"
)

// An idempotency key whose member name is written with escapes is the key the event view reads, so
// a retry of the message is a duplicate, as with the plain name.
func TestEscapedIdempotencyKeyNameDeduplicates(t *testing.T) {
	s, _ := setup(t)
	ctx := context.Background()
	path := "/escaped-key"
	if _, err := s.Protocol().CreateStream(ctx, CreateRequest{Path: path, ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"note.added","idempotency\u004bey":"k1","payload":{"n":1}}`)
	for range 2 {
		if _, err := s.Protocol().AppendRecord(ctx, AppendRequest{Path: path, ContentType: "application/json", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := s.Events().Stream(path).Read(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || page.Events[0].IdempotencyKey != "k1" {
		t.Fatalf("events after a retry: %+v, want one with key k1", page.Events)
	}
}
