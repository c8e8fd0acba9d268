package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/wait"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

// TestAHostOnSQLiteOpensUpTo32QueuedEnginesAtOnce: on an exclusive database the host runs up to
// 32 goroutines opening queued engines (an opening there mostly waits for the writer's commit,
// which any number of them share), and they end once the queue is empty.
func TestAHostOnSQLiteOpensUpTo32QueuedEnginesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := storeopen.Open(ctx, filepath.Join(t.TempDir(), "o.db"), storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	h, err := New(s, Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(ctx)
	h.mu.Lock()
	for i := range 40 {
		h.queueOpenLocked(procKey{path: fmt.Sprintf("/none/%d", i), slug: "p"}) // no registration: skipped
	}
	started := h.openers
	h.mu.Unlock()
	if started != 32 {
		t.Fatalf("%d goroutines opening 40 queued engines, want 32", started)
	}
	var left, queued int
	if !wait.Every(10*time.Second, time.Millisecond, func() bool {
		h.mu.Lock()
		left, queued = h.openers, len(h.openQ)
		h.mu.Unlock()
		return left == 0 && queued == 0
	}) {
		t.Fatalf("%d goroutines still opening, %d engines queued", left, queued)
	}
}
