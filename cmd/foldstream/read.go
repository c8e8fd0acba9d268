package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/foldstream/foldstream/client"
)

func init() {
	commands["read"] = command{
		summary: "print a stream from an offset (catch-up, or --live to follow)",
		run:     runRead,
	}
}

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("read", stderr)
	var sf streamFlags
	sf.register(fs)
	offset := fs.String("offset", client.OffsetStart, `offset to start from ("-1" start, "now" tail, or an offset printed earlier)`)
	live := fs.Bool("live", false, "keep following new data until the stream closes or you interrupt")
	mode := fs.String("mode", "auto", "live mode with --live: auto, sse or long-poll")
	printOffset := fs.Bool("print-offset", false, "print the next offset to stderr at the end, to resume from")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream read [flags] STREAM\n\nJSON streams print one message per line; other streams print raw bytes.")
		fs.PrintDefaults()
	}
	name, err := parseStreamArg(fs, args)
	if err != nil {
		return err
	}
	lm := client.LiveNone
	if *live {
		if lm, err = parseLiveMode(*mode); err != nil {
			return err
		}
	}
	return follow(ctx, sf, name, client.ReadOptions{Offset: *offset, Live: lm}, stdout, stderr, *printOffset)
}

// follow prints a read until it ends; an interrupt (ctx cancelled) ends it without error.
func follow(ctx context.Context, sf streamFlags, name string, o client.ReadOptions, stdout, stderr io.Writer, printOffset bool) error {
	s, err := sf.open(name)
	if err != nil {
		return err
	}
	if _, err := s.Head(ctx); err != nil {
		return err
	}
	next := o.Offset
	defer func() {
		if printOffset {
			fmt.Fprintln(stderr, next)
		}
	}()
	for c, err := range s.Read(ctx, o) {
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // interrupted
			}
			return err
		}
		next = c.NextOffset
		if client.IsJSON(c.ContentType) {
			msgs, err := client.SplitJSON(c.Data)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if _, err := fmt.Fprintf(stdout, "%s\n", m); err != nil {
					return err
				}
			}
			continue
		}
		if _, err := stdout.Write(c.Data); err != nil {
			return err
		}
	}
	return nil
}
