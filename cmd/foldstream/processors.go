package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/foldstream/foldstream/client"
)

func init() {
	commands["processors"] = command{
		summary: "operate one processor of a stream: retry, replay (needs a token of the ops scope)",
		run:     runProcessors,
	}
}

// processorVerbs are the sub-commands of `foldstream processors`, each an operator's verb on
// one processor (docs/operations.md).
var processorVerbs = map[string]string{
	"retry":  "run a failing processor's next attempt now instead of at its backoff time",
	"replay": "rebuild a processor's state from the log from --from N; --effects again runs ProcessEvent again",
}

// runProcessors runs `foldstream processors VERB [flags] STREAM SLUG`: POST ?op=VERB on the
// processor's route. It prints "VERB done: SLUG on STREAM", or with --json the server's answer.
func runProcessors(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "usage: foldstream processors VERB [flags] STREAM SLUG\n\nverbs:")
		for v, s := range processorVerbs {
			fmt.Fprintf(stderr, "  %-8s %s\n", v, s)
		}
		fmt.Fprintln(stderr, "\nSTREAM is a name under /v1/stream/; SLUG is the processor's slug. Run with a token of the ops scope.")
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
	reason := fs.String("reason", "", "why, for the server's audit line")
	asJSON := fs.Bool("json", false, "print the server's answer as JSON")
	var replay replayCall // replay's own flags (cmd/foldstream/replay.go)
	if verb == "replay" {
		replay = replayVerb(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: foldstream processors %s [flags] STREAM SLUG\n\n%s.\n", verb, processorVerbs[verb])
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return errors.New("need a STREAM and a SLUG")
	}
	h, err := cf.header()
	if err != nil {
		return err
	}
	if replay != nil {
		return replay(ctx, stdout, cf.server, "/"+pos[0], pos[1], *reason, *asJSON, client.ListOptions{Header: h})
	}
	res, err := client.ProcessorOp(ctx, cf.server, "/"+pos[0], pos[1], verb, *reason, client.ListOptions{Header: h})
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "%s done: %s on %s\n", res.Op, res.Slug, res.Stream)
	return nil
}
