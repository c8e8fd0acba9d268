package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/testsupport"
)

// `foldstream processors skip|parked|redrive|discard` over a real server: skip with a read-write
// token is FORBIDDEN; with an ops token it parks the failing event and says so; parked lists it
// (--json in the server's shape); redrive while broken exits 1 with PROCESSOR_FAILING, after the
// fix runs it; discard needs --offset and answers CONFLICT for an event not parked.
func TestProcessorsSkipParkedRedriveAndDiscardFromTheCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	clk := testsupport.NewFakeClock()
	st, h, ts, processors := opsServer(t, ctx, clk, host.Config{ManualAlarms: true})
	p := &opsPoisoned{Base: foldstream.NewBase(foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{
		Slug: "jobs", Version: "1", Consumes: []string{"job", "poison"}}))}
	p.broken.Store(true)
	if _, err := host.Register(ctx, h, "/q/work", p); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string, string) { return processors(append(args, "--server", ts.URL)...) }

	start := clk.Now()
	got, err := st.Events().Stream("/q/work").Append(ctx, foldtype.EventInput{Type: "job"}, foldtype.EventInput{Type: "poison"},
		foldtype.EventInput{Type: "job"})
	if err != nil {
		t.Fatal(err)
	}
	poison := strconv.FormatInt(got[1].Offset, 10)
	clk.WaitArmed(t, start.Add(host.FailRetryBase))

	if code, _, stderr := cli("skip", "--token", writer, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "FORBIDDEN") {
		t.Fatalf("skip with a read-write token: exit %d, stderr %q; want 1 and FORBIDDEN", code, stderr)
	}
	code, stdout, stderr := cli("skip", "--token", ops, "--reason", "downstream rejects it", "q/work", "jobs")
	if code != 0 || !strings.Contains(stdout, "skip done: jobs on q/work moved past offset "+poison+" (poison)") {
		t.Fatalf("skip: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if err := h.WaitUntilProcessed(ctx, "/q/work", "jobs", got[2].Offset, 20*time.Second); err != nil {
		t.Fatalf("after the skip: %v", err)
	}
	code, stdout, stderr = cli("parked", "--token", ops, "--json", "q/work", "jobs")
	var list struct{ Parked []foldtype.ParkedEvent }
	if err := json.Unmarshal([]byte(stdout), &list); code != 0 || err != nil || len(list.Parked) != 1 ||
		list.Parked[0].Offset != got[1].Offset || list.Parked[0].By != "dave" || list.Parked[0].Reason != "downstream rejects it" {
		t.Fatalf("parked --json: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, _ = cli("parked", "--token", ops, "q/work", "jobs"); code != 0 || !strings.Contains(stdout, "offset "+poison) {
		t.Fatalf("parked: exit %d, %q", code, stdout)
	}
	if code, _, stderr = cli("redrive", "--token", ops, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "PROCESSOR_FAILING") {
		t.Fatalf("redrive while broken: exit %d, stderr %q; want 1 and PROCESSOR_FAILING", code, stderr)
	}
	if code, _, stderr = cli("discard", "--token", ops, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "--offset") {
		t.Fatalf("discard without --offset: exit %d, stderr %q", code, stderr)
	}
	p.broken.Store(false)
	if code, stdout, stderr = cli("redrive", "--token", ops, "--offset", poison, "q/work", "jobs"); code != 0 ||
		!strings.Contains(stdout, "ran 1 parked events ["+poison+"]") {
		t.Fatalf("redrive: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr = cli("discard", "--token", ops, "--offset", poison, "q/work", "jobs"); code != 1 || !strings.Contains(stderr, "CONFLICT") {
		t.Fatalf("discard of an event not parked: exit %d, stderr %q; want 1 and CONFLICT", code, stderr)
	}
}
