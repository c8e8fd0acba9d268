package host

// OpenPatternEngines returns how many engines of pattern registrations are open now: the count
// Config.MaxOpenEngines caps (tests only).
func (h *Host) OpenPatternEngines() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lru.Len()
}
