package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream/internal/harness/testserver"
)

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a polling reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func runCmd(t *testing.T, ctx context.Context, name string, in string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	if in != "" {
		stdin = strings.NewReader(in)
	}
	err := commands[name].run(ctx, args, &out, &errOut)
	return out.String(), err
}

func TestAppendReadTail(t *testing.T) {
	base := testserver.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream := fmt.Sprintf("cli-%d", time.Now().UnixNano())

	if _, err := runCmd(t, ctx, "append", "", "--server", base, "--create", "--content-type", "application/json", stream, `{"n":0}`); err != nil {
		t.Fatalf("append: %v", err)
	}
	if _, err := runCmd(t, ctx, "append", "{\"n\":1}\n\n{\"n\":2}\n", stream, "--server", base, "--lines", "--producer-id", "cli-test"); err != nil {
		t.Fatalf("append --lines: %v", err)
	}
	out, err := runCmd(t, ctx, "read", "", "--server", base, stream)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if want := "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n"; out != want {
		t.Errorf("read: got %q, want %q", out, want)
	}

	// tail follows from now: keep appending a marker until tail shows it, then close the stream,
	// which ends tail.
	var tailOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- commands["tail"].run(ctx, []string{"--server", base, stream}, &tailOut, &bytes.Buffer{})
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(tailOut.String(), `"live"`) {
		select {
		case <-tick.C:
			if _, err := runCmd(t, ctx, "append", "", "--server", base, stream, `{"live":true}`); err != nil {
				t.Fatalf("append while tailing: %v", err)
			}
		case err := <-done:
			t.Fatalf("tail ended early: %v", err)
		case <-ctx.Done():
			t.Fatal("tail never showed the appended message")
		}
	}
	if _, err := runCmd(t, ctx, "append", "", "--server", base, "--close", stream, `{"last":true}`); err != nil {
		t.Fatalf("append --close: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("tail: %v", err)
	}
	if got := tailOut.String(); strings.Contains(got, `"n"`) || !strings.HasSuffix(got, "{\"last\":true}\n") {
		t.Errorf("tail output: got %q, want only live messages ending with the final one", got)
	}
	live, err := runCmd(t, ctx, "read", "", "--server", base, "--live", stream)
	if err != nil || !strings.HasSuffix(live, "{\"last\":true}\n") {
		t.Errorf("read --live of a closed stream: got %q, %v; want it to end at the final message", live, err)
	}
	if _, err := runCmd(t, ctx, "append", "", "--server", base, stream, `{"n":9}`); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("append to a closed stream: got %v, want a stream-closed error", err)
	}
}
