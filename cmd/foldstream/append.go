package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
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
	producerID := fs.String("producer-id", "", "producer id for --lines (default: foldstream-cli-<pid>); each run takes the id over with a new epoch and stores all its input once")
	resumeEpoch := fs.Int64("resume-epoch", -1, "with --lines: rerun the SAME input of an earlier run of --producer-id in this epoch (printed by that run); what it stored is skipped")
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
		last, err = appendLines(ctx, s, id, *resumeEpoch, stderr)
		if err != nil {
			return err
		}
	default:
		var data []byte
		if len(pos) == 2 {
			data = []byte(pos[1])
		} else if data, err = io.ReadAll(stdin); err != nil {
			return err
		}
		if len(data) == 0 && !*closeAfter {
			return errors.New("nothing to append: the input is empty (--close closes the stream without data)")
		}
		if len(data) > 0 {
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

// lingerForever makes the producer cut batches by size only, so a rerun of the same input cuts
// the same batches (same sequence numbers) and --resume-epoch lines up with the earlier run.
const lingerForever = 100 * 365 * 24 * time.Hour

// appendLines sends stdin, one message per line, through an idempotent producer with id, and
// reports how many messages were stored and how many were already present
// (docs/client.md#producer-ids-in-the-cli). resumeEpoch < 0 takes the id over with a new epoch
// (every message is stored once); otherwise it resumes that epoch from seq 0, skipping the
// batches an earlier run with the same input stored. It fails when input was not stored.
func appendLines(ctx context.Context, s *client.Stream, id string, resumeEpoch int64, stderr io.Writer) (last string, err error) {
	resume := resumeEpoch >= 0
	var stored, present atomic.Int64
	opts := client.ProducerConfig{
		Linger: lingerForever,
		OnBatch: func(b client.BatchOutcome) {
			// A duplicate that this run sent only once was written by an earlier run with the
			// same id and epoch; a resent duplicate is this run's own earlier attempt.
			if b.Duplicate && (resume || !b.Resent) {
				present.Add(int64(b.Messages))
			} else {
				stored.Add(int64(b.Messages))
			}
		},
	}
	if resume {
		opts.Epoch, opts.Resume = resumeEpoch, true
	}
	// Otherwise the producer starts a fresh session: the clock's milliseconds are above any
	// earlier run's epoch, and if the server knows a higher one it moves past it.
	p, err := client.NewIdempotentProducer(s, id, opts)
	if err != nil {
		return "", err
	}
	isJSON := client.IsJSON(s.ContentType())
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	lineNo, sent := 0, 0
	var lineErr error
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if !isJSON {
			line = append(append([]byte(nil), line...), '\n')
		}
		if err := p.AppendContext(ctx, line); err != nil {
			if errors.Is(err, client.ErrProducerFailed) {
				break // a batch failed; Close below reports why
			}
			if errors.Is(err, client.ErrInvalidArgument) && isJSON {
				err = errors.New("not one JSON value (a JSON stream takes one JSON value per line)")
			}
			lineErr = fmt.Errorf("line %d: %w", lineNo, err)
			break
		}
		sent++
	}
	if lineErr == nil {
		if err := sc.Err(); err != nil {
			lineErr = fmt.Errorf("reading stdin after line %d: %w", lineNo, err)
		}
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	closeErr := p.Close(closeCtx)
	fmt.Fprintf(stderr, "stored %d messages, %d already present (producer %q, epoch %d)\n",
		stored.Load(), present.Load(), id, p.Epoch())
	var stale *client.StaleEpochError
	if resume && errors.As(closeErr, &stale) {
		closeErr = fmt.Errorf("producer %q is at epoch %d now (a later run took it over), not --resume-epoch %d", id, stale.CurrentEpoch, resumeEpoch)
	}
	switch {
	case lineErr != nil:
		err := fmt.Errorf("%w; of the %d messages before it, %d were stored", lineErr, sent, stored.Load())
		if present.Load() > 0 {
			err = fmt.Errorf("%w and %d were already present", err, present.Load())
		}
		if closeErr != nil {
			err = fmt.Errorf("%w; sending failed: %w", err, closeErr)
		}
		return "", err
	case closeErr != nil:
		return "", fmt.Errorf("%w; %d of the %d messages read were not confirmed stored", closeErr, int64(sent)-stored.Load()-present.Load(), sent)
	case !resume && present.Load() > 0:
		return "", fmt.Errorf("%d messages may NOT be stored: the server already held their sequence numbers in producer %q epoch %d, so another writer uses that id and epoch (or a proxy repeated the request); check the stream before running again", present.Load(), id, p.Epoch())
	}
	if resume && present.Load() > 0 {
		fmt.Fprintf(stderr, "the %d messages already present were stored by the earlier run in epoch %d and were skipped\n", present.Load(), resumeEpoch)
	}
	return p.LastOffset(), nil
}
