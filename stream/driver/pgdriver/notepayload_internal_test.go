package pgdriver

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
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
	for _, c := range []struct{ streams, size int }{{0, 0}, {1, 0}, {1, 200}, {4, 200}, {8, 200}, {9, 200}, {10, 200}, {16, 200},
		{1, 5000}, {1, 6000}, {1, 7000}, {1, 7300}, {2, 3000}, {2, 2700}} {
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
		if min := w.minRowsSize(); min > len(with) || min < len(with)-40 {
			t.Errorf("%d streams of %d bytes: lower bound %d not within 40 bytes under the marshaled size %d", c.streams, c.size, min, len(with))
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

// A row's length as rowJSONLen counts it is its JSON's when its strings need no escaping, and
// under it when they do, whichever columns are null, negative or large.
func TestRowJSONLenIsALowerBound(t *testing.T) {
	for _, row := range []driver.Stream{{}, {Closed: true}, {ID: 1, Path: "/a", ContentType: "text/plain"},
		{TTLSeconds: sql.NullInt64{Valid: true}, Paused: sql.NullString{String: "why", Valid: true}},
		{ID: math.MaxInt64, State: -1, CreatedMs: 1700000000000, LastAccessMs: math.MinInt64, ForkOffset: 10, ForkSubOffset: 9,
			BaseTail: 100, Tail: -5, Incarnation: 12, Highest: 99999, ExpiresAtMs: sql.NullInt64{Int64: -77},
			ClosedByEpoch: sql.NullInt64{Int64: 123, Valid: true}, ClosedBySeq: sql.NullInt64{Int64: 4}, ForkedFrom: sql.NullInt64{Int64: 1 << 40, Valid: true},
			ClosedByProducer: sql.NullString{String: "p", Valid: true}, StreamSeq: sql.NullString{String: "s"}}} {
		b, _ := json.Marshal(row)
		if got := rowJSONLen(&row); got != len(b) {
			t.Errorf("rowJSONLen = %d, JSON is %d bytes: %s", got, len(b), b)
		}
	}
	escaped := driver.Stream{Path: "/a<b>\"", ContentType: "text/é", Paused: sql.NullString{String: "\n\x00", Valid: true}}
	b, _ := json.Marshal(escaped)
	if got := rowJSONLen(&escaped); got > len(b) {
		t.Errorf("rowJSONLen = %d over the JSON's %d bytes: %s", got, len(b), b)
	}
}
