package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/foldstream/foldstream/client"
)

// Client sub-command defaults.
const (
	defaultServer = "http://127.0.0.1:4437"
	streamsPrefix = "/v1/stream/"
)

// streamFlags are the flags every client sub-command shares.
type streamFlags struct {
	server string
}

func (f *streamFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", defaultServer, "server base URL")
}

// open returns a handle for name: a full http(s) URL is used as is, anything else names a stream
// under the server's /v1/stream/.
func (f *streamFlags) open(name string) (*client.Stream, error) {
	u := name
	if !strings.HasPrefix(name, "http://") && !strings.HasPrefix(name, "https://") {
		u = strings.TrimRight(f.server, "/") + streamsPrefix + url.PathEscape(strings.TrimPrefix(name, "/"))
	}
	return client.NewStream(u, client.Options{})
}

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
			return nil, err
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
