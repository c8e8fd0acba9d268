package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/server"
	"github.com/foldstream/foldstream/storeopen"
	"github.com/foldstream/foldstream/stream"
)

type lsCount struct {
	N int `json:"n"`
}

// lsFlaky counts "tick" events and panics in ProcessEvent on "bad".
type lsFlaky struct{ foldstream.Base[lsCount] }

func (lsFlaky) Reduce(a foldstream.ReduceArgs[lsCount]) (lsCount, bool, error) {
	return lsCount{N: a.State.N + 1}, true, nil
}

func (lsFlaky) ProcessEvent(a *foldstream.ProcessEventArgs[lsCount]) error {
	if a.Event != nil && a.Event.Type == "bad" {
		panic("cannot take it")
	}
	return nil
}

// ls -l shows each stream's processors: a failing one with the failing offset, code, attempts and
// next retry.
func TestLsLongShowsAFailingProcessor(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeopen.Open(context.Background(), ":memory:", storeopen.Config{Store: stream.Config{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	h, err := host.New(st, host.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Shutdown(context.Background())
	c := foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{Slug: "counter", Version: "1", Consumes: []string{"tick", "bad"}})
	if err := host.RegisterPattern(context.Background(), h, "/c/*", lsFlaky{foldstream.NewBase(c)}); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(st, server.Config{Processors: h, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	bad, err := st.Events().Stream("/c/x").Append(ctx, foldtype.EventInput{Type: "tick"}, foldtype.EventInput{Type: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	// The failure is visible once the processor's first attempt failed.
	for {
		if sts := h.ProcessorsOn(ctx, "/c/x"); len(sts) == 1 && sts[0].Failing != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the processor never failed")
		}
		runtime.Gosched()
	}
	out, err := runCmd(t, ctx, "ls", "", "-l", "--server", ts.URL)
	if err != nil {
		t.Fatalf("ls -l: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "PROCESSORS") {
		t.Fatalf("ls -l: %q, want a header with PROCESSORS and one stream", out)
	}
	owner := h.ProcessorsOn(ctx, "/c/x")[0]
	if owner.Owner != h.NodeID() || owner.Generation == 0 {
		t.Fatalf("status %+v, want this host's lease", owner)
	}
	for _, want := range []string{"counter failing@", fmt.Sprintf("on %s gen %d", owner.Owner, owner.Generation), "failing at offset " + strconv.FormatInt(bad[1].Offset, 10), "PROCESS_EVENT_FAILED", "attempt 1", "next retry"} {
		if !strings.Contains(lines[1], want) {
			t.Fatalf("ls -l line %q does not say %q", lines[1], want)
		}
	}
}
