package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/foldstream/foldstream/client"
)

// parkedCall runs `foldstream processors skip|parked|redrive|discard` once its flags are parsed.
type parkedCall func(ctx context.Context, stdout io.Writer, server, path, slug, reason string, asJSON bool, o client.ListOptions) error

// parkedVerb registers the flags of the parked-events verbs on fs (redrive's and discard's
// --offset) and returns the call that runs verb (docs/operations.md#skip), printing what it did or,
// with asJSON, the server's answer.
func parkedVerb(verb string, fs *flag.FlagSet) parkedCall {
	var offset *int64
	switch verb {
	case "redrive":
		offset = fs.Int64("offset", 0, "redrive the parked event at this offset only (0: every parked event, in offset order)")
	case "discard":
		offset = fs.Int64("offset", 0, "the offset of the parked event to drop (required)")
	}
	return func(ctx context.Context, stdout io.Writer, server, path, slug, reason string, asJSON bool, o client.ListOptions) error {
		var res any
		var line string
		switch verb {
		case "skip":
			r, err := client.ProcessorSkip(ctx, server, path, slug, reason, o)
			if err != nil {
				return err
			}
			res, line = r, fmt.Sprintf("skip done: %s on %s moved past offset %d (%s), parked: %s %s", r.Slug, r.Stream,
				r.Parked.Offset, r.Parked.Type, r.Parked.Code, r.Parked.Message)
		case "parked":
			list, err := client.ProcessorParked(ctx, server, path, slug, o)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(stdout).Encode(map[string]any{"parked": list})
			}
			for _, p := range list {
				fmt.Fprintf(stdout, "offset %-8d %-12s %d attempts  %s %s  skipped %s by %q: %s  (node %s)\n", p.Offset, p.Type, p.Attempts,
					p.Code, p.Message, p.At.Format(time.RFC3339), p.By, p.Reason, p.Node)
			}
			return nil
		case "redrive":
			r, err := client.ProcessorRedrive(ctx, server, path, slug, *offset, reason, o)
			if err != nil {
				return err
			}
			res, line = r, fmt.Sprintf("redrive done: %s on %s ran %d parked events %v", r.Slug, r.Stream, len(r.Redriven), r.Redriven)
		case "discard":
			if *offset <= 0 {
				return errors.New("discard needs --offset N, the parked event's offset")
			}
			r, err := client.ProcessorDiscard(ctx, server, path, slug, *offset, reason, o)
			if err != nil {
				return err
			}
			res, line = r, "discard done: "+r.Slug+" on "+r.Stream+" dropped the parked event at offset "+strconv.FormatInt(*offset, 10)
		}
		if asJSON {
			return json.NewEncoder(stdout).Encode(res)
		}
		fmt.Fprintln(stdout, line)
		return nil
	}
}
