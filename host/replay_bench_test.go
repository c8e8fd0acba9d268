package host_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// BenchmarkReplayWithEffectsOff measures a replay that folds 10,000 events of a SQLite store
// (reduce only, one checkpoint write): its time per replay and the events it folds per second.
func BenchmarkReplayWithEffectsOff(b *testing.B) {
	ctx := context.Background()
	s := openStore(b, filepath.Join(b.TempDir(), "replay-bench.db"), nil)
	defer s.Close(context.Background())
	h := newHost(b, s)
	defer h.Shutdown(context.Background())
	p := newWeigher(b)
	if _, err := host.Register(ctx, h, "/r", p); err != nil {
		b.Fatal(err)
	}
	batch := make([]foldtype.EventInput, 500)
	for i := range batch {
		batch[i] = foldtype.EventInput{Type: "tick"}
	}
	for range 20 {
		if _, err := s.Events().Stream("/r").Append(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
	waitSettled(b, s, h, p)
	var folded int
	b.ResetTimer()
	for b.Loop() {
		res, err := h.Replay(ctx, "/r", "weigher", foldtype.ReplayRequest{})
		if err != nil {
			b.Fatal(err)
		}
		folded += res.Reduced
	}
	b.ReportMetric(float64(folded)/b.Elapsed().Seconds(), "events/s")
}
