package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/foldstream/foldstream/client"
)

func init() {
	commands["read"] = command{
		summary: "print a stream from an offset (catch-up, or --live to follow)",
		run:     runRead,
	}
}

// platformTypePrefix starts the type of every record the platform writes itself: the contract's
// birth and wake records, work failures, loop limits, pause and resume (docs/console.md#platform-records).
// read and tail leave them out unless --platform.
const platformTypePrefix = "events.iterate.com/"

func runRead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("read", stderr)
	var sf streamFlags
	sf.registerFollowing(fs)
	offset := fs.String("offset", client.OffsetStart, `offset to start from: "-1" the start, "now" the tail, an integer N (after the N-th message, or byte), or an offset printed earlier`)
	live := fs.Bool("live", false, "keep following new data until the stream closes or you interrupt")
	mode := fs.String("mode", "auto", "live mode with --live: auto, sse or long-poll")
	printOffset := fs.Bool("print-offset", false, "print the next offset to stderr at the end, to resume from")
	platform := fs.Bool("platform", false, "also print the platform's own records (types under "+platformTypePrefix+")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream read [flags] STREAM\n\nJSON streams print one message per line, without the platform's records unless --platform;\nother streams print raw bytes. Failed requests are retried until interrupted (--retries).")
		fs.PrintDefaults()
	}
	name, err := parseStreamArg(fs, args)
	if err != nil {
		return err
	}
	off, err := offsetFlag("offset", *offset, true)
	if err != nil {
		return err
	}
	lm := client.LiveNone
	if *live {
		if lm, err = parseLiveMode(*mode); err != nil {
			return err
		}
	}
	return follow(ctx, sf, name, client.ReadOptions{Offset: off, Live: lm}, stdout, stderr, followOptions{printOffset: *printOffset, platform: *platform})
}

// followOptions are what read and tail print besides the stream's messages.
type followOptions struct {
	// printOffset prints the next offset on stderr at the end.
	printOffset bool
	// platform prints the platform's records too.
	platform bool
}

// follow prints a read until it ends; an interrupt (ctx cancelled) ends it without error.
func follow(ctx context.Context, sf streamFlags, name string, o client.ReadOptions, stdout, stderr io.Writer, fo followOptions) error {
	s, err := sf.open(name)
	if err != nil {
		return err
	}
	if _, err := s.Head(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil // interrupted while the server was away
		}
		return err
	}
	next := o.Offset
	defer func() {
		if fo.printOffset {
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
				if !fo.platform && isPlatformRecord(m) {
					continue
				}
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

// isPlatformRecord reports whether a JSON message is an event the platform wrote (its type is
// under platformTypePrefix).
func isPlatformRecord(m []byte) bool {
	if len(m) == 0 || m[0] != '{' {
		return false
	}
	var ev struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(m, &ev) == nil && strings.HasPrefix(ev.Type, platformTypePrefix)
}
