package server

import (
	"strconv"
	"testing"
	"time"
)

func TestNextCursor(t *testing.T) {
	t.Parallel()
	now := cursorEpoch.Add(100*cursorInterval + time.Second) // interval 100
	cases := []struct {
		client  string
		want    int64 // exact, or -1 for "greater than the client's"
		atLeast int64
	}{
		{client: "", want: 100},
		{client: "abc", want: 100},
		{client: "99", want: 100},
		{client: "-5", want: 100},
		{client: "100", want: -1, atLeast: 101},
		{client: "5000", want: -1, atLeast: 5001},
	}
	for _, c := range cases {
		for range 50 {
			got, err := strconv.ParseInt(nextCursor(now, c.client), 10, 64)
			if err != nil {
				t.Fatalf("nextCursor(%q): %v", c.client, err)
			}
			if c.want >= 0 && got != c.want {
				t.Fatalf("nextCursor(%q): got %d, want %d", c.client, got, c.want)
			}
			if c.want < 0 && (got < c.atLeast || got > c.atLeast+180) {
				t.Fatalf("nextCursor(%q): got %d, want in [%d, %d]", c.client, got, c.atLeast, c.atLeast+180)
			}
		}
	}
}

func TestUTF8Boundary(t *testing.T) {
	t.Parallel()
	s := []byte("a☃") // ☃ is 3 bytes
	for n, want := range map[int]int{0: 0, 1: 1, 2: 1, 3: 1, 4: 4} {
		if got := utf8Boundary(s[:n]); got != want {
			t.Errorf("utf8Boundary(%q): got %d, want %d", s[:n], got, want)
		}
	}
}

func TestETagMatches(t *testing.T) {
	t.Parallel()
	tag := `"abc:1:2"`
	for header, want := range map[string]bool{
		tag: true, `W/` + tag: true, `"x", ` + tag: true, `*`: true, `"abc:1:3"`: false, ``: false,
	} {
		if got := etagMatches(header, tag); got != want {
			t.Errorf("etagMatches(%q): got %v, want %v", header, got, want)
		}
	}
}
