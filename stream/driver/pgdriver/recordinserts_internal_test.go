package pgdriver

import (
	"reflect"
	"testing"
)

// A run of two or more consecutive record inserts is sent as one statement over arrays, numbered
// as the first of its run; a SAVEPOINT (or any other statement) ends a run, a lone insert is sent
// as it is, and a queue with nothing to join is returned unchanged.
func TestConsecutiveRecordInsertsAreJoinedUpToTheNextOtherStatement(t *testing.T) {
	ins := func(n int, start int64, frames, body []byte) queued {
		return queued{sql: insertRecordSQL, n: n, args: []any{int64(7), start, start, start + 1, int64(100) + start, frames, body}}
	}
	other := func(n int, sql string) queued { return queued{sql: sql, n: n} }
	queue := []queued{
		other(1, "BEGIN"),
		ins(2, 0, nil, []byte("a")), ins(3, 1, []byte{1}, []byte("b")),
		other(4, "SAVEPOINT w"),
		ins(5, 2, nil, []byte{}), ins(6, 3, nil, []byte("d")), ins(7, 4, []byte{}, []byte("e")),
		other(8, "SELECT 1"),
		ins(9, 5, nil, []byte("f")),
	}
	got := joinRecordInserts(queue)
	want := []queued{
		other(1, "BEGIN"),
		{sql: insertRecordsSQL, n: 2, args: []any{[]int64{7, 7}, []int64{0, 1}, []int64{0, 1}, []int64{1, 2}, []int64{100, 101},
			[][]byte{nil, {1}}, [][]byte{[]byte("a"), []byte("b")}}},
		other(4, "SAVEPOINT w"),
		{sql: insertRecordsSQL, n: 5, args: []any{[]int64{7, 7, 7}, []int64{2, 3, 4}, []int64{2, 3, 4}, []int64{3, 4, 5}, []int64{102, 103, 104},
			[][]byte{nil, nil, {}}, [][]byte{{}, []byte("d"), []byte("e")}}},
		other(8, "SELECT 1"),
		ins(9, 5, nil, []byte("f")),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("joined queue\n%#v\nwant\n%#v", got, want)
	}

	lone := []queued{other(1, "BEGIN"), ins(2, 0, nil, []byte("a")), other(3, "SAVEPOINT w"), ins(4, 1, nil, []byte("b"))}
	if got := joinRecordInserts(lone); &got[0] != &lone[0] || !reflect.DeepEqual(got, lone) {
		t.Fatalf("a queue with no run of inserts came back changed: %#v", got)
	}
}
