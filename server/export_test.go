package server

// LiveReaders returns how many live reads (long-poll, SSE) the server is serving now (tests only).
func (s *Server) LiveReaders() int64 { return s.liveReaders.Load() }

// LiveHubs returns how many stream paths have a live-state delta hub on this server (tests only).
func (s *Server) LiveHubs() int {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	return len(s.live.hubs)
}

// Route is one route the server serves: a method, a path pattern ({stream}, {slug}, {id}, {name}
// stand for path segments) and the operation Config.Authorize sees ("" for a route that needs no
// credentials).
type Route struct {
	Method, Pattern string
	Op              Operation
}

// Routes returns every route s serves, from the server's own routing tables (routes.go).
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.routes() {
		out = append(out, Route{r.method, r.pattern, r.op})
	}
	return out
}

// AnsweredCodes returns every code the server answers a request with, and its status (tests only).
func AnsweredCodes() map[string]int {
	out := map[string]int{}
	for c, s := range statusByCode {
		out[string(c)] = s
	}
	return out
}
