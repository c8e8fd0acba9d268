package stream

// useLayers registers the layers built on the kernel (docs/store.md#the-kernel-and-its-layers)
// with it, while the store opens and before its writer starts: what each layer needs the kernel
// to run for it goes through the kernel's hooks (hooks.go), so the kernel names none of them.
func (s *Store) useLayers() {
	s.useEventFace() // events.go: Close stops the event face's subscriptions and alarms
	s.usePause()     // pause.go: the paused stream's admission check and the fold of control events
	s.useRecent()    // recent.go: the recent events an engine opening next reads from memory
	s.useFeeds()     // feed.go: the event face's feeds hear other processes' commits
}
