package foldstream

import "github.com/foldstream/foldstream/foldtype"

// Status reports the engine's slug, version, cursor and live revision, and a write of its own it
// is sending again through a database blip. It neither waits nor
// catches up: it is a cheap look at where the engine is now.
func (e *Engine[S]) Status() foldtype.ProcessorStatus {
	st := foldtype.ProcessorStatus{Slug: e.c.Slug(), Version: e.c.Version(), Offset: e.ReducedThroughOffset(), Open: true}
	if e.live != nil {
		st.Rev = e.live.Snapshot().Rev
	}
	e.mu.Lock()
	if f := e.workFailed; f != nil {
		st.WorkFailed = &foldtype.ProcessorError{Code: f.Code, Message: f.Message}
	}
	st.Skipped = e.skippedLocked()
	e.mu.Unlock()
	st.WaitingForStore = e.retry.waits.oldest()
	return st
}
