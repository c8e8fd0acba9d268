package server

import (
	"bufio"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
)

// Operation names what a request does, as Config.Authorize sees it (docs/server.md#authorization).
type Operation string

// The operations a request can perform.
const (
	// OpRead reads a stream: GET (catch-up, long-poll, SSE) and HEAD. A fork's PUT is also an
	// OpRead of its source.
	OpRead Operation = "read"
	// OpAppend appends to or closes a stream: POST.
	OpAppend Operation = "append"
	// OpCreate creates a stream or a fork: PUT.
	OpCreate Operation = "create"
	// OpDelete deletes a stream: DELETE.
	OpDelete Operation = "delete"
	// OpProcessorRead reads a processor's snapshot, live state or live-state deltas (GET under
	// Config.ProcessorPrefix); the path is the stream the processor runs on.
	OpProcessorRead Operation = "processor-read"
	// OpList lists streams (the listing route); the path is the prefix listed, "/" for all.
	OpList Operation = "list"
	// OpMetrics reads the server's metrics (MetricsPath); the path is "/".
	OpMetrics Operation = "metrics"
	// OpSubscribe changes a subscription — create, delete, link or unlink streams — or claims
	// its wake (PUT, DELETE, POST under {prefix}__ds/subscriptions/); the path is
	// "/__ds/subscriptions/<id>". Reading a subscription or the signing keys is an OpRead.
	OpSubscribe Operation = "subscribe"
	// OpWake is a wake's callback, ack or release: the request's bearer token is the wake's own
	// token, which the subscription checks; the path is "/__ds/subscriptions/<id>".
	OpWake Operation = "wake"
	// OpProcessorOps runs an operator's verb on a processor (POST under Config.ProcessorPrefix with
	// ?op=, docs/operations.md); the path is the stream the processor runs on. Of BearerTokens,
	// only an ops-scoped token may.
	OpProcessorOps Operation = "processor-ops"
)

// Writes reports whether op changes data (append, create, delete).
func (op Operation) Writes() bool {
	return op == OpAppend || op == OpCreate || op == OpDelete || op == OpSubscribe || op == OpWake || op == OpProcessorOps
}

// AuthorizeFunc decides whether request r may perform op on the stream at path (the store path,
// "/orders" for /v1/stream/orders). It returns the principal the request acts for — the server
// stamps it as the source of the events the request appends (docs/server.md#provenance) — or nil
// for an anonymous caller that is allowed. To refuse, it returns a *foldtype.Error with
// CodeUnauthorized (no valid credentials: 401) or CodeForbidden (valid credentials, not allowed
// here: 403); any other error answers 500 and is logged.
//
// It runs on every request before anything is read or written, concurrently, so it must be safe
// for concurrent use and should be fast: it must not read the request body.
type AuthorizeFunc func(r *http.Request, op Operation, path string) (*foldtype.Principal, error)

// Scope is what a bearer token of BearerTokens may do.
type Scope string

// The scopes of BearerTokens.
const (
	// ScopeRead allows OpRead, OpProcessorRead, OpList and OpMetrics.
	ScopeRead Scope = "read"
	// ScopeReadWrite allows every operation but OpProcessorOps.
	ScopeReadWrite Scope = "read-write"
	// ScopeOps allows what ScopeRead allows and OpProcessorOps: an operator's token, which may
	// pause, retry or skip a processor but not write to streams.
	ScopeOps Scope = "ops"
)

// MinTokenLength is the shortest bearer token BearerTokens accepts (16 characters).
const MinTokenLength = 16

// BearerTokens is the built-in authorizer: a fixed set of named bearer tokens, each with a scope.
// Requests authenticate with "Authorization: Bearer <token>". A presented token is compared with
// every known token in constant time (crypto/subtle): the time taken depends on the lengths only,
// never on how close a guess was. Build it with ParseBearerTokens; its Authorize method is an
// AuthorizeFunc.
type BearerTokens struct {
	tokens []bearerToken
}

type bearerToken struct {
	token     string
	scope     Scope
	principal *foldtype.Principal // shared, never modified
}

// ParseBearerTokens reads tokens, one per line: a name (letters, digits, '.', '_', '-', '@'),
// a scope ("read", "read-write" or "ops") and the token itself (at least MinTokenLength characters of
// A–Z, a–z, 0–9, '-', '.', '_', '~', '+', '/', optionally ending in '='), separated by spaces or
// tabs. Blank lines and lines starting with '#' are ignored; ';' also separates entries, so the
// whole list fits in one environment variable. The name becomes the principal's actor.
func ParseBearerTokens(text string) (*BearerTokens, error) {
	t := &BearerTokens{}
	seenName := map[string]bool{}
	seenToken := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		for _, entry := range strings.Split(sc.Text(), ";") {
			entry = strings.TrimSpace(entry)
			if entry == "" || strings.HasPrefix(entry, "#") {
				continue
			}
			f := strings.Fields(entry)
			if len(f) != 3 {
				return nil, fmt.Errorf("tokens line %d: want <name> <scope> <token>, got %d fields", line, len(f))
			}
			name, scope, tok := f[0], Scope(f[1]), f[2]
			if !validActor(name) {
				return nil, fmt.Errorf("tokens line %d: name %q: use letters, digits, '.', '_', '-' or '@'", line, name)
			}
			if scope != ScopeRead && scope != ScopeReadWrite && scope != ScopeOps {
				return nil, fmt.Errorf("tokens line %d: scope %q: use read, read-write or ops", line, f[1])
			}
			if len(tok) < MinTokenLength || !isToken68(tok) {
				return nil, fmt.Errorf("tokens line %d (%s): a token needs at least %d characters of A-Z a-z 0-9 - . _ ~ + / (then optional '=')", line, name, MinTokenLength)
			}
			if seenName[name] {
				return nil, fmt.Errorf("tokens line %d: name %q given twice", line, name)
			}
			if seenToken[tok] {
				return nil, fmt.Errorf("tokens line %d (%s): this token is already given to another name", line, name)
			}
			seenName[name], seenToken[tok] = true, true
			t.tokens = append(t.tokens, bearerToken{token: tok, scope: scope, principal: &foldtype.Principal{Actor: name}})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	if len(t.tokens) == 0 {
		return nil, fmt.Errorf("tokens: no token given")
	}
	return t, nil
}

// Len returns the number of tokens.
func (t *BearerTokens) Len() int { return len(t.tokens) }

// Authorize is an AuthorizeFunc: a request without a known bearer token is UNAUTHORIZED; a
// read-scoped token asking for a write is FORBIDDEN, and so is any token but an ops-scoped one asking
// for OpProcessorOps, and an ops-scoped one asking for any other write.
func (t *BearerTokens) Authorize(r *http.Request, op Operation, _ string) (*foldtype.Principal, error) {
	if op == OpWake {
		return nil, nil // the bearer is the wake's token, checked by the subscription itself
	}
	tok, ok := parseBearer(r.Header.Values("Authorization"))
	if !ok {
		return nil, errUnauthorized
	}
	found := -1
	for i := range t.tokens {
		// Compare with every token, no early exit.
		if constantTimeEqual(tok, t.tokens[i].token) {
			found = i
		}
	}
	if found < 0 {
		return nil, errUnauthorized
	}
	bt := &t.tokens[found]
	switch {
	case op == OpProcessorOps:
		if bt.scope != ScopeOps {
			return nil, errNotOpsToken
		}
	case op.Writes() && bt.scope != ScopeReadWrite:
		return nil, errReadOnlyToken
	}
	return bt.principal, nil
}

var (
	errUnauthorized = &foldtype.Error{Code: foldtype.CodeUnauthorized,
		Message: `authentication required: send "Authorization: Bearer <token>" with a valid token`}
	errReadOnlyToken = &foldtype.Error{Code: foldtype.CodeForbidden,
		Message: "this token may only read"}
	errNotOpsToken = &foldtype.Error{Code: foldtype.CodeForbidden,
		Message: "processor operations need a token of the ops scope"}
)

// parseBearer extracts the token of an "Authorization: Bearer <token>" header: one header, the
// scheme in any case, one or more spaces, a token68 value (the token syntax of HTTP authentication, docs/server.md#authorization).
func parseBearer(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := values[0]
	const scheme = "bearer"
	if len(v) <= len(scheme)+1 || !strings.EqualFold(v[:len(scheme)], scheme) || v[len(scheme)] != ' ' {
		return "", false
	}
	tok := strings.TrimLeft(v[len(scheme):], " ")
	if !isToken68(tok) {
		return "", false
	}
	return tok, true
}

// isToken68 reports whether s is a token68: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" /
// "/" ) *"=".
func isToken68(s string) bool {
	i := 0
	for i < len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' {
			i++
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}

// validActor reports whether a token's name is usable as a principal's actor.
func validActor(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '@') {
			return false
		}
	}
	return true
}

// constantTimeEqual reports whether a == b in time that depends only on their lengths (the
// comparison crypto/subtle makes, on strings, so no token is copied).
func constantTimeEqual(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := 0; i < len(a); i++ {
		v |= a[i] ^ b[i]
	}
	return subtle.ConstantTimeByteEq(v, 0) == 1
}
