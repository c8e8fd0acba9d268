package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
	"github.com/foldstream/foldstream/subscriptions"
)

// The protocol's reserved subscription APIs under {prefix}__ds/ (docs/server.md#subscriptions).
// Their state, rules, signing keys and delivery are package subscriptions; this file only maps
// them to HTTP: it parses requests, answers in the protocol's shapes and status codes, and
// refuses webhook URLs by Config.AllowLoopbackWebhooks.

// maxSubscriptionBody caps a subscription API request body.
const maxSubscriptionBody = 1 << 20

// serveReserved serves a path under {prefix}__ds (rest is what follows "__ds/").
func (s *Server) serveReserved(w http.ResponseWriter, r *http.Request, rest string) {
	after, isSub := strings.CutPrefix(rest, "subscriptions/")
	id, sub, _ := strings.Cut(after, "/")
	// Every reserved path goes through the origin check and Config.Authorize first, even one
	// that names no route.
	op, authPath := OpRead, "/__ds/"+rest
	switch {
	case isSub && id != "":
		op, authPath = subscriptionOp(sub, r.Method), "/__ds/subscriptions/"+id
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		op = OpSubscribe
	}
	if !s.checkOrigin(w, r, op) {
		return
	}
	if _, ok := s.authorize(w, r, op, authPath); !ok {
		return
	}
	if rest == "jwks.json" {
		if !readOnly(r.Method) {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method not allowed: GET the key set")
			return
		}
		s.handleJWKS(w, r)
		return
	}
	if !isSub || id == "" {
		writeError(w, http.StatusNotFound, "reserved path: the subscription APIs are "+s.cfg.Prefix+"__ds/subscriptions/<id> and "+s.cfg.Prefix+"__ds/jwks.json")
		return
	}
	// The route table decides: a path it has no route for is 404, a method it has no route for is
	// 405 with the methods it has.
	var allowed []string
	for _, rt := range subscriptionRoutes {
		rest, ok := rt.match(sub)
		if !ok {
			continue
		}
		if rt.method == r.Method {
			rt.serve(s, w, r, id, rest)
			return
		}
		allowed = append(allowed, rt.method)
	}
	if len(allowed) == 0 {
		writeError(w, http.StatusNotFound, "no subscription route "+quoteHeader(sub))
		return
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method not allowed: use "+strings.Join(allowed, " or "))
}

// subscriptionOp is the operation Config.Authorize sees for a request to the path sub after a
// subscription id: its route's; for a method the path has no route for, a wake's when the path is
// a wake's (callback, ack, release), else a read (GET, HEAD) or a change of the subscription.
func subscriptionOp(sub, method string) Operation {
	wake := false
	for _, rt := range subscriptionRoutes {
		if _, ok := rt.match(sub); ok {
			if rt.method == method {
				return rt.op
			}
			wake = wake || rt.op == OpWake
		}
	}
	switch {
	case wake:
		return OpWake
	case method == http.MethodGet || method == http.MethodHead:
		return OpRead
	}
	return OpSubscribe
}

// subscriptionRoute is one route under {prefix}__ds/subscriptions/<id>: sub is the path after the
// id ("" for the subscription itself; one ending in "/" takes one name after it, passed to serve
// as rest), method its method, op the operation Config.Authorize sees (serveReserved).
type subscriptionRoute struct {
	sub    string
	method string
	op     Operation
	serve  func(s *Server, w http.ResponseWriter, r *http.Request, id, rest string)
}

// match reports whether the route serves the path sub after the subscription id, and what
// follows the route's own path.
func (rt subscriptionRoute) match(sub string) (rest string, ok bool) {
	if prefix, takesName := strings.CutSuffix(rt.sub, "/"); takesName {
		rest, ok = strings.CutPrefix(sub, prefix+"/")
		return rest, ok && rest != ""
	}
	return "", sub == rt.sub
}

// subscriptionRoutes are every route of the subscription APIs, in the order their methods are
// offered in an Allow header. A route is served only when it is listed here, and the tests walk
// this list (export_test.go), so a route added here is one the auth tests must cover.
var subscriptionRoutes = []subscriptionRoute{
	{sub: "", method: http.MethodGet, op: OpRead, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handleGetSubscription(w, r, id)
	}},
	{sub: "", method: http.MethodPut, op: OpSubscribe, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handlePutSubscription(w, r, id)
	}},
	{sub: "", method: http.MethodDelete, op: OpSubscribe, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		if err := s.subs.Delete(r.Context(), id); err != nil {
			s.writeSubError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}},
	{sub: "streams", method: http.MethodPost, op: OpSubscribe, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handleAddStreams(w, r, id)
	}},
	{sub: "streams/", method: http.MethodDelete, op: OpSubscribe, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, stream string) {
		if err := s.subs.RemoveStream(r.Context(), id, stream); err != nil {
			s.writeSubError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}},
	{sub: "claim", method: http.MethodPost, op: OpSubscribe, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handleClaim(w, r, id)
	}},
	{sub: "callback", method: http.MethodPost, op: OpWake, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handleAck(w, r, id, true)
	}},
	{sub: "ack", method: http.MethodPost, op: OpWake, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handleAck(w, r, id, false)
	}},
	{sub: "release", method: http.MethodPost, op: OpWake, serve: func(s *Server, w http.ResponseWriter, r *http.Request, id, _ string) {
		s.handleRelease(w, r, id)
	}},
}

// writeSubError answers a refusal of the subscription APIs: the problem shape (problem.go) with
// the protocol's own member beside it, "error": {"code": ..., "message": ..., <data>} (the
// conformance suite reads error.code and error.current_holder), and the code in
// Foldstream-Error-Code.
func (s *Server) writeSubError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, ok := statusOf(err)
	if !ok {
		s.writeStoreError(w, r, err)
		return
	}
	msg, held := clientMessage(code, err)
	body := map[string]any{"code": string(code), "message": msg}
	var fe *foldtype.Error
	if held {
		s.logWithheld(w, r, code, err)
	} else if errors.As(err, &fe) {
		for k, v := range fe.Data {
			body[k] = v
		}
	}
	h := w.Header()
	h.Set(HeaderErrorCode, string(code))
	switch status {
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="foldstream"`)
	case http.StatusServiceUnavailable:
		if h.Get("Retry-After") == "" {
			h.Set("Retry-After", "1")
		}
	}
	ext := problemMembers(fe, held)
	if ext == nil {
		ext = map[string]any{}
	}
	ext["error"] = body
	writeProblem(w, status, msg, ext)
}

func writeSubJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal error")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// readSubBody decodes a JSON request body into v; a refusal is answered and false returned.
func (s *Server) readSubBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSubscriptionBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			s.writeSubError(w, r, foldtype.NewError(foldtype.CodeTooLarge,
				map[string]any{foldtype.DataLimit: int64(maxSubscriptionBody), foldtype.DataLimitUnit: "bytes"},
				"the request body is over the limit of %d bytes", maxSubscriptionBody))
			return false
		}
		s.writeSubError(w, r, foldtype.NewError(foldtype.CodeBadRequest, nil, "read the request body: %v", err))
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		s.writeSubError(w, r, foldtype.NewError(foldtype.CodeBadRequest, nil, "the body is not the JSON object this route takes: %v", err))
		return false
	}
	return true
}

// baseURL is the scheme and authority this server is reached at, for URLs it hands out: the
// PublicBaseURL, or the request's own host when it was checked; "" when neither (the URLs are
// then paths).
func (s *Server) baseURL(r *http.Request) string {
	if s.publicBase != nil {
		return s.publicBase.String()
	}
	if !s.hostVetted(r) || hostName(r.Host) == "" {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type subscriptionBody struct {
	Type    string   `json:"type"`
	Pattern string   `json:"pattern"`
	Streams []string `json:"streams"`
	Webhook *struct {
		URL string `json:"url"`
	} `json:"webhook"`
	WakeStream  string `json:"wake_stream"`
	LeaseTTLms  int64  `json:"lease_ttl_ms"`
	Description string `json:"description"`
}

func (s *Server) handlePutSubscription(w http.ResponseWriter, r *http.Request, id string) {
	var b subscriptionBody
	if !s.readSubBody(w, r, &b) {
		return
	}
	cfg := subscriptions.Config{Type: b.Type, Pattern: b.Pattern, Streams: b.Streams, WakeStream: b.WakeStream,
		LeaseTTLms: b.LeaseTTLms, Description: b.Description, CallbackBase: s.baseURL(r)}
	if b.Webhook != nil {
		cfg.WebhookURL = b.Webhook.URL
	}
	if cfg.Type == subscriptions.Webhook && cfg.WebhookURL != "" {
		if err := subscriptions.CheckWebhookURL(cfg.WebhookURL, s.cfg.AllowLoopbackWebhooks); err != nil {
			s.writeSubError(w, r, err)
			return
		}
	}
	if b.LeaseTTLms < 0 {
		s.writeSubError(w, r, foldtype.NewError(foldtype.CodeBadRequest, nil, "lease_ttl_ms must be from 1000 to 600000"))
		return
	}
	info, created, err := s.subs.Put(r.Context(), id, cfg)
	if err != nil {
		s.writeSubError(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeSubJSON(w, status, s.subscriptionJSON(r, info))
}

func (s *Server) handleGetSubscription(w http.ResponseWriter, r *http.Request, id string) {
	info, err := s.subs.Get(r.Context(), id)
	if err != nil {
		s.writeSubError(w, r, err)
		return
	}
	writeSubJSON(w, http.StatusOK, s.subscriptionJSON(r, info))
}

func orNull(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// subscriptionJSON is the protocol's subscription object. It never carries a secret.
func (s *Server) subscriptionJSON(r *http.Request, in subscriptions.Info) map[string]any {
	links := make([]map[string]any, 0, len(in.Links))
	for _, l := range in.Links {
		links = append(links, map[string]any{"path": l.Path, "link_type": l.LinkType, "acked_offset": FormatOffset(l.Acked)})
	}
	out := map[string]any{
		"id": in.ID, "subscription_id": in.ID, "type": in.Config.Type,
		"pattern": orNull(in.Config.Pattern), "streams": links,
		"webhook": nil, "wake_stream": orNull(in.Config.WakeStream),
		"lease_ttl_ms": in.Config.LeaseTTLms, "created_at": in.Created.Format("2006-01-02T15:04:05.000Z"),
		"status": in.Status, "description": orNull(in.Config.Description),
		"generation": in.Generation, "next_attempt_at": nil,
	}
	if !in.NextAttempt.IsZero() {
		out["next_attempt_at"] = in.NextAttempt.Format("2006-01-02T15:04:05.000Z")
	}
	if in.Config.Type == subscriptions.Webhook {
		hook := map[string]any{"url": in.Config.WebhookURL}
		if keys, err := s.subs.WebhookKeys(r.Context()); err == nil && len(keys) > 0 {
			hook["signing"] = map[string]any{"alg": "ed25519", "kid": keys[len(keys)-1].KID,
				"jwks_url": s.baseURL(r) + s.cfg.Prefix + "__ds/jwks.json"}
		} else if err != nil {
			s.log.Error("subscription: read the webhook signing keys", "err", err)
		}
		out["webhook"] = hook
	}
	return out
}

func (s *Server) handleJWKS(w http.ResponseWriter, r *http.Request) {
	keys, err := s.subs.WebhookKeys(r.Context())
	if err != nil {
		s.writeSubError(w, r, err)
		return
	}
	set := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		set = append(set, subscriptions.PublicJWK(k))
	}
	b, _ := json.Marshal(map[string]any{"keys": set})
	h := w.Header()
	h.Set("Content-Type", "application/jwk-set+json")
	h.Set("Cache-Control", "public, max-age=300")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

func (s *Server) handleAddStreams(w http.ResponseWriter, r *http.Request, id string) {
	var b struct {
		Streams []string `json:"streams"`
	}
	if !s.readSubBody(w, r, &b) {
		return
	}
	if len(b.Streams) == 0 {
		s.writeSubError(w, r, foldtype.NewError(foldtype.CodeBadRequest, nil, "give the streams to link in streams"))
		return
	}
	if err := s.subs.AddStreams(r.Context(), id, b.Streams); err != nil {
		s.writeSubError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleClaim(w http.ResponseWriter, r *http.Request, id string) {
	var b struct {
		Worker string `json:"worker"`
	}
	if !s.readSubBody(w, r, &b) {
		return
	}
	wake, ok, err := s.subs.Claim(r.Context(), id, b.Worker)
	if err != nil {
		s.writeSubError(w, r, err)
		return
	}
	if !ok {
		w.WriteHeader(http.StatusNoContent) // no pending work: nothing to claim
		return
	}
	writeSubJSON(w, http.StatusOK, map[string]any{"wake_id": wake.WakeID, "generation": wake.Generation, "token": wake.Token,
		"streams": subscriptions.WakeStreamsJSON(wake.Streams), "lease_ttl_ms": wake.LeaseTTL.Milliseconds()})
}

// wakeToken is the bearer token of a callback, ack or release; a missing one is answered 401.
func (s *Server) wakeToken(w http.ResponseWriter, r *http.Request) (string, bool) {
	tok, ok := parseBearer(r.Header.Values("Authorization"))
	if !ok {
		s.writeSubError(w, r, foldtype.NewError(foldtype.CodeUnauthorized, nil,
			`send the wake's token as "Authorization: Bearer <token>"`))
		return "", false
	}
	return tok, true
}

type ackBody struct {
	WakeID     string `json:"wake_id"`
	Generation int64  `json:"generation"`
	Acks       []struct {
		Stream string `json:"stream"`
		Offset string `json:"offset"`
	} `json:"acks"`
	Done bool `json:"done"`
}

func (s *Server) handleAck(w http.ResponseWriter, r *http.Request, id string, callback bool) {
	tok, ok := s.wakeToken(w, r)
	if !ok {
		return
	}
	var b ackBody
	if !s.readSubBody(w, r, &b) {
		return
	}
	req := subscriptions.AckRequest{WakeID: b.WakeID, Generation: b.Generation, Done: b.Done}
	for _, a := range b.Acks {
		pos, now, err := ParseOffset(a.Offset)
		if err != nil || now || pos < 0 {
			s.writeSubError(w, r, foldtype.NewError(foldtype.CodeBadRequest, nil, "ack offset %q of %q: give an offset the wake reported", a.Offset, a.Stream))
			return
		}
		req.Acks = append(req.Acks, subscriptions.StreamAck{Stream: a.Stream, Offset: pos})
	}
	next, err := s.subs.Ack(r.Context(), id, tok, callback, req)
	if err != nil {
		s.writeSubError(w, r, err)
		return
	}
	writeSubJSON(w, http.StatusOK, map[string]any{"ok": true, "next_wake": next})
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request, id string) {
	tok, ok := s.wakeToken(w, r)
	if !ok {
		return
	}
	var b struct {
		WakeID     string `json:"wake_id"`
		Generation int64  `json:"generation"`
	}
	if !s.readSubBody(w, r, &b) {
		return
	}
	if err := s.subs.Release(r.Context(), id, tok, b.WakeID, b.Generation); err != nil {
		s.writeSubError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
