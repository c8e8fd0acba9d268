package foldtype

import (
	"context"
	"time"
)

// HeaderForwardedOp marks an operator's verb one node passes on to the node that runs the
// processor, naming the node that passed it on. A node does not pass such a verb on again. It
// changes nothing about the audit: the node that takes the verb stores its record, whoever sent it
// (docs/operations.md#audit).
const HeaderForwardedOp = "Foldstream-Forwarded-Op"

// HeaderOpRecorded, on the answer to a verb one node passed on, says that the node which took it
// stored its audit record, so the node that passed it on stores none.
const HeaderOpRecorded = "Foldstream-Op-Recorded"

// AuditEntry is one operator's verb on a processor, as the audit stores it (docs/operations.md#audit).
type AuditEntry struct {
	// ID orders the records (larger is later).
	ID int64 `json:"id"`
	// At is when the verb was taken.
	At time.Time `json:"at"`
	// Actor is who asked (a token's name; empty when the server has no names for callers).
	Actor string `json:"actor"`
	// Op is the verb: retry, pause, resume.
	Op string `json:"op"`
	// Path and Slug name the processor.
	Path string `json:"path"`
	Slug string `json:"slug"`
	// Reason is the operator's reason, as given.
	Reason string `json:"reason,omitempty"`
	// Outcome is "done" or "refused: CODE".
	Outcome string `json:"outcome"`
	// Node is the node that took the verb.
	Node string `json:"node,omitempty"`
}

// OperatorRequest is what a node keeps of an operator's request (docs/operations.md) to pass it
// on when the verb runs on another node: that node authorizes the same credentials and audits
// the same reason.
type OperatorRequest struct {
	// Authorization is the request's Authorization header.
	Authorization string
	// Reason is the operator's reason, as given.
	Reason string
	// Actor names the operator (a token's name) for the state rows and the audit; empty when
	// unknown.
	Actor string
	// ForwardedBy names the node that passed the verb on (its HeaderForwardedOp); empty when the
	// operator sent it here. A forwarded verb is not passed on again.
	ForwardedBy string
	// Recorded, when set, is called when the node the verb was passed on to answers that it
	// stored the verb's audit record (HeaderOpRecorded): this node then stores none.
	Recorded func()
}

type operatorRequestKey struct{}

// WithOperatorRequest returns ctx carrying r.
func WithOperatorRequest(ctx context.Context, r OperatorRequest) context.Context {
	return context.WithValue(ctx, operatorRequestKey{}, r)
}

// OperatorRequestOf returns the OperatorRequest WithOperatorRequest put in ctx, or the zero value.
func OperatorRequestOf(ctx context.Context) OperatorRequest {
	r, _ := ctx.Value(operatorRequestKey{}).(OperatorRequest)
	return r
}

// BulkResult is the outcome of a bulk verb over the streams a path pattern matches
// (docs/operations.md#bulk-verbs).
type BulkResult struct {
	// Matched counts the streams the pattern matched where slug is registered.
	Matched int `json:"matched"`
	// Changed counts those the verb changed (a dry run: would change): paused ones for resume,
	// the others for pause, failing ones for retry and skip, those with a next version not
	// switched in for rebuild.
	Changed int `json:"changed"`
	// Failed counts those where the verb failed; FirstError is the first failure's message.
	Failed     int    `json:"failed"`
	FirstError string `json:"firstError,omitempty"`
	// FirstErr is that first failure itself. It is not serialised: a server tells its client only
	// what the error's code lets it tell (its full text may name the database or the code path).
	FirstErr error `json:"-"`
	// DryRun reports that nothing was changed.
	DryRun bool `json:"dryRun"`
}
