package foldtype

import "context"

type operatorAuthKey struct{}

// WithOperatorAuthorization returns ctx carrying the Authorization header of an operator's
// request (docs/operations.md). A host that runs the verb on another node passes it on, so that
// node authorizes the same token.
func WithOperatorAuthorization(ctx context.Context, authorization string) context.Context {
	return context.WithValue(ctx, operatorAuthKey{}, authorization)
}

// OperatorAuthorization returns the Authorization header WithOperatorAuthorization put in ctx,
// or "".
func OperatorAuthorization(ctx context.Context) string {
	a, _ := ctx.Value(operatorAuthKey{}).(string)
	return a
}
