package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

func TestListStreamsPagesInPathOrder(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, p := range []string{"/l/c", "/l/a", "/m", "/l/b"} {
		s, err := client.NewStream(base+"/v1/stream"+p, client.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for range 4 {
		page, err := client.ListStreams(ctx, base, client.ListOptions{Prefix: "/l/", After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page.Streams {
			got = append(got, s.Path)
			if s.ContentType != "text/plain" || s.CreatedAt.IsZero() || s.Tail == "" {
				t.Errorf("entry %+v: want text/plain, a creation time and a tail", s)
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if want := []string{"/l/a", "/l/b", "/l/c"}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("listed %v, want %v", got, want)
	}
	_, err := client.ListStreams(ctx, base, client.ListOptions{Limit: 5000})
	if !errors.Is(err, client.ErrBadRequest) {
		t.Errorf("limit 5000: %v, want BAD_REQUEST", err)
	}
	if _, err := client.ListStreams(ctx, "not a url", client.ListOptions{}); client.CodeOf(err) != client.CodeInvalidArgument {
		t.Errorf("bad base URL: %v, want INVALID_ARGUMENT", err)
	}
}
