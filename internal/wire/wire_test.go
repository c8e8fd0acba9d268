package wire_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/foldstream/foldstream/internal/wire"
)

// Offsets round-trip, sort as strings in position order, and anything else is refused.
func TestOffsetFormat(t *testing.T) {
	for _, pos := range []int64{0, 1, 42, 1 << 40} {
		got, now, err := wire.ParseOffset(wire.FormatOffset(pos))
		if err != nil || now || got != pos {
			t.Errorf("ParseOffset(FormatOffset(%d)) = %d, %v, %v", pos, got, now, err)
		}
	}
	if wire.FormatOffset(9) >= wire.FormatOffset(10) {
		t.Error("offsets do not sort as strings")
	}
	if pos, now, err := wire.ParseOffset(wire.OffsetNow); err != nil || !now || pos != 0 {
		t.Errorf("now: %d, %v, %v", pos, now, err)
	}
	if pos, _, err := wire.ParseOffset(wire.OffsetStart); err != nil || pos != 0 {
		t.Errorf("-1: %d, %v", pos, err)
	}
	if pos, _, err := wire.ParseOffset("0000000000000001_0000000000000000"); err != nil || pos != wire.BeyondTail {
		t.Errorf("non-zero first part: %d, %v", pos, err)
	}
	for _, bad := range []string{"", "0", "-2", "0000000000000000-0000000000000001", "000000000000000a_0000000000000001", "0000000000000000_000000000000001"} {
		if _, _, err := wire.ParseOffset(bad); err == nil {
			t.Errorf("ParseOffset(%q): no error", bad)
		}
	}
}

// An offset is the position in 16 digits, zero-padded, after 16 zeros and "_"; a position of more
// digits is written whole and a negative one with its sign, as "%016d" writes them.
func TestFormatOffsetPadsThePositionToSixteenDigits(t *testing.T) {
	for _, pos := range []int64{0, 1, 9, 10, 42, 1 << 40, 999_999_999_999_999, 1_000_000_000_000_000,
		9_999_999_999_999_999, 10_000_000_000_000_000, math.MaxInt64, -1, -42, math.MinInt64} {
		if got, want := wire.FormatOffset(pos), fmt.Sprintf("%016d_%016d", 0, pos); got != want {
			t.Errorf("FormatOffset(%d) = %q, want %q", pos, got, want)
		}
	}
}

func BenchmarkFormatOffset(b *testing.B) {
	b.ReportAllocs()
	for i := range b.N {
		_ = wire.FormatOffset(int64(i))
	}
}
