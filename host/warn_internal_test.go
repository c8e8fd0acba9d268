package host

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/foldstream/foldstream/testsupport"
)

// recordingHandler sends every record it handles.
type recordingHandler struct{ got chan slog.Record }

func (r recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (r recordingHandler) Handle(_ context.Context, rec slog.Record) error {
	r.got <- rec
	return nil
}
func (r recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r recordingHandler) WithGroup(string) slog.Handler      { return r }

// A warning logged thousands of times in one interval is written once, then summed up in one line
// with its count when the interval (on the injected clock) ends; other messages and lower levels
// pass through.
func TestRepeatedWarningsAreFolded(t *testing.T) {
	t.Parallel()
	clk := testsupport.NewFakeClock()
	rec := recordingHandler{got: make(chan slog.Record, 16)}
	log := slog.New(newRepeatFolder(rec, clk, 10*time.Second))
	for range 48_000 {
		log.Warn("stream subscription overflowed", "dropped", 1)
	}
	log.Info("info passes", "n", 1)
	log.Info("info passes", "n", 2)
	log.With("k", "v").Warn("another warning")
	want := []string{"stream subscription overflowed", "info passes", "info passes", "another warning"}
	for _, w := range want {
		if got := <-rec.got; got.Message != w {
			t.Fatalf("got %q, want %q", got.Message, w)
		}
	}
	if len(rec.got) != 0 {
		t.Fatalf("%d more lines before the interval ended", len(rec.got))
	}
	clk.WaitArmed(t, testsupport.T.Add(10*time.Second))
	clk.Advance(10 * time.Second)
	sum := <-rec.got
	var repeated int64
	sum.Attrs(func(a slog.Attr) bool {
		if a.Key == "repeated" {
			repeated = a.Value.Int64()
		}
		return true
	})
	if sum.Message != "stream subscription overflowed" || repeated != 47_999 {
		t.Fatalf("summary: got %q repeated=%d, want the overflow message with repeated=47999", sum.Message, repeated)
	}
	// The next interval starts afresh: its first occurrence is written again.
	log.Warn("stream subscription overflowed")
	if got := <-rec.got; got.Message != "stream subscription overflowed" {
		t.Fatalf("after the interval: got %q", got.Message)
	}
}
