package server

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/foldstream/foldstream/foldtype"
)

// This file holds the checks every request passes before it reaches a handler: the Host name
// (docs/server.md#host-names), the browser origin (docs/server.md#browsers-and-origins), CORS
// preflights and the authorization hook (docs/server.md#authorization).

// principalKey carries the authorized principal of a request in its context.
type principalKey struct{}

// hostAllowed reports whether the request's Host may be answered: a name in AllowedHosts when
// that is set, and otherwise, on a connection that arrived over loopback, only a loopback name —
// a web page that rebinds its own DNS name to 127.0.0.1 still sends that name, so it is refused.
func (s *Server) hostAllowed(r *http.Request) bool {
	name := hostName(r.Host)
	if len(s.cfg.AllowedHosts) > 0 {
		return s.hostListed(name)
	}
	if !loopbackConn(r) {
		return true
	}
	return isLoopbackName(name)
}

// hostListed reports whether name is in AllowedHosts ("*" lists every name; "*.example.com"
// every name below example.com).
func (s *Server) hostListed(name string) bool {
	if name == "" {
		return false
	}
	for _, h := range s.cfg.AllowedHosts {
		switch {
		case h == "*":
			return true
		case strings.HasPrefix(h, "*."):
			if len(name) > len(h)-1 && strings.EqualFold(name[len(name)-len(h)+1:], h[1:]) {
				return true
			}
		case strings.EqualFold(h, name):
			return true
		}
	}
	return false
}

// hostVetted reports whether the request's Host was checked against a list (AllowedHosts, or
// the loopback names on a loopback connection), so it may be echoed in a Location.
func (s *Server) hostVetted(r *http.Request) bool {
	if len(s.cfg.AllowedHosts) > 0 {
		for _, h := range s.cfg.AllowedHosts {
			if h == "*" {
				return false
			}
		}
		return true
	}
	return loopbackConn(r)
}

// loopbackConn reports whether the request arrived on a loopback address of this machine.
func loopbackConn(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true // a Unix socket is only reachable on this machine
	}
	return false
}

// hostName returns the name of a Host header value without its port, lower-cased, and without
// the brackets of an IPv6 literal. A malformed value returns "".
func hostName(host string) string {
	if host == "" || len(host) > 1024 {
		return ""
	}
	name := host
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return ""
		}
		name = host[1:end]
		rest := host[end+1:]
		if rest != "" && (rest[0] != ':' || !allDigits(rest[1:])) {
			return ""
		}
		if net.ParseIP(name) == nil {
			return ""
		}
		return strings.ToLower(name)
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		if !allDigits(host[i+1:]) {
			return ""
		}
		name = host[:i]
	}
	if name == "" || strings.ContainsAny(name, ":/\\@ ") {
		return ""
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x21 || name[i] > 0x7e {
			return ""
		}
	}
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isLoopbackName reports whether a host name always means this machine: localhost and the names
// below it (browsers resolve *.localhost to loopback themselves), 127.0.0.0/8 and ::1.
func isLoopbackName(name string) bool {
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// originAllowed reports whether a browser page of origin (an Origin header value) may write:
// an origin in AllowedOrigins, or the server's own origin (the Origin's authority equals the
// request's Host or PublicBaseURL's). "null" (sandboxed frames, local files) never may.
func (s *Server) originAllowed(r *http.Request, origin string) bool {
	for _, o := range s.cfg.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" || u.User != nil {
		return false
	}
	if s.publicBase != nil {
		return strings.EqualFold(u.Host, s.publicBase.Host)
	}
	return strings.EqualFold(u.Host, r.Host)
}

// originListed reports whether origin is in AllowedOrigins (the server's own origin does not
// count): only those are granted Private Network Access.
func (s *Server) originListed(origin string) bool {
	for _, o := range s.cfg.AllowedOrigins {
		if o == "*" || strings.EqualFold(o, origin) {
			return true
		}
	}
	return false
}

// methodOp returns the operation of a stream request's method ("" for methods with none).
func methodOp(method string) Operation {
	switch method {
	case http.MethodGet, http.MethodHead:
		return OpRead
	case http.MethodPost:
		return OpAppend
	case http.MethodPut:
		return OpCreate
	case http.MethodDelete:
		return OpDelete
	}
	return ""
}

// checkOrigin refuses a browser request whose origin may not perform op: writes (and, with
// RestrictReadOrigins, reads) need an allowed origin. It runs for every request carrying Origin,
// preflighted or not: a form or a fetch with a "simple" content type writes without a preflight.
// It sets the CORS response headers and reports whether to go on.
func (s *Server) checkOrigin(w http.ResponseWriter, r *http.Request, op Operation) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	restricted := op.Writes() || s.cfg.RestrictReadOrigins || op == ""
	if restricted && !s.originAllowed(r, origin) {
		if s.cfg.RestrictReadOrigins {
			w.Header().Del("Access-Control-Allow-Origin")
		}
		writeCoded(w, foldtype.CodeForbidden, "origin "+quoteHeader(origin)+" may not "+opVerb(op)+
			" on this server (see the allowed origins in its configuration)", 0)
		return false
	}
	if s.cfg.RestrictReadOrigins {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
	}
	return true
}

// preflight answers an OPTIONS request: a CORS preflight for a method the origin may use gets the
// allow lists; one for a write from an origin that may not write gets 403, so the browser never
// sends the write. A Private Network Access preflight (Access-Control-Request-Private-Network)
// is granted only to origins listed in AllowedOrigins: a public web page is not let into a
// server on this machine or network just because it may read.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	method := r.Header.Get("Access-Control-Request-Method")
	if origin == "" || method == "" {
		w.WriteHeader(http.StatusNoContent) // not a preflight
		return
	}
	op := methodOp(method)
	if op == "" && strings.HasPrefix(r.URL.Path, s.cfg.ProcessorPrefix) {
		op = OpProcessorRead
	}
	if !s.checkOrigin(w, r, op) {
		return
	}
	h := w.Header()
	if r.Header.Get("Access-Control-Request-Private-Network") != "" {
		if !s.originListed(origin) {
			writeCoded(w, foldtype.CodeForbidden, "origin "+quoteHeader(origin)+
				" may not reach this server from a public network (list it in the allowed origins)", 0)
			return
		}
		h.Set("Access-Control-Allow-Private-Network", "true")
		h.Add("Vary", "Access-Control-Request-Private-Network")
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}

// authorize runs Config.Authorize for op on path. It answers the refusal itself and returns
// ok=false then.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, op Operation, path string) (*foldtype.Principal, bool) {
	if s.cfg.Authorize == nil {
		return nil, true
	}
	p, err := s.cfg.Authorize(r, op, path)
	if err == nil {
		return p, true
	}
	var fe *foldtype.Error
	if errors.As(err, &fe) && (fe.Code == foldtype.CodeUnauthorized || fe.Code == foldtype.CodeForbidden) {
		writeCoded(w, fe.Code, fe.Error(), 0)
		return nil, false
	}
	s.log.Error("authorization failed", "requestId", w.Header().Get(HeaderRequestID), "method", r.Method, "path", r.URL.Path, "op", op, "err", err)
	writeError(w, http.StatusInternalServerError, withheldMessages[foldtype.CodeInternal])
	return nil, false
}

// Authorized runs the request checks of the server (Host name, origin, Config.Authorize) for a
// route an application adds beside it (for example a stream listing), answering the refusal
// itself. It returns the principal and whether to go on.
func (s *Server) Authorized(w http.ResponseWriter, r *http.Request, op Operation, path string) (*foldtype.Principal, bool) {
	if !s.hostAllowed(r) {
		s.refuseHost(w, r)
		return nil, false
	}
	if !s.checkOrigin(w, r, op) {
		return nil, false
	}
	return s.authorize(w, r, op, path)
}

func (s *Server) refuseHost(w http.ResponseWriter, r *http.Request) {
	writeCoded(w, foldtype.CodeForbidden, "host "+quoteHeader(r.Host)+
		" is not served here (a loopback server answers only loopback names unless its allowed hosts say otherwise)", 0)
}

// quoteHeader quotes a client-supplied value for an error message, shortened.
func quoteHeader(v string) string {
	if len(v) > 100 {
		v = v[:100] + "…"
	}
	return `"` + strings.ToValidUTF8(v, "?") + `"`
}

func opVerb(op Operation) string {
	switch op {
	case OpAppend:
		return "append"
	case OpCreate:
		return "create streams"
	case OpDelete:
		return "delete streams"
	case OpRead, OpProcessorRead, OpList:
		return "read"
	case OpProcessorOps:
		return "operate processors"
	}
	return "use this method"
}
