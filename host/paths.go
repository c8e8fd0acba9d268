package host

import "sort"

// ProcessorPaths returns, sorted, the paths of the streams the host runs a processor on right
// now: every exact registration's path, and every stream a pattern registration holds an engine
// open (or parked) on. With ProcessorsOn it lets an operator's tool (the server's metrics) report
// every running processor without listing the store. It neither waits nor opens anything; it
// returns nil once the host is shut down.
func (h *Host) ProcessorPaths() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return nil
	}
	seen := make(map[string]bool, len(h.exact)+len(h.slots))
	for key := range h.exact {
		seen[key.path] = true
	}
	for key := range h.slots {
		seen[key.path] = true
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
