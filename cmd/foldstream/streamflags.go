package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/foldstream/foldstream/client"
)

// Client sub-command defaults.
const (
	defaultServer = "http://127.0.0.1:4437"
	streamsPrefix = "/v1/stream/"
)

// defaultRetries is how often a failed request is retried by default: with the client's backoff
// (100 ms, then 200 ms, each with jitter) a refused connection fails in well under 2 s.
const defaultRetries = 2

// streamFlags are the flags every sub-command that reads or writes one stream shares.
type streamFlags struct {
	clientFlags
	retries int
	stderr  io.Writer
}

func (f *streamFlags) register(fs *flag.FlagSet) {
	f.clientFlags.register(fs)
	fs.IntVar(&f.retries, "retries", defaultRetries, "retries of a request that failed on the network, 429 or 5xx (each prints a line on stderr)")
	f.stderr = fs.Output()
}

// open returns a handle for name: a full http(s) URL is used as is, anything else names a stream
// under the server's /v1/stream/. Each retry prints one line on stderr.
func (f *streamFlags) open(name string) (*client.Stream, error) {
	if f.retries < 0 {
		return nil, fmt.Errorf("--retries must be 0 or more, not %d", f.retries)
	}
	h, err := f.header()
	if err != nil {
		return nil, err
	}
	u := name
	if !strings.HasPrefix(name, "http://") && !strings.HasPrefix(name, "https://") {
		u = strings.TrimRight(f.server, "/") + streamsPrefix + escapePath(strings.TrimPrefix(name, "/"))
	}
	return client.NewStream(u, client.Config{Header: h, Retry: client.RetryPolicy{
		MaxAttempts: f.retries + 1,
		OnRetry: func(e client.RetryEvent) {
			cause := fmt.Sprintf("status %d", e.Status)
			if e.Err != nil {
				cause = e.Err.Error()
				// A transport error repeats the URL, query and all: keep only its cause.
				if ue, ok := errors.AsType[*url.Error](e.Err); ok && ue.Err != nil {
					cause = ue.Err.Error()
				}
			}
			fmt.Fprint(f.stderr, redact(fmt.Sprintf("foldstream: %s failed (%s); retry %d of %d in %v (--retries)\n",
				e.Op, cause, e.Attempt, e.MaxAttempts-1, e.Delay.Round(time.Millisecond))))
		},
	}})
}

// escapePath escapes each segment of a stream path, keeping its slashes: "carts/ivan" stays
// carts/ivan in the URL (and in every message that shows it), not carts%2Fivan.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// usageError is a flag the flag package refused; it has printed the error and the usage already,
// so main prints nothing more.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("foldstream "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseInterspersed parses flags that may come before or after positional arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseStreamArg parses args (flags may follow the stream name) and returns the one STREAM
// argument, printing the usage when there is not exactly one.
func parseStreamArg(fs *flag.FlagSet, args []string) (string, error) {
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

// parseLiveMode checks a --mode value.
func parseLiveMode(mode string) (client.LiveMode, error) {
	switch lm := client.LiveMode(mode); lm {
	case client.LiveAuto, client.LiveSSE, client.LiveLongPoll:
		return lm, nil
	}
	return "", fmt.Errorf("unknown --mode %q: use auto, sse or long-poll", mode)
}
