package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
)

// replayJobs counts "job" events and its ProcessEvent runs per offset.
type replayJobs struct {
	foldstream.Base[lsCount]
	mu   sync.Mutex
	runs map[int64]int
}

func (*replayJobs) Reduce(a foldstream.ReduceArgs[lsCount]) (lsCount, bool, error) {
	return lsCount{N: a.State.N + 1}, true, nil
}

func (p *replayJobs) ProcessEvent(a *foldstream.ProcessEventArgs[lsCount]) error {
	if a.Event != nil {
		p.mu.Lock()
		p.runs[a.Event.Offset]++
		p.mu.Unlock()
	}
	return nil
}

func (p *replayJobs) runsOf(off int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[off]
}

// `foldstream processors replay STREAM SLUG --from N [--effects again] [--json]` over a real
// server: a read-write token is refused with FORBIDDEN and an unknown effects choice with
// BAD_REQUEST (exit 1, the code on stderr); with an ops token and --effects again every effect from
// N on runs once more (and --json prints the server's answer); the default, from the start with
// effects none, says what it reduced and runs no effect again.
func TestProcessorsReplayFromTheCLIRunsEffectsAgainOnlyWhenAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, h, ts, cli := opsServer(t, ctx, nil, host.Config{})
	p := &replayJobs{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{
		Slug: "jobs", Version: "1", Consumes: []string{"job"}})), runs: map[int64]int{}}
	if _, err := host.Register(ctx, h, "/q/work", p); err != nil {
		t.Fatal(err)
	}
	ins := make([]foldtype.EventInput, 5)
	for i := range ins {
		ins[i] = foldtype.EventInput{Type: "job"}
	}
	got, err := st.Events().Stream("/q/work").Append(ctx, ins...)
	if err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1].Offset
	if err := h.WaitUntilProcessed(ctx, "/q/work", "jobs", last, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	if code, _, stderr := cli("replay", "q/work", "jobs", "--from", "1", "--server", ts.URL, "--token", writer); code != 1 || !strings.Contains(stderr, "FORBIDDEN") {
		t.Fatalf("replay with a read-write token: exit %d, stderr %q; want 1 and FORBIDDEN", code, stderr)
	}
	if code, _, stderr := cli("replay", "q/work", "jobs", "--effects", "twice", "--server", ts.URL, "--token", ops); code != 1 || !strings.Contains(stderr, "BAD_REQUEST") {
		t.Fatalf("replay with effects twice: exit %d, stderr %q; want 1 and BAD_REQUEST", code, stderr)
	}
	from := got[2].Offset
	code, stdout, stderr := cli("replay", "q/work", "jobs", "--from", strconv.FormatInt(from, 10), "--effects", "again", "--json",
		"--reason", "the mailer lost a day", "--server", ts.URL, "--token", ops)
	if code != 0 {
		t.Fatalf("replay with effects again: exit %d, stderr %q", code, stderr)
	}
	var res struct {
		Op, Slug, Stream, Effects string
		From, Through             int64
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Op != "replay" || res.Slug != "jobs" || res.Stream != "q/work" ||
		res.From != from || res.Through != last || res.Effects != "again" {
		t.Fatalf("--json: %q (%v)", stdout, err)
	}
	if err := h.WaitUntilProcessed(ctx, "/q/work", "jobs", last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each event from the replay's offset on runs once more; the earlier ones do not.
	wantRuns := func(off int64) int {
		if off >= from {
			return 2
		}
		return 1
	}
	for _, ev := range got {
		if want := wantRuns(ev.Offset); p.runsOf(ev.Offset) != want {
			t.Fatalf("ProcessEvent of offset %d ran %d times, want %d", ev.Offset, p.runsOf(ev.Offset), want)
		}
	}

	code, stdout, stderr = cli("replay", "q/work", "jobs", "--server", ts.URL, "--token", ops)
	if code != 0 || stdout != "replay done: jobs on q/work from offset 1 through "+strconv.FormatInt(last, 10)+", effects none (5 events reduced)\n" {
		t.Fatalf("replay from the start: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, ev := range got {
		if want := wantRuns(ev.Offset); p.runsOf(ev.Offset) != want {
			t.Fatalf("after the replay with effects none, ProcessEvent of offset %d ran %d times, want %d", ev.Offset, p.runsOf(ev.Offset), want)
		}
	}
}
