package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/node"
)

func init() {
	commands["create"] = command{summary: "create a stream (idempotent when the configuration matches)", run: runCreate}
	commands["delete"] = command{summary: "delete a stream and its data", run: runDelete}
	commands["info"] = command{summary: "show a stream's metadata: content type, tail offset, TTL, closed", run: runInfo}
	commands["version"] = command{summary: "print foldstream's version and build", run: runVersion}
}

// oneStream parses args for a sub-command that takes exactly one STREAM and returns it.
func oneStream(fs *flag.FlagSet, name, what string, args []string, stderr io.Writer) (string, error) {
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: foldstream %s [flags] STREAM\n\n%s\nSTREAM is a name under /v1/stream/ or a full URL.\n", name, what)
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		fs.Usage()
		return "", errors.New("need exactly one STREAM")
	}
	return pos[0], nil
}

// streamInfo is what `create --json` and `info --json` print: the stream's metadata in the
// protocol's own terms (offsets as the server gives them).
type streamInfo struct {
	URL         string    `json:"url"`
	Created     bool      `json:"created,omitempty"`
	ContentType string    `json:"contentType"`
	NextOffset  string    `json:"nextOffset"`
	Closed      bool      `json:"closed"`
	TTLSeconds  int64     `json:"ttlSeconds,omitempty"`
	ExpiresAt   time.Time `json:"expiresAt,omitzero"`
}

func infoOf(s *client.Stream, m client.Metadata, created bool) streamInfo {
	return streamInfo{URL: client.RedactURL(s.URL()), Created: created, ContentType: m.ContentType, NextOffset: m.NextOffset,
		Closed: m.Closed, TTLSeconds: int64(m.TTL / time.Second), ExpiresAt: m.ExpiresAt}
}

// printInfo prints info as JSON with asJSON, else as "key: value" lines a person reads.
func printInfo(w io.Writer, info streamInfo, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(info)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "url:          %s\n", info.URL)
	fmt.Fprintf(&b, "content-type: %s\n", info.ContentType)
	fmt.Fprintf(&b, "next-offset:  %s\n", info.NextOffset)
	fmt.Fprintf(&b, "closed:       %t\n", info.Closed)
	if info.TTLSeconds > 0 {
		fmt.Fprintf(&b, "ttl:          %ds\n", info.TTLSeconds)
	}
	if !info.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, "expires-at:   %s\n", info.ExpiresAt.UTC().Format(time.RFC3339))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// runCreate creates a stream. Creating one that exists with the same configuration succeeds
// (the protocol's PUT is idempotent) and says so; a different configuration fails with the
// server's coded error.
func runCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("create", stderr)
	var sf streamFlags
	sf.register(fs)
	contentType := fs.String("content-type", "application/json", "the stream's content type, fixed at creation")
	ttl := fs.Duration("ttl", 0, "a sliding idle time-to-live (whole seconds), e.g. 1h; exclusive with --expires-at")
	expiresAt := fs.String("expires-at", "", "an absolute expiry, RFC 3339 (e.g. 2027-01-02T15:04:05Z)")
	closed := fs.Bool("closed", false, "create the stream closed (--data is then its whole content)")
	data := fs.String("data", "", "initial content (for a JSON stream a JSON value or an array of values)")
	forkOf := fs.String("fork-of", "", "make the stream a fork of this stream (name or URL) on the same server")
	forkOffset := fs.String("fork-offset", "", "where the fork diverges (data strictly before it is inherited): an integer N or an offset a server printed; defaults to the source's tail")
	asJSON := fs.Bool("json", false, "print the stream's metadata as one JSON object")
	name, err := oneStream(fs, "create", "Create a stream; an existing stream with the same configuration is not an error.", args, stderr)
	if err != nil {
		return err
	}
	if *forkOffset != "" {
		if *forkOffset, err = offsetFlag("fork-offset", *forkOffset, false); err != nil {
			return err
		}
	}
	o := client.CreateOptions{ContentType: *contentType, TTL: *ttl, Closed: *closed, ForkOf: *forkOf, ForkOffset: *forkOffset}
	if o.ForkOf != "" && !strings.HasPrefix(o.ForkOf, "http://") && !strings.HasPrefix(o.ForkOf, "https://") {
		o.ForkOf = streamsPrefix + escapePath(strings.TrimPrefix(o.ForkOf, "/")) // a name, as STREAM is
	}
	if *ttl < 0 || (*ttl > 0 && *ttl%time.Second != 0) {
		return fmt.Errorf("--ttl must be a positive whole number of seconds, not %v", *ttl)
	}
	if *expiresAt != "" {
		if *ttl > 0 {
			return errors.New("--ttl and --expires-at exclude each other")
		}
		at, err := time.Parse(time.RFC3339, *expiresAt)
		if err != nil {
			return fmt.Errorf("--expires-at: want RFC 3339, e.g. 2027-01-02T15:04:05Z: %w", err)
		}
		o.ExpiresAt = at
	}
	if *data != "" {
		o.Data = []byte(*data)
	}
	s, err := sf.open(name)
	if err != nil {
		return err
	}
	m, err := s.Create(ctx, o)
	if err != nil {
		return err
	}
	created := m.Status == 201
	// The create's answer carries the tail but not every setting (its TTL, its expiry): read the
	// stream's metadata as info shows it.
	if h, err := s.Head(ctx); err == nil {
		m = h
	}
	return printInfo(stdout, infoOf(s, m, created), *asJSON)
}

// runDelete deletes a stream.
func runDelete(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("delete", stderr)
	var sf streamFlags
	sf.register(fs)
	name, err := oneStream(fs, "delete", "Delete a stream and all its data; a later create at the path starts a new stream.", args, stderr)
	if err != nil {
		return err
	}
	s, err := sf.open(name)
	if err != nil {
		return err
	}
	if err := s.Delete(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %s\n", client.RedactURL(s.URL()))
	return nil
}

// runInfo prints a stream's metadata (a HEAD request).
func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("info", stderr)
	var sf streamFlags
	sf.register(fs)
	asJSON := fs.Bool("json", false, "print the metadata as one JSON object")
	name, err := oneStream(fs, "info", "Show a stream's metadata.", args, stderr)
	if err != nil {
		return err
	}
	s, err := sf.open(name)
	if err != nil {
		return err
	}
	m, err := s.Head(ctx)
	if err != nil {
		return err
	}
	return printInfo(stdout, infoOf(s, m, false), *asJSON)
}

// runVersion prints the module's version (as the go command stamped it) and the build's Go
// version and VCS revision when known.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", stderr)
	asJSON := fs.Bool("json", false, "print as one JSON object")
	if _, err := parseInterspersed(fs, args); err != nil {
		return err
	}
	v := struct {
		Version  string `json:"version"`
		Go       string `json:"go"`
		Revision string `json:"revision,omitempty"`
		Modified bool   `json:"modified,omitempty"`
	}{Version: "(devel)"}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v.Go = bi.GoVersion
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(v)
	}
	line := "foldstream " + node.Version() + " " + v.Go
	if v.Revision != "" {
		line += " " + v.Revision
		if v.Modified {
			line += " (modified)"
		}
	}
	_, err := fmt.Fprintln(stdout, line)
	return err
}
