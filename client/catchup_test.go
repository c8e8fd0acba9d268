package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// A catch-up that foldstream's server answers in one response of several MiB reaches the reader
// in parts of about 1 MiB — JSON arrays of whole messages, every message once and in order — and
// only the last part carries the response's offsets; messages read this way match what was
// appended.
func TestCatchUpOfALongStreamArrivesInBoundedParts(t *testing.T) {
	t.Parallel()
	// 25,000 messages under -race on a loaded machine can take longer than ctxT's 20 s.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := newStream(t, testserver.Start(t))
	if _, err := s.Create(ctx, client.CreateOptions{ContentType: "application/json"}); err != nil {
		t.Fatal(err)
	}
	const batches, per = 50, 500 // 25,000 messages of ~200 bytes: ~5 MB
	pad := strings.Repeat("x", 180)
	for b := range batches {
		var sb strings.Builder
		sb.WriteByte('[')
		for i := range per {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"n":%d,"pad":"%s"}`, b*per+i, pad)
		}
		sb.WriteByte(']')
		if _, err := s.Append(ctx, []byte(sb.String())); err != nil {
			t.Fatal(err)
		}
	}
	var parts, largest int
	next := 0
	var last client.Chunk
	for c, err := range s.Read(ctx, client.ReadOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if c.Partial {
			parts++
			if c.NextOffset != c.Offset {
				t.Fatalf("partial chunk: NextOffset %q, want its response's start %q", c.NextOffset, c.Offset)
			}
		}
		largest = max(largest, len(c.Data))
		msgs, err := client.SplitJSON(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			var v struct{ N int }
			if err := json.Unmarshal(m, &v); err != nil || v.N != next {
				t.Fatalf("message %d: got %s (%v)", next, m, err)
			}
			next++
		}
		last = c
	}
	if err := ctx.Err(); err != nil {
		// The reader ends without an error when its context does: say so rather than count.
		t.Fatalf("the read was cut by the test's deadline after %d messages: %v", next, err)
	}
	if next != batches*per {
		t.Fatalf("read %d messages, want %d", next, batches*per)
	}
	if parts < 3 || largest > 1<<20+64<<10+1024 {
		t.Fatalf("%d partial chunks, the largest %d bytes; want ≥ 3 parts of about 1 MiB", parts, largest)
	}
	if last.Partial || !last.UpToDate || last.NextOffset == "" || last.NextOffset == last.Offset {
		t.Fatalf("last chunk: %+v; want the response's end, up to date", last)
	}
}
