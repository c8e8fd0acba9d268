package server

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/foldstream/foldstream/foldtype"
)

// ProcessorParker is optionally implemented by a Processors: skip the event a failing processor
// fails on, list the events set aside so, run them again, or drop one
// (docs/operations.md#skip). *host.Host implements it.
type ProcessorParker interface {
	// Skip parks the event the processor fails on and moves the processor past it.
	Skip(ctx context.Context, path, slug, reason string) (foldtype.ParkedEvent, error)
	// ParkedEvents lists the processor's parked events by offset, from the database.
	ParkedEvents(ctx context.Context, path, slug string) ([]foldtype.ParkedEvent, error)
	// Redrive runs the parked events again (offset 0: every one), in offset order.
	Redrive(ctx context.Context, path, slug string, offset int64) (foldtype.RedriveResult, error)
	// Discard drops the parked event at offset without running it.
	Discard(ctx context.Context, path, slug string, offset int64) error
}

// serveProcessorParked answers the parked events of one processor (the ops scope):
//
//	GET /v1/processor/<slug>/<stream>?parked=1
//	  → 200 {"parked": [{offset, type, code, message, attempts, node, at, by, reason}, …]}
//
// by offset, read from the database: any node answers, also when the processor's owner is dead.
func (s *Server) serveProcessorParked(w http.ResponseWriter, r *http.Request, rest string) {
	slug, path, _, ok := s.processorRoute(w, r, rest, OpProcessorOps, "?parked=1")
	if !ok {
		return
	}
	pk, ok := s.cfg.Processors.(ProcessorParker)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors keep no parked events", 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProcessorWaitTimeout)
	defer cancel()
	list, err := pk.ParkedEvents(ctx, path, slug)
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	if list == nil {
		list = []foldtype.ParkedEvent{}
	}
	writeJSON(w, r, map[string]any{"parked": list})
}

// parkOp is the skip, redrive and discard verbs of serveProcessorOp:
//
//	POST /v1/processor/<slug>/<stream>?op=skip[&reason=…]
//	  → 200 {"op": "skip", "slug", "stream", "parked": {offset, type, code, message, attempts, node, at, by, reason}}
//	POST …?op=redrive[&offset=N][&reason=…] → 200 {"op": "redrive", "slug", "stream", "redriven": [offsets]}
//	POST …?op=discard&offset=N[&reason=…]  → 200 {"op": "discard", "slug", "stream", "offset": N}
//
// It returns the verb's run, which sets *answer to the rest of the answer, and the audit line's
// parameters; a malformed query, or processors that keep no parked events, are answered here
// (run nil).
func parkOp(w http.ResponseWriter, p Processors, q url.Values, op, path, slug string, answer *map[string]any) (run func(ctx context.Context) error, audit []any) {
	pk, ok := p.(ProcessorParker)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors keep no parked events", 0)
		return nil, nil
	}
	var offset int64
	if v := q.Get("offset"); v != "" || op == "discard" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			writeCoded(w, foldtype.CodeBadRequest, "offset must be the offset of a parked event (a whole number above 0)", 0)
			return nil, nil
		}
		offset = n
	}
	switch op {
	case "skip":
		return func(ctx context.Context) error {
			pe, err := pk.Skip(ctx, path, slug, q.Get("reason"))
			if err == nil {
				*answer = map[string]any{"parked": pe}
			}
			return err
		}, nil
	case "redrive":
		return func(ctx context.Context) error {
			res, err := pk.Redrive(ctx, path, slug, offset)
			if err == nil {
				*answer = map[string]any{"redriven": res.Redriven}
			}
			return err
		}, []any{"offset", offset}
	default: // discard
		return func(ctx context.Context) error {
			err := pk.Discard(ctx, path, slug, offset)
			if err == nil {
				*answer = map[string]any{"offset": offset}
			}
			return err
		}, []any{"offset", offset}
	}
}
