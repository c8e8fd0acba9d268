package sliced

import (
	"bytes"
	"strings"
	"testing"

	"github.com/foldstream/foldstream/internal/rawjson"
	"github.com/foldstream/foldstream/stream/driver"
	"github.com/foldstream/foldstream/stream/internal/kernel"
)

// A byte record's slices are contiguous, each at most kernel.RecordSliceBytes, and hold the body
// in order.
func TestByteSlicesCoverTheBodyInOrder(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), kernel.RecordSliceBytes/4)
	slices, end := byteSlices(7, 100, 1, body)
	if end != 100+int64(len(body)) {
		t.Fatalf("end %d, want %d", end, 100+len(body))
	}
	var got []byte
	pos := int64(100)
	for _, s := range slices {
		if s.StreamID != 7 || s.RecordStart != 100 || s.Start != pos || s.End != pos+int64(len(s.Body)) || len(s.Body) > kernel.RecordSliceBytes {
			t.Fatalf("slice %+v at %d", s, pos)
		}
		got = append(got, s.Body...)
		pos = s.End
	}
	if !bytes.Equal(got, body) {
		t.Fatal("the slices do not hold the body")
	}
}

// JSON messages take consecutive offsets after after, cut into slices of at most
// kernel.RecordSliceBytes between messages.
func TestJSONSlicesTakeConsecutiveOffsets(t *testing.T) {
	msg := []byte(`"` + strings.Repeat("a", 100<<10) + `"`)
	msgs := make([]rawjson.Message, 7)
	for i := range msgs {
		msgs[i] = rawjson.Message{Raw: msg}
	}
	slices, through := jsonSlices(7, 40, 10, 1, msgs)
	if through != 17 || len(slices) < 2 {
		t.Fatalf("through %d in %d slices, want 17 in several", through, len(slices))
	}
	prev, n := int64(10), 0
	for _, s := range slices {
		if s.Start != prev || s.RecordStart != 40 || len(s.Body) > kernel.RecordSliceBytes {
			t.Fatalf("slice (%d, %d] after %d, %d bytes", s.Start, s.End, prev, len(s.Body))
		}
		if err := driver.EachFrame(s, func(off int64, body []byte) bool {
			n++
			if off != prev+1 || !bytes.Equal(body, msg) {
				t.Fatalf("message at %d after %d", off, prev)
			}
			prev = off
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if s.End != prev {
			t.Fatalf("slice ends at %d, its last message at %d", s.End, prev)
		}
	}
	if n != len(msgs) {
		t.Fatalf("%d messages in the slices, want %d", n, len(msgs))
	}
}
