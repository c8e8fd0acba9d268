package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

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
	sf.register(fs)
	mode := fs.String("mode", "auto", "live mode: auto, sse or long-poll")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream tail [flags] STREAM\n\nPrints what is appended from now on, until the stream closes or you interrupt.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return errors.New("need exactly one STREAM")
	}
	lm := client.LiveMode(*mode)
	switch lm {
	case client.LiveAuto, client.LiveSSE, client.LiveLongPoll:
	default:
		return fmt.Errorf("unknown --mode %q: use auto, sse or long-poll", *mode)
	}
	if lm == client.LiveAuto {
		// From "now" there is nothing to catch up: go live at once.
		lm = client.LiveLongPoll
		s, err := sf.open(pos[0])
		if err != nil {
			return err
		}
		m, err := s.Head(ctx)
		if err != nil {
			return err
		}
		if client.IsJSON(m.ContentType) || strings.HasPrefix(strings.ToLower(m.ContentType), "text/") {
			lm = client.LiveSSE
		}
	}
	return follow(ctx, sf, pos[0], client.ReadOptions{Offset: client.OffsetNow, Live: lm}, stdout, stderr, false)
}
