package stream

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
)

// TestAWakeRecordIsPreparedAsItsInputWouldBe: the wake record built without reflection for the
// store's own reasons is the input prepareInputs makes of it and the same stored body bytes, for
// any incarnation; other reasons take prepareInputs itself.
func TestAWakeRecordIsPreparedAsItsInputWouldBe(t *testing.T) {
	for _, reason := range []string{WakeRequest, WakeAlarm, `odd <"reason">`} {
		for _, inc := range []int64{1, 2, 10, 12345, 1 << 40, 1<<63 - 1} {
			want, err := prepareInputs([]foldtype.EventInput{wokenInput(inc, reason)})
			if err != nil {
				t.Fatal(err)
			}
			got, err := preparedWoken(inc, reason)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.prefix, want[0].prefix) {
				t.Fatalf("%q, incarnation %d: body %s, want %s", reason, inc, got.prefix, want[0].prefix)
			}
			if !bytes.Equal(got.in.Payload, want[0].in.Payload) {
				t.Fatalf("%q, incarnation %d: payload %s, want %s", reason, inc, got.in.Payload, want[0].in.Payload)
			}
			g, w := got.in, want[0].in
			g.Payload, w.Payload = nil, nil
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("%q, incarnation %d: input %+v, want %+v", reason, inc, g, w)
			}
		}
	}
}
