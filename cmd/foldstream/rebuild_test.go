package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/foldstream/foldstream"
	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/host"
	"github.com/foldstream/foldstream/internal/harness/wait"
)

// tenfold counts "job" events by ten: the next version of replayJobs' "jobs".
type tenfold struct{ foldstream.Base[lsCount] }

func (tenfold) Reduce(a foldstream.ReduceArgs[lsCount]) (lsCount, bool, error) {
	return lsCount{N: a.State.N + 10}, true, nil
}

// `foldstream processors rebuild STREAM SLUG [--json]` over a real server: a processor with no
// next version exits 1 with CONFLICT; with one registered the rebuild runs (--json prints the
// server's answer with the version), and `processors ls` then shows the processor running the
// next version, whose state is the fold of the log by its reducer.
func TestProcessorsRebuildFromTheCLISwitchesToTheNextVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, h, ts, cli := opsServer(t, ctx, nil, host.Config{})
	contract := func(version string) *foldstream.Contract[lsCount] {
		return foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{Slug: "jobs", Version: version, Consumes: []string{"job"}})
	}
	if _, err := host.Register(ctx, h, "/q/work", &replayJobs{Base: foldstream.NewBase(contract("1")), runs: map[int64]int{}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Events().Stream("/q/work").Append(ctx, foldtype.EventInput{Type: "job"}, foldtype.EventInput{Type: "job"})
	if err != nil {
		t.Fatal(err)
	}
	last := got[len(got)-1].Offset
	if code, _, stderr := cli("rebuild", "q/work", "jobs", "--server", ts.URL, "--token", ops); code != 1 || !strings.Contains(stderr, "CONFLICT") {
		t.Fatalf("rebuild with no next version: exit %d, stderr %q; want 1 and CONFLICT", code, stderr)
	}
	if err := host.RegisterNextVersion(ctx, h, "/q/work", tenfold{foldstream.NewBase(contract("2"))}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli("rebuild", "q/work", "jobs", "--json", "--reason", "count by ten", "--server", ts.URL, "--token", ops)
	if code != 0 {
		t.Fatalf("rebuild: exit %d, stderr %q", code, stderr)
	}
	var res struct {
		Op      string
		Rebuild struct{ Version string }
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Op != "rebuild" || res.Rebuild.Version != "2" {
		t.Fatalf("--json: %q (%v)", stdout, err)
	}
	if !wait.For(20*time.Second, func() bool {
		_, out, _ := cli("ls", "q/work", "--server", ts.URL, "--token", ops)
		return strings.Contains(out, "jobs") && !strings.Contains(out, "rebuilding") &&
			strings.Contains(stdoutOf(cli("ls", "q/work", "--json", "--server", ts.URL, "--token", ops)), `"version":"2"`)
	}) {
		t.Fatal("processors ls did not show version 2 running within 20s")
	}
	if err := h.WaitUntilProcessed(ctx, "/q/work", "jobs", last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	snap, err := h.Snapshot(ctx, "/q/work", "jobs")
	if err != nil || string(snap.State) != `{"n":20}` {
		t.Fatalf("version 2's state: %s %v, want {\"n\":20}", snap.State, err)
	}
	_, stdout, _ = cli("rebuild", "q/work", "jobs", "--server", ts.URL, "--token", ops)
	if !strings.Contains(stdout, "rebuild done: jobs on q/work runs version 2") {
		t.Fatalf("rebuild asked again: %q", stdout)
	}
}

func stdoutOf(_ int, stdout, _ string) string { return stdout }

// `foldstream processors rebuild --pattern PATTERN [--dry-run] SLUG` over a real server: the dry
// run counts the streams whose processor has a next version not switched in and changes nothing,
// the bulk rebuild starts each, and a dry run after the switches counts none; --json prints the
// server's answer.
func TestProcessorsRebuildOverAPatternFromTheCLICountsThenSwitchesEachStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, h, ts, cli := opsServer(t, ctx, nil, host.Config{})
	contract := func(version string) *foldstream.Contract[lsCount] {
		return foldstream.MustDefineContract(foldstream.ContractConfig[lsCount]{Slug: "jobs", Version: version, Consumes: []string{"job"}})
	}
	if err := host.RegisterPattern(ctx, h, "/q/*", &replayJobs{Base: foldstream.NewBase(contract("1")), runs: map[int64]int{}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/q/a", "/q/b"} {
		if _, err := st.Events().Stream(path).Append(ctx, foldtype.EventInput{Type: "job"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := host.RegisterNextVersion(ctx, h, "/q/*", tenfold{foldstream.NewBase(contract("2"))}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli("rebuild", "--pattern", "/q/*", "--dry-run", "jobs", "--server", ts.URL, "--token", ops)
	if code != 0 || stdout != "rebuild (dry run): would change 2 of 2 streams matching /q/*\n" {
		t.Fatalf("dry run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = cli("rebuild", "--pattern", "/q/*", "--reason", "count by ten", "jobs", "--server", ts.URL, "--token", ops)
	if code != 0 || stdout != "rebuild done: jobs changed on 2 of 2 streams matching /q/*\n" {
		t.Fatalf("bulk rebuild: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !wait.For(20*time.Second, func() bool {
		_, out, _ := cli("rebuild", "--pattern", "/q/*", "--dry-run", "--json", "jobs", "--server", ts.URL, "--token", ops)
		var res struct {
			Matched, Changed int
			DryRun           bool
		}
		return json.Unmarshal([]byte(out), &res) == nil && res.DryRun && res.Matched == 2 && res.Changed == 0
	}) {
		t.Fatal("a dry run still counted streams to rebuild 20s after the bulk rebuild")
	}
	if code, _, stderr := cli("parked", "--pattern", "/q/*", "jobs", "--server", ts.URL, "--token", ops); code == 0 || !strings.Contains(stderr, "SLUG") && !strings.Contains(stderr, "--pattern") {
		t.Fatalf("parked with --pattern: exit %d, stderr %q; want refused", code, stderr)
	}
}
