package server

import (
	"net/http"
	"slices"
)

// The server's routes, as one list: what route (server.go) and the handlers it calls serve. The
// auth tests walk it (export_test.go), so a route added to the server is a route they must cover.

// routeInfo is one route: a method and a path pattern ({stream}, {slug}, {id}, {name} stand for
// one or more path segments), and the operation Config.Authorize sees ("" for none: the route
// needs no credentials).
type routeInfo struct {
	method  string
	pattern string
	op      Operation
}

// readOnlyMethods are the methods of the routes that only read: the processor views, the stream
// listing and information, the signing keys, the metrics and the health routes.
var readOnlyMethods = []string{http.MethodGet, http.MethodHead}

// readOnly reports whether method is one of readOnlyMethods.
func readOnly(method string) bool { return slices.Contains(readOnlyMethods, method) }

// standardMethods are the HTTP methods the stream routes are checked against (methodOp says which
// of them the stream routes serve).
var standardMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace}

// routes lists every route s serves. OPTIONS (the CORS preflight, answered on every path without
// credentials) and the console's static files (no data) are left out.
func (s *Server) routes() []routeInfo {
	var out []routeInfo
	for _, m := range readOnlyMethods {
		out = append(out, routeInfo{m, HealthPath, ""}, routeInfo{m, ReadyPath, ""})
		if s.metricsHandler != nil {
			out = append(out, routeInfo{m, MetricsPath, OpMetrics})
		}
		if s.cfg.Processors != nil {
			out = append(out, routeInfo{m, s.cfg.ProcessorPrefix + "{slug}/{stream}", OpProcessorRead},
				routeInfo{m, ProcessorsPath, OpList}) // the processor listing (processorlist.go)
		}
		out = append(out, routeInfo{m, ListPath, OpList}, routeInfo{m, InfoPath, OpRead},
			routeInfo{m, s.cfg.Prefix + "__ds/jwks.json", OpRead})
	}
	if s.cfg.Processors != nil {
		// An operator's verb on one processor (server/ops.go).
		out = append(out, routeInfo{http.MethodPost, s.cfg.ProcessorPrefix + "{slug}/{stream}?op={op}", OpProcessorOps})
		// A bulk verb over the streams a pattern matches (server/ops.go).
		out = append(out, routeInfo{http.MethodPost, s.cfg.ProcessorPrefix + "{slug}/?op={op}&pattern={pattern}", OpProcessorOps})
		// The operators' verbs on one processor, from the audit (server/ops.go).
		for _, m := range readOnlyMethods {
			out = append(out, routeInfo{m, s.cfg.ProcessorPrefix + "{slug}/{stream}?audit=1", OpProcessorOps})
			// Its parked events (server/parked.go).
			out = append(out, routeInfo{m, s.cfg.ProcessorPrefix + "{slug}/{stream}?parked=1", OpProcessorOps})
		}
	}
	for _, m := range standardMethods {
		if op := methodOp(m); op != "" {
			out = append(out, routeInfo{m, s.cfg.Prefix + "{stream}", op})
		}
	}
	for _, rt := range subscriptionRoutes {
		p := s.cfg.Prefix + "__ds/subscriptions/{id}"
		switch {
		case rt.sub == "":
		case rt.sub[len(rt.sub)-1] == '/':
			p += "/" + rt.sub + "{name}"
		default:
			p += "/" + rt.sub
		}
		out = append(out, routeInfo{rt.method, p, rt.op})
	}
	return out
}
