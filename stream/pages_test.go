package stream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/internal/harness/pgtest"
	"github.com/foldstream/foldstream/stream"
)

// TestJSONPagesEndAtRecordsTheyCannotTakeWhole checks page reads on SQLite and PostgreSQL: a page
// that is at least half full ends before a record that does not fit whole (the next page takes it
// whole, instead of both reading it for a part each), one less than half full takes part of it,
// and paging from the start hands out every message once, in order, with Stream-Up-To-Date only
// at the end.
func TestJSONPagesEndAtRecordsTheyCannotTakeWhole(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) *stream.Store{
		"sqlite":   func(t *testing.T) *stream.Store { return openPG(t, filepath.Join(t.TempDir(), "pages.db")) },
		"postgres": func(t *testing.T) *stream.Store { return openPG(t, pgtest.URL(t)) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			ctx := context.Background()
			p := s.Protocol()
			if _, err := p.CreateStream(ctx, stream.CreateRequest{Path: "pages", ContentType: "application/json"}); err != nil {
				t.Fatal(err)
			}
			// Records of 10 messages of 100 bytes (about 1 KB each), and one of 30.
			msg := func(i int) string {
				return fmt.Sprintf(`{"i":%d,"p":"%s"}`, i, bytes.Repeat([]byte("x"), 100-len(fmt.Sprintf(`{"i":%d,"p":""}`, i))))
			}
			n := 0
			for r, size := range []int{10, 10, 10, 30, 10, 10, 10, 10} {
				var b bytes.Buffer
				b.WriteByte('[')
				for k := 0; k < size; k++ {
					if k > 0 {
						b.WriteByte(',')
					}
					n++
					b.WriteString(msg(n))
				}
				b.WriteByte(']')
				if _, err := p.AppendRecord(ctx, stream.AppendRequest{Path: "pages", ContentType: "application/json", Body: b.Bytes()}); err != nil {
					t.Fatalf("record %d: %v", r, err)
				}
			}
			const page = 2500 // two 1 KB records fit whole; the third ends a page at least half full
			var got []int
			after := int64(0)
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatal("no end after 20 pages")
				}
				res, err := p.ReadRecords(ctx, stream.ReadRequest{Path: "pages", After: after, MaxBytes: page})
				if err != nil {
					t.Fatal(err)
				}
				var msgs []struct{ I int }
				if err := json.Unmarshal(res.Body, &msgs); err != nil {
					t.Fatalf("page %d: %v: %s", pages, err, res.Body)
				}
				for _, m := range msgs {
					got = append(got, m.I)
				}
				if len(res.Body) > page+2+len(msgs) {
					t.Fatalf("page %d holds %d bytes, over its %d", pages, len(res.Body), page)
				}
				switch pages {
				case 0: // records 1 and 2 whole; record 3 would not fit and the page is half full
					if len(msgs) != 20 || res.UpToDate {
						t.Fatalf("page 0: %d messages, up to date %v; want the first two records (20), not up to date", len(msgs), res.UpToDate)
					}
				case 1: // record 3 whole; record 4 (3 KB) would not fit: the page takes part of it
					if len(msgs) <= 10 || len(msgs) >= 40 {
						t.Fatalf("page 1: %d messages; want record 3 and part of record 4", len(msgs))
					}
				}
				after = res.Next
				if res.UpToDate {
					break
				}
			}
			if len(got) != n {
				t.Fatalf("paging handed out %d messages, want %d", len(got), n)
			}
			for i, v := range got {
				if v != i+1 {
					t.Fatalf("message %d is %d, want %d", i, v, i+1)
				}
			}
		})
	}
}
