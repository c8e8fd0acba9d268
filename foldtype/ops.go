package foldtype

import "context"

// OperatorRequest is what a node keeps of an operator's request (docs/operations.md) to pass it
// on when the verb runs on another node: that node authorizes the same credentials and audits
// the same reason.
type OperatorRequest struct {
	// Authorization is the request's Authorization header.
	Authorization string
	// Reason is the operator's reason, as given.
	Reason string
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
