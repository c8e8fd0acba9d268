package host

// OpenPatternEngines returns how many engines of pattern registrations are open now: the count
// Config.MaxOpenEngines caps (tests only).
func (h *Host) OpenPatternEngines() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lru.Len()
}

// SetBulkPage makes h's bulk verbs list n streams at a time, so a test walks many pages over
// few streams.
func SetBulkPage(h *Host, n int) { h.bulkPage = n }

// PreferredNode returns which of the member node ids the lease of processor slug on path goes
// to when every member is live (the rendezvous rule nodes follow), so a test can wait until a
// cluster settled.
func PreferredNode(members []string, path, slug string) string {
	return preferredOf(members, procKey{path, slug})
}

// SlotRefs returns how many uses hold the slot of processor slug on path now (-1: no slot), so a
// test can wait until an opening catch-up let its engine go.
func (h *Host) SlotRefs(path, slug string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl := h.slots[procKey{path, slug}]; sl != nil {
		return sl.refs
	}
	return -1
}
