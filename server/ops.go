package server

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
)

// ProcessorOps is optionally implemented by a Processors: the operator's verbs on one processor
// (docs/operations.md). *host.Host implements it.
type ProcessorOps interface {
	// RetryNow makes a failing processor's next attempt run now instead of at its backoff time.
	RetryNow(ctx context.Context, path, slug string) error
}

// maxReasonLength bounds an operator's reason, which goes to the log as given.
const maxReasonLength = 1024

// serveProcessorOp answers an operator's verb on a processor:
//
//	POST /v1/processor/<slug>/<stream>?op=retry[&reason=…] → 200 {"op": "retry", "slug": …, "stream": …}
//	POST …?op=replay&from=N&effects=none|again[&reason=…] (server/replay.go)
//
// It needs OpProcessorOps (of BearerTokens, an ops-scoped token). Every verb, done or refused by
// the processor, leaves one audit line at info in the server's log: who, what, on which processor,
// why, and how it ended, under the request's id.
func (s *Server) serveProcessorOp(w http.ResponseWriter, r *http.Request, rest string) {
	slug, name, ok := strings.Cut(rest, "/")
	if !ok || slug == "" || name == "" {
		writeError(w, http.StatusNotFound, "use "+s.cfg.ProcessorPrefix+"<slug>/<stream>")
		return
	}
	path := "/" + name
	if !s.checkOrigin(w, r, OpProcessorOps) {
		return
	}
	who, ok := s.authorize(w, r, OpProcessorOps, path)
	if !ok {
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeCoded(w, foldtype.CodeBadRequest, "malformed query string", 0)
		return
	}
	op, reason := q.Get("op"), q.Get("reason")
	if len(reason) > maxReasonLength {
		writeCoded(w, foldtype.CodeBadRequest, "reason is longer than 1024 bytes", 0)
		return
	}
	ops, ok := s.cfg.Processors.(ProcessorOps)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors take no operator verbs", 0)
		return
	}
	var run func(ctx context.Context) error
	var answer map[string]any // more of the answer, set by run
	var params []any          // the verb's parameters, for the audit line
	switch op {
	case "retry":
		run = func(ctx context.Context) error { return ops.RetryNow(ctx, path, slug) }
	case "replay":
		if run, params = replayOp(w, s.cfg.Processors, q, path, slug, &answer); run == nil {
			return
		}
	default:
		writeCoded(w, foldtype.CodeBadRequest, "op must be retry or replay", 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProcessorWaitTimeout)
	defer cancel()
	ctx = foldtype.WithOperatorRequest(ctx, foldtype.OperatorRequest{Authorization: r.Header.Get("Authorization"), Reason: reason})
	err = run(ctx)
	actor := ""
	if who != nil {
		actor = who.Actor
	}
	outcome := "done"
	if err != nil {
		outcome = "refused"
		var fe *foldtype.Error
		if errors.As(err, &fe) {
			outcome = "refused: " + string(fe.Code)
		}
	}
	s.log.Info("audit: processor "+op, append([]any{"requestId", w.Header().Get(HeaderRequestID), "actor", actor,
		"op", op, "path", path, "slug", slug, "reason", reason, "outcome", outcome}, params...)...)
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ans := map[string]any{"op": op, "slug": slug, "stream": name}
	maps.Copy(ans, answer)
	b, _ := json.Marshal(ans)
	_, _ = w.Write(append(b, '\n'))
}
