package server

// LiveReaders returns how many live reads (long-poll, SSE) the server is serving now (tests only).
func (s *Server) LiveReaders() int64 { return s.liveReaders.Load() }

// LiveHubs returns how many stream paths have a live-state delta hub on this server (tests only).
func (s *Server) LiveHubs() int {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	return len(s.live.hubs)
}
