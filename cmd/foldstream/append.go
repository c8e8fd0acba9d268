package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/foldstream/foldstream/client"
)

// stdin is where append reads data when no DATA argument is given (a variable for tests).
var stdin io.Reader = os.Stdin

func init() {
	commands["append"] = command{
		summary: "append data (an argument or stdin) to a stream",
		run:     runAppend,
	}
}

func runAppend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("append", stderr)
	var sf streamFlags
	sf.register(fs)
	create := fs.Bool("create", false, "create the stream first (no error if it exists with the same content type)")
	contentType := fs.String("content-type", "", "content type for --create and for appends (default: the stream's)")
	lines := fs.Bool("lines", false, "each stdin line is one message, sent in batches through an idempotent producer")
	producerID := fs.String("producer-id", "", "producer id for --lines (default: foldstream-cli-<pid>); reuse it with --auto-claim to resume exactly once")
	autoClaim := fs.Bool("auto-claim", true, "with --lines, take over the producer id's epoch from an earlier run")
	seq := fs.String("seq", "", "Stream-Seq for a single append")
	closeAfter := fs.Bool("close", false, "close the stream after appending")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: foldstream append [flags] STREAM [DATA]\n\nSTREAM is a name under /v1/stream/ or a full URL; without DATA, stdin is appended.")
		fs.PrintDefaults()
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		fs.Usage()
		return errors.New("need STREAM and at most one DATA argument")
	}
	s, err := sf.open(pos[0])
	if err != nil {
		return err
	}
	if *create {
		if _, err := s.Create(ctx, client.CreateOptions{ContentType: *contentType}); err != nil {
			return err
		}
	} else if *contentType != "" {
		s.SetContentType(*contentType)
	} else if _, err := s.Head(ctx); err != nil {
		return err
	}
	var last string
	switch {
	case *lines:
		if len(pos) == 2 {
			return errors.New("--lines reads stdin; drop the DATA argument")
		}
		id := *producerID
		if id == "" {
			id = fmt.Sprintf("foldstream-cli-%d", os.Getpid())
		}
		p, err := client.NewIdempotentProducer(s, id, client.ProducerOptions{AutoClaim: *autoClaim})
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		n := 0
		for sc.Scan() {
			line := sc.Bytes()
			if !client.IsJSON(s.ContentType()) {
				line = append(append([]byte(nil), line...), '\n')
			}
			if len(strings.TrimSpace(string(line))) == 0 {
				continue
			}
			if err := p.AppendContext(ctx, line); err != nil {
				p.Close(context.Background())
				return err
			}
			n++
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := p.Close(closeCtx); err != nil {
			return err
		}
		if err := sc.Err(); err != nil {
			return err
		}
		last = p.LastOffset()
		fmt.Fprintf(stderr, "appended %d messages\n", n)
	default:
		var data []byte
		if len(pos) == 2 {
			data = []byte(pos[1])
		} else if data, err = io.ReadAll(stdin); err != nil {
			return err
		}
		if len(data) > 0 || !*closeAfter {
			var opts []client.AppendOption
			if *seq != "" {
				opts = append(opts, client.WithSeq(*seq))
			}
			if *closeAfter {
				r, err := s.Close(ctx, data, opts...)
				if err != nil {
					return err
				}
				fmt.Fprintln(stdout, r.NextOffset)
				return nil
			}
			r, err := s.Append(ctx, data, opts...)
			if err != nil {
				return err
			}
			last = r.NextOffset
		}
	}
	if *closeAfter {
		r, err := s.Close(ctx, nil)
		if err != nil {
			return err
		}
		last = r.NextOffset
	}
	fmt.Fprintln(stdout, last)
	return nil
}
