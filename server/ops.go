package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/foldstream/foldstream/foldtype"
)

// ProcessorOps is optionally implemented by a Processors: the operator's verbs on one processor
// (docs/operations.md). *host.Host implements it.
type ProcessorOps interface {
	// RetryNow makes a failing processor's next attempt run now instead of at its backoff time.
	RetryNow(ctx context.Context, path, slug string) error
}

// ProcessorPauser is optionally implemented by a Processors: pause and resume one processor
// (docs/operations.md#pause-and-resume). *host.Host implements it.
type ProcessorPauser interface {
	// Pause stops the processor taking work, durably, until Resume.
	Pause(ctx context.Context, path, slug, reason string) error
	// Resume lets a paused processor catch up and go on.
	Resume(ctx context.Context, path, slug string) error
}

// ProcessorAudit is optionally implemented by a Processors: the operators' verbs, stored in the
// database (docs/operations.md#audit). *host.Host implements it.
type ProcessorAudit interface {
	// RecordOp stores one verb: who, what, on which processor, why, and how it ended.
	RecordOp(ctx context.Context, rec foldtype.AuditEntry) error
	// Audit returns the verbs on the processor (every processor when path and slug are empty),
	// newest first, at most limit.
	Audit(ctx context.Context, path, slug string, limit int) ([]foldtype.AuditEntry, error)
}

// ProcessorBulk is optionally implemented by a Processors: one operator's verb (pause, resume,
// retry, skip, rebuild) on one processor of every stream a path pattern matches, or a count of
// the streams it would change (docs/operations.md#bulk-verbs). *host.Host implements it.
type ProcessorBulk interface {
	PauseMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (foldtype.BulkResult, error)
	ResumeMatching(ctx context.Context, pattern, slug string, dryRun bool) (foldtype.BulkResult, error)
	RetryMatching(ctx context.Context, pattern, slug string, dryRun bool) (foldtype.BulkResult, error)
	SkipMatching(ctx context.Context, pattern, slug, reason string, dryRun bool) (foldtype.BulkResult, error)
	RebuildMatching(ctx context.Context, pattern, slug string, dryRun bool) (foldtype.BulkResult, error)
}

// LastGoodStates is optionally implemented by a Processors: the last good state of a failing or
// paused processor (its stored checkpoint), which a plain snapshot read answers marked with
// Foldstream-Processor-State instead of a 503 (docs/operations.md#last-good-state).
type LastGoodStates interface {
	LastGoodState(ctx context.Context, path, slug string) (foldtype.Snapshot[json.RawMessage], error)
}

// serveProcessorAudit answers the audit of one processor (the ops scope):
//
//	GET /v1/processor/<slug>/<stream>?audit=1[&limit=N] → 200 {"audit": [{id, at, actor, op, path, slug, reason, outcome, node}, …]}
//
// newest first, at most limit (default 100, at most 1000).
func (s *Server) serveProcessorAudit(w http.ResponseWriter, r *http.Request, rest string) {
	slug, path, _, ok := s.processorRoute(w, r, rest, OpProcessorOps, "?audit=1")
	if !ok {
		return
	}
	au, ok := s.cfg.Processors.(ProcessorAudit)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors keep no audit", 0)
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, ok := parseDigits(v, 1000)
		if !ok || n <= 0 {
			writeCoded(w, foldtype.CodeBadRequest, "limit must be a whole number from 1 to 1000", 0)
			return
		}
		limit = int(n)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProcessorWaitTimeout)
	defer cancel()
	recs, err := au.Audit(ctx, path, slug, limit)
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	writeJSON(w, r, map[string]any{"audit": recs})
}

// serveProcessorBulk answers a bulk verb over the streams a path pattern matches:
//
//	POST /v1/processor/<slug>/?op=pause|resume|retry|skip|rebuild&pattern=/carts/*[&reason=…][&dryRun=1]
//	  → 200 {"op", "slug", "pattern", "matched", "changed", "failed", "firstError", "dryRun"}
//
// With dryRun=1 nothing changes and changed counts what would. One audit record names the pattern.
func (s *Server) serveProcessorBulk(w http.ResponseWriter, r *http.Request, rest string) {
	slug, name, _ := strings.Cut(rest, "/")
	if slug == "" || name != "" {
		writeError(w, http.StatusNotFound, "use "+s.cfg.ProcessorPrefix+"<slug>/?op=pause&pattern=/carts/*")
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeCoded(w, foldtype.CodeBadRequest, "malformed query string", 0)
		return
	}
	op, reason, pattern := q.Get("op"), q.Get("reason"), q.Get("pattern")
	if !s.checkOrigin(w, r, OpProcessorOps) {
		return
	}
	who, ok := s.authorize(w, r, OpProcessorOps, pattern)
	if !ok {
		return
	}
	if len(reason) > maxReasonLength {
		writeCoded(w, foldtype.CodeBadRequest, "reason is longer than 1024 bytes", 0)
		return
	}
	bulk, ok := s.cfg.Processors.(ProcessorBulk)
	if !ok {
		writeCoded(w, foldtype.CodeNoRoute, "this server's processors take no bulk verbs", 0)
		return
	}
	dryRun := q.Get("dryRun") == "1" || q.Get("dryRun") == "true"
	actor := ""
	if who != nil {
		actor = who.Actor
	}
	ctx := foldtype.WithOperatorRequest(r.Context(), foldtype.OperatorRequest{Authorization: r.Header.Get("Authorization"), Reason: reason, Actor: actor})
	var res foldtype.BulkResult
	switch op {
	case "pause":
		res, err = bulk.PauseMatching(ctx, pattern, slug, reason, dryRun)
	case "resume":
		res, err = bulk.ResumeMatching(ctx, pattern, slug, dryRun)
	case "retry":
		res, err = bulk.RetryMatching(ctx, pattern, slug, dryRun)
	case "skip":
		res, err = bulk.SkipMatching(ctx, pattern, slug, reason, dryRun)
	case "rebuild":
		res, err = bulk.RebuildMatching(ctx, pattern, slug, dryRun)
	default:
		writeCoded(w, foldtype.CodeBadRequest, "a bulk op must be pause, resume, retry, skip or rebuild", 0)
		return
	}
	outcome := fmt.Sprintf("done: %d of %d changed, %d failed", res.Changed, res.Matched, res.Failed)
	if dryRun {
		outcome = fmt.Sprintf("dry run: %d of %d would change", res.Changed, res.Matched)
	}
	if err != nil {
		outcome = refusedOutcome(err)
	}
	if res.FirstErr != nil {
		// The client is told the first failure as any error answer tells it: a failure of the
		// server's own condition by its code's generic message, with the detail in the log.
		code := foldtype.CodeOf(res.FirstErr)
		if code == "" {
			code = foldtype.CodeInternal
		}
		var held bool
		if res.FirstError, held = clientMessage(code, res.FirstErr); held {
			s.logWithheld(w, r, code, res.FirstErr)
		}
	}
	s.log.Info("audit: processor bulk "+op, "requestId", w.Header().Get(HeaderRequestID), "actor", actor,
		"op", op, "pattern", pattern, "slug", slug, "reason", reason, "outcome", outcome)
	s.recordOp(ctx, w, foldtype.AuditEntry{Actor: actor, Op: op, Path: pattern, Slug: slug, Reason: reason, Outcome: outcome})
	if err != nil {
		s.writeProcessorError(w, r, pattern, slug, err)
		return
	}
	b, _ := json.Marshal(struct {
		Op      string `json:"op"`
		Slug    string `json:"slug"`
		Pattern string `json:"pattern"`
		foldtype.BulkResult
	}{op, slug, pattern, res})
	writeOpAnswer(w, b)
}

// maxReasonLength bounds an operator's reason, which goes to the log as given.
const maxReasonLength = 1024

// serveProcessorOp answers an operator's verb on a processor:
//
//	POST /v1/processor/<slug>/<stream>?op=retry[&reason=…] → 200 {"op": "retry", "slug": …, "stream": …}
//	POST …?op=replay&from=N&effects=none|again[&reason=…] (server/replay.go)
//	POST …?op=skip|redrive|discard[&offset=N][&reason=…] (server/parked.go)
//	POST …?op=rebuild[&reason=…] (server/rebuild.go)
//
// It needs OpProcessorOps (of BearerTokens, an ops-scoped token). Every verb, done or refused by
// the processor, leaves one audit line at info in the server's log: who, what, on which processor,
// why, and how it ended, under the request's id.
func (s *Server) serveProcessorOp(w http.ResponseWriter, r *http.Request, rest string) {
	if r.URL.Query().Has("pattern") {
		s.serveProcessorBulk(w, r, rest)
		return
	}
	slug, path, who, ok := s.processorRoute(w, r, rest, OpProcessorOps, "")
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
	pauser, canPause := s.cfg.Processors.(ProcessorPauser)
	var run func(ctx context.Context) error
	var answer map[string]any // more of the answer, set by run
	var params []any          // the verb's parameters, for the audit line
	switch op {
	case "retry":
		run = func(ctx context.Context) error { return ops.RetryNow(ctx, path, slug) }
	case "pause":
		if canPause {
			run = func(ctx context.Context) error { return pauser.Pause(ctx, path, slug, reason) }
		}
	case "resume":
		if canPause {
			run = func(ctx context.Context) error { return pauser.Resume(ctx, path, slug) }
		}
	case "replay":
		if run, params = replayOp(w, s.cfg.Processors, q, path, slug, &answer); run == nil {
			return
		}
	case "skip", "redrive", "discard":
		if run, params = parkOp(w, s.cfg.Processors, q, op, path, slug, &answer); run == nil {
			return
		}
	case "rebuild":
		if run = rebuildOp(w, s.cfg.Processors, path, slug, &answer); run == nil {
			return
		}
	}
	if run == nil {
		writeCoded(w, foldtype.CodeBadRequest, "op must be retry, pause, resume, replay, skip, redrive, discard or rebuild", 0)
		return
	}
	actor := ""
	if who != nil {
		actor = who.Actor
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProcessorWaitTimeout)
	defer cancel()
	forwardedBy := r.Header.Get(foldtype.HeaderForwardedOp)
	var recordedThere atomic.Bool // the owner this node passed the verb on to stored its record
	ctx = foldtype.WithOperatorRequest(ctx, foldtype.OperatorRequest{Authorization: r.Header.Get("Authorization"), Reason: reason, Actor: actor,
		ForwardedBy: forwardedBy, Recorded: func() { recordedThere.Store(true) }})
	err = run(ctx)
	outcome := "done"
	if err != nil {
		outcome = refusedOutcome(err)
	}
	s.log.Info("audit: processor "+op, append([]any{"requestId", w.Header().Get(HeaderRequestID), "actor", actor,
		"op", op, "path", path, "slug", slug, "reason", reason, "outcome", outcome}, params...)...)
	// Stored once, by the node that took the verb, whoever sent it: a node that passed it on to
	// the owner stores it only when the owner did not answer that it stored it (a request's
	// forwarded mark is not trusted to skip the audit: any caller can send the header).
	if !recordedThere.Load() {
		if s.recordOp(ctx, w, foldtype.AuditEntry{Actor: actor, Op: op, Path: path, Slug: slug, Reason: reason, Outcome: outcome}) && forwardedBy != "" {
			w.Header().Set(foldtype.HeaderOpRecorded, "1")
		}
	}
	if err != nil {
		s.writeProcessorError(w, r, path, slug, err)
		return
	}
	ans := map[string]any{"op": op, "slug": slug, "stream": path[1:]}
	maps.Copy(ans, answer)
	b, _ := json.Marshal(ans)
	writeOpAnswer(w, b)
}

// refusedOutcome is the audit's outcome of a verb that failed with err: "refused", with err's
// code when it has one.
func refusedOutcome(err error) string {
	var fe *foldtype.Error
	if errors.As(err, &fe) {
		return "refused: " + string(fe.Code)
	}
	return "refused"
}

// recordOp stores the audit record of a verb when the processors keep an audit (ProcessorAudit),
// also when the caller has gone, and reports whether it was stored; a failure to store it is
// logged.
func (s *Server) recordOp(ctx context.Context, w http.ResponseWriter, e foldtype.AuditEntry) bool {
	au, ok := s.cfg.Processors.(ProcessorAudit)
	if !ok {
		return false
	}
	if err := au.RecordOp(context.WithoutCancel(ctx), e); err != nil {
		s.log.Warn("audit: storing the record failed", "requestId", w.Header().Get(HeaderRequestID), "err", err)
		return false
	}
	return true
}

// writeOpAnswer writes a verb's 200 answer, the JSON b.
func writeOpAnswer(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}
