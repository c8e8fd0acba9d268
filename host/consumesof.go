package host

// ConsumesOf returns the event types processor slug consumes on the stream at path (nil: every
// durable event; docs/engine.md#the-consumes-rule) and whether such a processor is registered
// there. The server's processor listing counts a processor's lag in the events it consumes: an
// event it does not consume reaches it only inside its next push, so its offset may stay before
// such events without anything left to do.
func (h *Host) ConsumesOf(path, slug string) ([]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	reg := h.registrationFor(path, slug)
	if reg == nil {
		return nil, false
	}
	return reg.consumes, true
}
