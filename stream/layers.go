package stream

import "github.com/foldstream/foldstream/stream/driver"

// useLayers sets up the layers built on the kernel (docs/store.md#the-kernel-and-its-layers)
// while the store opens, before its writer and its listener start: what each layer needs the
// kernel to run for it goes through the kernel's hooks (hooks.go), so the kernel names none of
// them.
func (s *Store) useLayers() {
	// The two faces (faces.go) and the subscription store (subscriptionstore.go).
	s.events, s.protocol = &Events{s: s}, &Protocol{s: s}
	s.subs = &SubscriptionStore{s: s, leases: map[string]driver.Lease{}}
	// events.go: the event face's state; Close stops its subscriptions and alarms.
	s.useEventFace()
	// pause.go: the paused stream's admission check and the fold of control events.
	s.usePause()
	// recent.go: the recent events an engine opening next reads from memory.
	s.useRecent()
	// feed.go: the event face's feeds hear other processes' commits.
	s.useFeeds()
}
