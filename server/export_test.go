package server

// LiveReaders returns how many live reads (long-poll, SSE) the server is serving now (tests only).
func (s *Server) LiveReaders() int64 { return s.liveReaders.Load() }
