package server

import "time"

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

// ShiftDeliveryClock moves the monotonic clock the subscription deliverer checks its lease's
// local deadline against by d, as a freeze of the process for d would (tests only).
func (s *Server) ShiftDeliveryClock(d time.Duration) {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	s.subs.monoNow = func() time.Time { return time.Now().Add(d) }
}
