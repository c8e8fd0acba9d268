package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/foldstream/foldstream/foldtype"
)

func init() {
	commands["pause"] = command{
		summary: "pause a stream: appends are refused (423 STREAM_PAUSED) until it is resumed",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return runControl(ctx, "pause", args, stdout, stderr)
		},
	}
	commands["resume"] = command{
		summary: "resume a paused stream",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			return runControl(ctx, "resume", args, stdout, stderr)
		},
	}
}

// runControl appends the stream's pause or resume control event (docs/server.md#paused-streams)
// and prints the offset after it.
func runControl(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(name, stderr)
	var sf streamFlags
	sf.register(fs)
	reason := fs.String("reason", "", "why: a paused stream refuses appends with \"stream paused: REASON\"")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: foldstream %s [flags] STREAM\n\nSTREAM is a name under /v1/stream/ or a full URL; the stream must hold JSON.\n", name)
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
	typ := foldtype.TypeStreamPaused
	if name == "resume" {
		typ = foldtype.TypeStreamResumed
	}
	ev := map[string]any{"type": typ}
	if *reason != "" {
		ev["payload"] = map[string]string{"reason": *reason}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	s, err := sf.open(pos[0])
	if err != nil {
		return err
	}
	s.SetContentType("application/json")
	r, err := s.Append(ctx, body)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, r.NextOffset)
	return nil
}
