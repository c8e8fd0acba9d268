package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldstream/foldstream/client"
)

func init() {
	commands["ls"] = command{
		summary: "list the streams on a server, optionally those under a path prefix",
		run:     runLs,
	}
}

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ls", stderr)
	var cf clientFlags
	cf.register(fs)
	long := fs.Bool("l", false, "long format: content type, tail offset, closed, creation time, processors (state, failure, skipped events), pause reason")
	limit := fs.Int("limit", 0, "list at most this many streams (0: all)")
	asJSON := fs.Bool("json", false, "print a JSON array: each stream as the server lists it, with -l its processors too")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream ls [flags] [PREFIX]\n\nLists the server's streams in path order, those whose path starts with PREFIX (e.g. /carts/) when given.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("at most one PREFIX, got %d arguments", len(pos))
	}
	if *limit < 0 {
		return fmt.Errorf("--limit must be 0 or more, not %d", *limit)
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
		if !strings.HasPrefix(prefix, "/") {
			prefix = "/" + prefix
		}
	}
	h, err := cf.header()
	if err != nil {
		return err
	}
	if *asJSON {
		return lsJSON(ctx, cf.server, prefix, *limit, *long, h, stdout)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if *long {
		fmt.Fprintln(tw, "PATH\tTYPE\tTAIL\tCLOSED\tCREATED\tPROCESSORS\tPAUSED")
	}
	n := 0
	after := ""
	for {
		page, err := client.ListStreams(ctx, cf.server, client.ListOptions{Prefix: prefix, After: after, Limit: client.MaxListLimit, Header: h})
		if err != nil {
			return err
		}
		for _, s := range page.Streams {
			if *limit > 0 && n == *limit {
				return tw.Flush()
			}
			n++
			if *long {
				closed := ""
				if s.Closed {
					closed = "closed"
				}
				paused := ""
				if s.Paused {
					paused = "paused: " + s.PauseReason
				}
				procs, err := processorsColumn(ctx, cf.server, s.Path, h)
				if err != nil {
					return err
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Path, s.ContentType, s.Tail, closed, s.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), procs, paused)
			} else {
				fmt.Fprintln(tw, s.Path)
			}
		}
		if page.Next == "" {
			return tw.Flush()
		}
		after = page.Next
	}
}

// lsJSON prints ls --json: one JSON array of the streams as the server lists them (path,
// contentType, tail, closed, createdAt, paused, pauseReason), each with its processors under
// "processors" with -l. The array is written as the pages arrive.
func lsJSON(ctx context.Context, server, prefix string, limit int, long bool, h http.Header, stdout io.Writer) error {
	if _, err := io.WriteString(stdout, "["); err != nil {
		return err
	}
	n := 0
	after := ""
	for {
		page, err := client.ListStreams(ctx, server, client.ListOptions{Prefix: prefix, After: after, Limit: client.MaxListLimit, Header: h})
		if err != nil {
			return err
		}
		for _, s := range page.Streams {
			if limit > 0 && n == limit {
				_, err := io.WriteString(stdout, "\n]\n")
				return err
			}
			var v any = s
			if long {
				d, err := client.StreamInfo(ctx, server, s.Path, client.ListOptions{Header: h})
				if err != nil {
					var ce *client.Error
					if errors.As(err, &ce) && ce.Code == client.CodeStreamNotFound {
						continue // deleted since the listing
					}
					return err
				}
				if d.Processors == nil {
					d.Processors = []client.ProcessorStatus{}
				}
				v = d
			}
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			sep := ",\n"
			if n == 0 {
				sep = "\n"
			}
			n++
			if _, err := fmt.Fprintf(stdout, "%s%s", sep, b); err != nil {
				return err
			}
		}
		if page.Next == "" {
			end := "\n]\n"
			if n == 0 {
				end = "]\n"
			}
			_, err := io.WriteString(stdout, end)
			return err
		}
		after = page.Next
	}
}

// processorsColumn is ls -l's PROCESSORS cell for one stream: each processor's slug, state,
// offset and owner node with its lease generation, with what fails where and when it is
// retried, why it is parked, and skipped events.
func processorsColumn(ctx context.Context, server, path string, h http.Header) (string, error) {
	d, err := client.StreamInfo(ctx, server, path, client.ListOptions{Header: h})
	if err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == client.CodeStreamNotFound {
			return "", nil // deleted since the listing
		}
		return "", err
	}
	var parts []string
	for _, p := range d.Processors {
		state := p.State
		if state == "" {
			state = "running"
		}
		cell := fmt.Sprintf("%s %s@%d", p.Slug, state, p.Offset)
		if p.Owner != "" {
			// The node that holds the processor's lease now, and the lease's generation.
			cell += fmt.Sprintf(" on %s gen %d", p.Owner, p.Generation)
		}
		switch {
		case p.Paused != nil:
			cell += fmt.Sprintf(" (paused by %q since %s: %s)", p.Paused.By, p.Paused.Since.UTC().Format(time.RFC3339), p.Paused.Reason)
		case p.Failing != nil:
			f := p.Failing
			cell += fmt.Sprintf(" (failing at offset %d: %s %s; attempt %d, next retry %s)", f.Offset, f.Code, f.Message,
				f.Attempts, f.NextRetry.UTC().Format("15:04:05Z"))
		case p.Parked != nil:
			cell += fmt.Sprintf(" (%s %s)", p.Parked.Code, p.Parked.Message)
		case p.WaitingForStore != nil:
			cell += " (" + storeWaitText(p.WaitingForStore) + ")"
		}
		for _, sk := range p.Skipped {
			cell += fmt.Sprintf(" [skipped %d %s, last at %d: %s]", sk.Count, sk.Reason, sk.LastOffset, sk.LastError)
		}
		parts = append(parts, cell)
	}
	return strings.Join(parts, "; "), nil
}
