package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/foldstream/foldstream/client"
)

// replayCall runs `foldstream processors replay` once its flags are parsed.
type replayCall func(ctx context.Context, stdout io.Writer, server, path, slug, reason string, asJSON bool, o client.ListOptions) error

// replayVerb registers the flags of `foldstream processors replay` on fs and returns the call that
// runs the verb once the flags are parsed: POST ?op=replay&from=N&effects=E, printing what the
// replay did, or with asJSON the server's answer.
func replayVerb(fs *flag.FlagSet) replayCall {
	from := fs.Int64("from", 0, "the first offset replayed (0: the start of the log)")
	effects := fs.String("effects", "none", "none: no ProcessEvent runs again for events already processed; again: they run again from --from on")
	return func(ctx context.Context, stdout io.Writer, server, path, slug, reason string, asJSON bool, o client.ListOptions) error {
		res, err := client.ProcessorReplay(ctx, server, path, slug, *from, *effects, reason, o)
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(stdout).Encode(res)
		}
		fmt.Fprintf(stdout, "replay done: %s on %s from offset %d through %d, effects %s (%d events reduced)\n",
			res.Slug, res.Stream, res.From, res.Through, res.Effects, res.Reduced)
		return nil
	}
}
