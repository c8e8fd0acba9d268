package pgdriver

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/stream/driver"
)

// noteOf is a notification of n streams, each with its row and one record of a body of size bytes.
func noteOf(n, size int) wireNote {
	w := wireNote{Node: "0123456789abcdef"}
	for i := range n {
		row := &driver.Stream{ID: int64(i + 1), Path: fmt.Sprintf("/s/%d", i), ContentType: "application/json",
			Tail: int64(size), Highest: int64(size), TTLSeconds: sql.NullInt64{Int64: 3600, Valid: true}}
		w.Streams = append(w.Streams, wireStream{ID: row.ID, Path: row.Path, Row: row,
			Recs: []wireRecord{{RecordStart: 0, Start: 0, End: int64(size), CreatedMs: 1, Body: []byte(strings.Repeat("x", size))}}})
	}
	return w
}

// A notification carries its streams' rows and records exactly when they fit under NOTIFY's
// limit, whether or not their size alone already tells they cannot; the payload is the one
// json.Marshal gives with them, or without them.
func TestNotificationCarriesRowsExactlyWhenTheyFit(t *testing.T) {
	for _, c := range []struct{ streams, size int }{{0, 0}, {1, 0}, {1, 200}, {4, 200}, {8, 200}, {9, 200}, {10, 200}, {16, 200}, {1, 5000}, {1, 6000}, {2, 3000}} {
		w := noteOf(c.streams, c.size)
		with, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		want := with
		if len(with) > maxNotifyPayload {
			bare := noteOf(c.streams, c.size)
			for i := range bare.Streams {
				bare.Streams[i].Row, bare.Streams[i].Recs = nil, nil
			}
			want, _ = json.Marshal(bare)
		}
		if min := w.minRowsSize(); min > len(with) {
			t.Errorf("%d streams of %d bytes: lower bound %d over the marshaled size %d", c.streams, c.size, min, len(with))
		}
		got, err := notePayload(&w)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%d streams of %d bytes: payload\n%s\nwant\n%s", c.streams, c.size, got, want)
		}
	}
}

// The shortest row JSON is no longer than any row's, whichever columns are null.
func TestMinRowJSONIsALowerBound(t *testing.T) {
	for _, row := range []driver.Stream{{}, {Closed: true}, {ID: 1, Path: "/a", ContentType: "text/plain"},
		{TTLSeconds: sql.NullInt64{Valid: true}, Paused: sql.NullString{String: "why", Valid: true}}} {
		b, _ := json.Marshal(row)
		if got := minRowJSON + len(row.Path) + len(row.ContentType); got > len(b) {
			t.Errorf("bound %d over %d for %s", got, len(b), b)
		}
	}
}
