package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/foldstream/foldstream/client"
	"github.com/foldstream/foldstream/server"
)

// Client sub-command defaults.
const (
	defaultServer = "http://127.0.0.1:4437"
	streamsPrefix = "/v1/stream/"
)

// defaultRetries is how often a failed request is retried by default: with the client's backoff
// (100 ms, then 200 ms, each with jitter) a refused connection fails in well under 2 s.
const defaultRetries = 2

// untilInterrupted is the --retries value of read and tail by default: a request that failed on
// the network, 429 or 5xx is retried until the command is interrupted, each wait as long as the
// server's Retry-After asks (at most the client's 10 s cap), so an outage of the server or its
// database does not end them.
const untilInterrupted = -1

// streamFlags are the flags every sub-command that reads or writes one stream shares.
type streamFlags struct {
	clientFlags
	retries int
	// following allows --retries -1 (untilInterrupted): the commands that follow a stream.
	following bool
	stderr    io.Writer
}

func (f *streamFlags) register(fs *flag.FlagSet) {
	f.clientFlags.register(fs)
	fs.IntVar(&f.retries, "retries", defaultRetries, "retries of a request that failed on the network, 429 or 5xx (each prints a line on stderr)")
	f.stderr = fs.Output()
}

// registerFollowing is register for the commands that follow a stream (read, tail): their
// requests are retried until interrupted unless --retries says how often.
func (f *streamFlags) registerFollowing(fs *flag.FlagSet) {
	f.clientFlags.register(fs)
	fs.IntVar(&f.retries, "retries", untilInterrupted, "retries of a request that failed on the network, 429 or 5xx, each after the server's Retry-After and printed on stderr; -1: until interrupted")
	f.following = true
	f.stderr = fs.Output()
}

// open returns a handle for name: a full http(s) URL is used as is, anything else names a stream
// under the server's /v1/stream/. Each retry prints one line on stderr.
func (f *streamFlags) open(name string) (*client.Stream, error) {
	attempts := f.retries + 1
	switch {
	case f.following && f.retries == untilInterrupted:
		attempts = math.MaxInt
	case f.retries < 0 && f.following:
		return nil, fmt.Errorf("--retries must be -1 (until interrupted) or more, not %d", f.retries)
	case f.retries < 0:
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
		MaxAttempts: attempts,
		OnRetry: func(e client.RetryEvent) {
			cause := fmt.Sprintf("status %d", e.Status)
			if e.Err != nil {
				cause = e.Err.Error()
				// A transport error repeats the URL, query and all: keep only its cause.
				if ue, ok := errors.AsType[*url.Error](e.Err); ok && ue.Err != nil {
					cause = ue.Err.Error()
				}
			}
			of := fmt.Sprintf("of %d", e.MaxAttempts-1)
			if e.MaxAttempts == math.MaxInt {
				of = "until interrupted"
			}
			fmt.Fprint(f.stderr, redact(fmt.Sprintf("foldstream: %s failed (%s); retry %d %s in %v (--retries)\n",
				e.Op, cause, e.Attempt, of, e.Delay.Round(time.Millisecond))))
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

// offsetFlag checks the value of an offset flag and returns it as the protocol takes it. The one
// rule of the CLI (docs/server.md#offsets): wherever it takes an offset it accepts "-1" (the
// start), "now" (the tail) where the protocol does, an offset a server printed
// (0000000000000000_0000000000000005), or a plain non-negative integer N, which is that same
// offset written short: position N, after the N-th message of a JSON stream or the N-th byte of
// another. On the wire the stream routes take only the protocol's form, so the CLI converts.
func offsetFlag(name, v string, sentinels bool) (string, error) {
	if sentinels && (v == client.OffsetStart || v == client.OffsetNow) {
		return v, nil
	}
	if v != "" && strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n <= 9_999_999_999_999_999 {
			return server.FormatOffset(n), nil
		}
	} else if _, _, err := server.ParseOffset(v); err == nil && v != client.OffsetStart && v != client.OffsetNow {
		return v, nil
	}
	want := "an integer or an offset a server printed"
	if sentinels {
		want = `"-1" (the start), "now" (the tail), ` + want
	}
	return "", fmt.Errorf("--%s %q: use %s", name, v, want)
}
