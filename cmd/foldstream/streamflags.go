package main

import (
	"flag"
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
