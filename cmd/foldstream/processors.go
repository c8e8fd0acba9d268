package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/foldstream/foldstream/client"
)

func init() {
	commands["processors"] = command{
		summary: "see and operate the processors of a stream: ls, pause, resume, retry, replay, skip, parked, redrive, discard, rebuild, audit (verbs need a token of the ops scope)",
		run:     runProcessors,
	}
}

// processorVerbs are the sub-commands of `foldstream processors`: ls and audit read, the others
// are operator's verbs on one processor (docs/operations.md).
var processorVerbs = map[string]string{
	"ls":      "list the processors of a stream with their state (running, failing, paused, …)",
	"retry":   "run a failing processor's next attempt now instead of at its backoff time",
	"pause":   "stop a processor taking work, on whatever node runs it, until resumed (give a --reason)",
	"resume":  "let a paused processor catch up and go on",
	"audit":   "list the operators' verbs on a processor, newest first",
	"replay":  "rebuild a processor's state from the log from --from N; --effects again runs ProcessEvent again",
	"skip":    "move a failing processor past the event it fails on, parking it (give a --reason)",
	"parked":  "list a processor's parked events with the failure each met",
	"redrive": "run a processor's parked events again (--offset N: that one only); one that succeeds leaves the list",
	"discard": "drop the parked event at --offset N without running it",
	"rebuild": "rebuild the processor's registered next version beside the running one and switch to it (or report how far it is)",
}

// bulkVerbs are the verbs that take --pattern: the verb on every stream a path pattern matches
// (docs/operations.md#bulk-verbs).
var bulkVerbs = map[string]bool{"pause": true, "resume": true, "retry": true, "skip": true, "rebuild": true}

// processorVerbOrder is the order usage lists the verbs in.
var processorVerbOrder = []string{"ls", "pause", "resume", "retry", "replay", "skip", "parked", "redrive", "discard", "rebuild", "audit"}

// runProcessors runs `foldstream processors VERB [flags] STREAM [SLUG]`. ls prints one line per
// processor of STREAM; audit one line per verb on SLUG; the others POST ?op=VERB on the
// processor's route and print "VERB done: SLUG on STREAM". With --json each prints the server's
// answer.
func runProcessors(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "usage: foldstream processors VERB [flags] STREAM [SLUG]\n\nverbs:")
		for _, v := range processorVerbOrder {
			fmt.Fprintf(stderr, "  %-8s %s\n", v, processorVerbs[v])
		}
		fmt.Fprintln(stderr, "\nSTREAM is a name under /v1/stream/; SLUG is the processor's slug (every verb but ls needs it).\nVerbs and audit need a token of the ops scope.")
	}
	if len(args) == 0 || processorVerbs[args[0]] == "" {
		usage()
		if len(args) == 0 {
			return errors.New("need a VERB")
		}
		return fmt.Errorf("unknown verb %q", args[0])
	}
	verb := args[0]
	fs := newFlagSet("processors "+verb, stderr)
	var cf clientFlags
	cf.register(fs)
	reason := fs.String("reason", "", "why, for the audit")
	limit := fs.Int("limit", 0, "audit: at most this many records (default 100)")
	asJSON := fs.Bool("json", false, "print the server's answer as JSON")
	pattern := fs.String("pattern", "", "pause, resume, retry, skip, rebuild: every stream this path pattern matches (/orders/*) instead of one STREAM")
	dryRun := fs.Bool("dry-run", false, "with --pattern: count what the verb would change, change nothing")
	// Flags may come after the positional arguments: look for --pattern among them first.
	for _, a := range args[1:] {
		if a == "--pattern" || a == "-pattern" || strings.HasPrefix(a, "--pattern=") || strings.HasPrefix(a, "-pattern=") {
			*pattern = "set"
		}
	}
	wantArgs := 2
	switch {
	case verb == "ls":
		wantArgs = 1
	case *pattern != "" && bulkVerbs[verb]:
		wantArgs = 1 // SLUG only
	}
	*pattern = ""
	var replay replayCall // replay's own flags (cmd/foldstream/replay.go)
	if verb == "replay" {
		replay = replayVerb(fs)
	}
	var parked parkedCall // the parked-events verbs' own flags (cmd/foldstream/parked.go)
	switch verb {
	case "skip", "parked", "redrive", "discard":
		parked = parkedVerb(verb, fs)
	}
	fs.Usage = func() {
		what := "STREAM SLUG"
		if wantArgs == 1 {
			what = "STREAM"
		}
		if bulkVerbs[verb] {
			what += "\n       foldstream processors " + verb + " --pattern PATTERN [--dry-run] [flags] SLUG"
		}
		fmt.Fprintf(stderr, "usage: foldstream processors %s [flags] %s\n\n%s.\n", verb, what, processorVerbs[verb])
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != wantArgs {
		fs.Usage()
		switch {
		case *pattern != "":
			return errors.New("with --pattern, need a SLUG only")
		case wantArgs == 1:
			return errors.New("need a STREAM")
		}
		return errors.New("need a STREAM and a SLUG")
	}
	if *pattern == "" && *dryRun {
		return errors.New("--dry-run needs --pattern")
	}
	h, err := cf.header()
	if err != nil {
		return err
	}
	o := client.ListOptions{Header: h}
	switch verb {
	case "ls":
		d, err := client.StreamInfo(ctx, cf.server, "/"+pos[0], o)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(d.Processors)
		}
		for _, p := range d.Processors {
			fmt.Fprintln(stdout, processorLine(p))
		}
		return nil
	case "audit":
		recs, err := client.ProcessorAudit(ctx, cf.server, "/"+pos[0], pos[1], *limit, o)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(recs)
		}
		for _, r := range recs {
			fmt.Fprintf(stdout, "%s  %-6s %-8s %s on %s  by %q  reason %q  on node %s\n", r.At.Format(time.RFC3339), r.Op, r.Outcome,
				r.Slug, r.Path, r.Actor, r.Reason, r.Node)
		}
		return nil
	}
	if *pattern != "" {
		if !bulkVerbs[verb] {
			return errors.New("--pattern goes with pause, resume, retry, skip and rebuild")
		}
		res, err := client.ProcessorBulkOp(ctx, cf.server, *pattern, pos[0], verb, *reason, *dryRun, o)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(stdout).Encode(res)
		}
		if res.DryRun {
			fmt.Fprintf(stdout, "%s (dry run): would change %d of %d streams matching %s\n", res.Op, res.Changed, res.Matched, res.Pattern)
			return nil
		}
		fmt.Fprintf(stdout, "%s done: %s changed on %d of %d streams matching %s", res.Op, res.Slug, res.Changed, res.Matched, res.Pattern)
		if res.Failed > 0 {
			fmt.Fprintf(stdout, "; %d failed (first: %s)", res.Failed, res.FirstError)
		}
		fmt.Fprintln(stdout)
		return nil
	}
	if replay != nil {
		return replay(ctx, stdout, cf.server, "/"+pos[0], pos[1], *reason, *asJSON, o)
	}
	if parked != nil {
		return parked(ctx, stdout, cf.server, "/"+pos[0], pos[1], *reason, *asJSON, o)
	}
	res, err := client.ProcessorOp(ctx, cf.server, "/"+pos[0], pos[1], verb, *reason, o)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	if rb := res.Rebuild; rb != nil {
		fmt.Fprintln(stdout, rebuildLine(res.Slug, res.Stream, *rb))
		return nil
	}
	fmt.Fprintf(stdout, "%s done: %s on %s\n", res.Op, res.Slug, res.Stream)
	return nil
}

// rebuildLine is the answer of `processors rebuild`: the version rebuilt and how far it is.
func rebuildLine(slug, stream string, rb client.ProcessorRebuild) string {
	if rb.Switched {
		return fmt.Sprintf("rebuild done: %s on %s runs version %s from offset %d", slug, stream, rb.Version, rb.Offset)
	}
	line := fmt.Sprintf("rebuild running: %s on %s version %s folded through offset %d, %d behind", slug, stream, rb.Version, rb.Offset, rb.Lag)
	if rb.Error != nil {
		line += fmt.Sprintf("; last failure %s %s", rb.Error.Code, rb.Error.Message)
	}
	return line
}

// storeWaitText says which write (or log read) of a processor waits for the store's database,
// since when, and until when the engine sends it again or when the host reads again.
func storeWaitText(w *client.ProcessorStoreWait) string {
	line := fmt.Sprintf("waiting for the database since %s: its %s was refused (%s), %d attempts; ",
		w.Since.UTC().Format("15:04:05Z"), w.Write, w.Code, w.Attempts)
	if w.GivesUpAt.IsZero() {
		return line + "tried again at " + w.NextRetry.UTC().Format("15:04:05Z")
	}
	return line + "sent again until " + w.GivesUpAt.UTC().Format("15:04:05Z")
}

// processorLine is one processor of `processors ls`: slug, state, offset, owner, and why it is
// not running.
func processorLine(p client.ProcessorStatus) string {
	line := fmt.Sprintf("%-20s %-12s offset %-8d", p.Slug, p.State, p.Offset)
	if p.Owner != "" {
		line += " on " + p.Owner
	}
	if p.Paused != nil {
		line += fmt.Sprintf("  paused since %s by %q: %s", p.Paused.Since.Format(time.RFC3339), p.Paused.By, p.Paused.Reason)
	}
	if f := p.Failing; f != nil {
		line += fmt.Sprintf("  failing at offset %d", f.Offset)
		if f.EventType != "" {
			line += " (" + f.EventType + ")"
		}
		line += fmt.Sprintf(", %d attempts: %s %s", f.Attempts, f.Code, f.Message)
	}
	if p.Parked != nil {
		line += fmt.Sprintf("  parked: %s %s", p.Parked.Code, p.Parked.Message)
	}
	if w := p.WaitingForStore; w != nil {
		line += "  " + storeWaitText(w)
	}
	if rb := p.Rebuilding; rb != nil {
		line += fmt.Sprintf("  rebuilding version %s: offset %d, %d behind", rb.Version, rb.Offset, rb.Lag)
	}
	return line
}
