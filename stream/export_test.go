package stream

import "context"

// CachedStreams returns how many streams the writer keeps in memory (read on the writer).
func CachedStreams(s *Store) int {
	n := 0
	_ = s.write(context.Background(), func(t *tx) error {
		n = t.s.ws.streams.len()
		return nil
	})
	return n
}
