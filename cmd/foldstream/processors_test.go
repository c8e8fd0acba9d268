package main

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/testsupport"
)

// opsPoisoned counts events; its ProcessEvent fails on "poison" while broken is set.
type opsPoisoned struct {
	foldstream.Base[lsCount]
	broken atomic.Bool
}

func (*opsPoisoned) Reduce(a foldstream.ReduceArgs[lsCount]) (lsCount, bool, error) {
	return lsCount{N: a.State.N + 1}, true, nil
}

func (p *opsPoisoned) ProcessEvent(a *foldstream.ProcessEventArgs[lsCount]) error {
	if a.Event != nil && a.Event.Type == "poison" && p.broken.Load() {
		return foldtype.NewError(foldtype.CodeUnavailable, nil, "downstream says no")
	}
	return nil
}

// `foldstream processors retry STREAM SLUG` over a real server: a read-write token is refused with
// FORBIDDEN (exit 1, the code on stderr); a running processor is a CONFLICT; with an ops token a
// failing, fixed processor recovers at once (the store's clock never moves), and --json prints the
// server's answer.
func TestProcessorsRetryFromTheCLINeedsAnOpsToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	clk := testsupport.NewFakeClock()
	st, h, ts, cli := opsServer(t, ctx, clk, host.Config{ManualAlarms: true})
	p := &opsPoisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"}}))}
	p.broken.Store(true)
	if _, err := host.Register(ctx, h, "/q/work", p); err != nil {
		t.Fatal(err)
	}

	if code, _, stderr := cli("retry", "--server", ts.URL, "--token", writer, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "FORBIDDEN") {
		t.Fatalf("retry with a read-write token: exit %d, stderr %q; want 1 and FORBIDDEN", code, stderr)
	}
	if code, _, stderr := cli("retry", "--server", ts.URL, "--token", ops, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "CONFLICT") {
		t.Fatalf("retry of a running processor: exit %d, stderr %q; want 1 and CONFLICT", code, stderr)
	}
	start := clk.Now()
	got, err := st.Events().Stream("/q/work").Append(ctx, foldtype.EventInput{Type: "job"}, foldtype.EventInput{Type: "poison"},
		foldtype.EventInput{Type: "job"})
	if err != nil {
		t.Fatal(err)
	}
	clk.WaitArmed(t, start.Add(host.FailRetryBase))
	p.broken.Store(false)
	code, stdout, stderr := cli("retry", "--server", ts.URL, "--token", ops, "--reason", "downstream fixed", "--json", "q/work", "jobs")
	if code != 0 {
		t.Fatalf("retry with the ops token: exit %d, stderr %q", code, stderr)
	}
	var res struct{ Op, Slug, Stream string }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Op != "retry" || res.Slug != "jobs" || res.Stream != "q/work" {
		t.Fatalf("--json: %q (%v)", stdout, err)
	}
	for {
		if sts := h.ProcessorsOn(ctx, "/q/work"); len(sts) == 1 && sts[0].Failing == nil && sts[0].Offset >= got[2].Offset {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the processor did not recover after the retry: %+v", h.ProcessorsOn(context.Background(), "/q/work"))
		}
		runtime.Gosched()
	}
	if !clk.Now().Equal(start) {
		t.Fatalf("the clock moved: %v", clk.Now().Sub(start))
	}
}

// `foldstream processors pause|ls|resume|audit` over a real server: with an ops token the pause
// takes its reason, ls shows the processor paused with who and why (and --json its state), a
// read-write token may not pause, resume lets it catch up, and audit lists both verbs with the
// operator's name, newest first.
func TestProcessorsPauseLsResumeAndAuditFromTheCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, h, ts, cli := opsServer(t, ctx, nil, host.Config{})
	p := &opsPoisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{
		Slug: "jobs", Version: "1", Consumes: []string{"job"}}))}
	if _, err := host.Register(ctx, h, "/q/work", p); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("pause", "--server", ts.URL, "--token", writer, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "FORBIDDEN") {
		t.Fatalf("pause with a read-write token: exit %d, stderr %q; want 1 and FORBIDDEN", code, stderr)
	}
	if code, stdout, stderr := cli("pause", "--server", ts.URL, "--token", ops, "--reason", "bad deploy", "q/work", "jobs"); code != 0 || stdout != "pause done: jobs on q/work\n" {
		t.Fatalf("pause: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, err := st.Events().Stream("/q/work").Append(ctx, foldtype.EventInput{Type: "job"}); err != nil {
		t.Fatalf("an append to the paused processor's stream: %v", err)
	}
	code, stdout, stderr := cli("ls", "--server", ts.URL, "--token", ops, "q/work")
	if code != 0 || !strings.Contains(stdout, "jobs") || !strings.Contains(stdout, "paused") || !strings.Contains(stdout, `by "dave": bad deploy`) {
		t.Fatalf("ls: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, _ = cli("ls", "--server", ts.URL, "--token", ops, "--json", "q/work")
	var sts []struct {
		Slug, State string
	}
	if err := json.Unmarshal([]byte(stdout), &sts); code != 0 || err != nil || len(sts) != 1 || sts[0].State != "paused" {
		t.Fatalf("ls --json: exit %d, %q (%v)", code, stdout, err)
	}
	if code, _, stderr := cli("resume", "--server", ts.URL, "--token", ops, "--reason", "rolled back", "q/work", "jobs"); code != 0 {
		t.Fatalf("resume: exit %d, stderr %q", code, stderr)
	}
	info, err := st.Events().HeadStream(ctx, "/q/work")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.WaitUntilProcessed(ctx, "/q/work", "jobs", info.Tail, 10*time.Second); err != nil {
		t.Fatalf("after the resume: %v", err)
	}
	code, stdout, stderr = cli("audit", "--server", ts.URL, "--token", ops, "q/work", "jobs")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "resume") || !strings.Contains(lines[1], "pause") ||
		!strings.Contains(lines[1], `by "dave"`) || !strings.Contains(lines[1], `reason "bad deploy"`) {
		t.Fatalf("audit: exit %d, stdout %q, stderr %q; want resume then pause by dave", code, stdout, stderr)
	}
	// In bulk over a pattern: the dry run counts, the pause pauses.
	code, stdout, stderr = cli("pause", "--server", ts.URL, "--token", ops, "--pattern", "/q/*", "--dry-run", "jobs")
	if code != 0 || stdout != "pause (dry run): would change 1 of 1 streams matching /q/*\n" {
		t.Fatalf("bulk dry run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if sts := h.ProcessorsOn(ctx, "/q/work"); len(sts) != 1 || sts[0].State == foldtype.StatePaused {
		t.Fatalf("paused by a dry run: %+v", sts)
	}
	code, stdout, stderr = cli("pause", "--server", ts.URL, "--token", ops, "--pattern", "/q/*", "--reason", "all of q", "jobs")
	if code != 0 || stdout != "pause done: jobs changed on 1 of 1 streams matching /q/*\n" {
		t.Fatalf("bulk pause: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if sts := h.ProcessorsOn(ctx, "/q/work"); len(sts) != 1 || sts[0].State != foldtype.StatePaused {
		t.Fatalf("after the bulk pause: %+v", sts)
	}
}

// A processor whose engine sends a write again through a database blip says which, since when
// and until when, on its line of `processors ls`.
func TestAProcessorsLineSaysWhichWriteWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := processorLine(client.ProcessorStatus{Slug: "carts", State: "running", Offset: 7,
		WaitingForStore: &client.ProcessorStoreWait{Write: "checkpoint", Code: "UNAVAILABLE", Attempts: 4,
			Since: since, GivesUpAt: since.Add(30 * time.Second)}})
	want := "waiting for the database since 03:04:05Z: its checkpoint was refused (UNAVAILABLE), 4 attempts; sent again until 03:04:35Z"
	if !strings.Contains(line, want) || !strings.HasPrefix(line, "carts") {
		t.Fatalf("line %q; want it to hold %q", line, want)
	}
}

// A processor whose catch-up waits for the database to read the log says when the host reads
// again, not when it gives up: it does not.
func TestAProcessorsLineSaysWhenALogReadIsTriedAgain(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := processorLine(client.ProcessorStatus{Slug: "carts", State: "running", Offset: 7,
		WaitingForStore: &client.ProcessorStoreWait{Write: "log read", Code: "UNAVAILABLE", Attempts: 3,
			Since: since, NextRetry: since.Add(7 * time.Second)}})
	want := "waiting for the database since 03:04:05Z: its log read was refused (UNAVAILABLE), 3 attempts; tried again at 03:04:12Z"
	if !strings.Contains(line, want) {
		t.Fatalf("line %q; want it to hold %q", line, want)
	}
}
