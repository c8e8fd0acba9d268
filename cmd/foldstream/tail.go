package main

import (
	"context"
	"fmt"
	"io"

	"github.com/foldstream/foldstream/client"
)

func init() {
	commands["tail"] = command{
		summary: "follow a stream from its current end, like tail -f",
		run:     runTail,
	}
}

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tail", stderr)
	var sf streamFlags
	sf.registerFollowing(fs)
	mode := fs.String("mode", "auto", "live mode: auto, sse or long-poll")
	platform := fs.Bool("platform", false, "also print the platform's own records (types under "+platformTypePrefix+")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream tail [flags] STREAM\n\nPrints what is appended from now on, until the stream closes or you interrupt, without the\nplatform's records unless --platform. Through an outage of the server or its database it waits\nas the server's Retry-After asks, printing each wait on stderr, and goes on where it was.")
		fs.PrintDefaults()
	}
	name, err := parseStreamArg(fs, args)
	if err != nil {
		return err
	}
	lm, err := parseLiveMode(*mode)
	if err != nil {
		return err
	}
	// With auto, the client picks SSE for text and JSON streams and long-poll otherwise.
	return follow(ctx, sf, name, client.ReadOptions{Offset: client.OffsetNow, Live: lm}, stdout, stderr, followOptions{platform: *platform})
}
