package kernel

import "github.com/foldstream/foldstream/stream/driver"

// The kernel's hooks (docs/store.md#the-kernel-and-its-layers). A feature layered on the kernel
// (pausing, the event face's recent events and feeds) registers what it needs here, or holds a
// stream (hold.go), instead of being named by the writer or the insert path. Hooks are registered
// while the store is opened (Open's use) and never change afterwards, so the writer reads them
// without a lock.

// AdmissionCheck is asked once per batch, before any message of it takes an offset (Tx.Admit,
// record.go), with the stream's row as the write sees it. It returns the judge of the batch's
// fresh messages, or nil when it has nothing to judge (the common case costs one call per batch).
// The judge is asked for each fresh message in batch order, after the message's idempotency check
// (a duplicate is echoed, never judged) and before its offset precondition; a non-nil error
// refuses the whole batch, and nothing of it is written.
type AdmissionCheck func(row *driver.Stream) func(p *Pending) error

// RecordEffect runs in a write's transaction once a batch's durable record is written to the
// stream (WriteRecord), with the stream's tail moved past it. It may write more in the same
// transaction (the stream row) and change m, the write's staged view of the stream, which takes
// effect only if the write and its group commit; an error refuses the write.
type RecordEffect func(t *Tx, m *StreamState, batch []Pending, adm []Admitted) error

// AppliedEffect runs on the writer goroutine after a group committed, once for each stream a
// write of it changed and did not delete, with the stream's state as it now stands in the
// writer's cache (m must not be changed). It runs before the writes' after-commit effects and
// must not block.
type AppliedEffect func(path string, m *StreamState)

// RemoteEffect runs on the driver's listener for every notification of another process's
// commit (n.StreamID 0: any stream may have changed), before the stream's tail cache entry is
// brought up to it and its waiters are woken. It must not block for long: the listener delivers
// the notifications one by one.
type RemoteEffect func(n driver.Notification)

// closeEffect is a layer's part in Close: stop runs at once, right after intake stopped (nothing
// new may start after it), and drain runs in Close's drain before the writer's queue is run out
// (what the layer started must finish). Either may be nil.
type closeEffect struct {
	stop, drain func()
}

// kernelHooks are the hooks the store's features registered.
type kernelHooks struct {
	admission []AdmissionCheck
	recorded  []RecordEffect
	applied   []AppliedEffect
	remote    []RemoteEffect
	closing   []closeEffect
}

// CheckAdmission registers an admission check for every batch appended to any stream.
func (s *Store) CheckAdmission(c AdmissionCheck) { s.hooks.admission = append(s.hooks.admission, c) }

// OnRecorded registers an effect of every durable record appended to any stream.
func (s *Store) OnRecorded(e RecordEffect) { s.hooks.recorded = append(s.hooks.recorded, e) }

// OnApplied registers an effect of every committed change of a stream's state.
func (s *Store) OnApplied(e AppliedEffect) { s.hooks.applied = append(s.hooks.applied, e) }

// OnRemoteCommit registers an effect of every notification of another process's commit.
func (s *Store) OnRemoteCommit(e RemoteEffect) { s.hooks.remote = append(s.hooks.remote, e) }

// OnClose registers a layer's part in Close (see closeEffect).
func (s *Store) OnClose(stop, drain func()) {
	s.hooks.closing = append(s.hooks.closing, closeEffect{stop: stop, drain: drain})
}

// judgesOf returns the judges the admission checks give a batch of the stream with row (nil: none).
func (s *Store) judgesOf(row *driver.Stream) []func(p *Pending) error {
	var judges []func(p *Pending) error
	for _, c := range s.hooks.admission {
		if j := c(row); j != nil {
			judges = append(judges, j)
		}
	}
	return judges
}
